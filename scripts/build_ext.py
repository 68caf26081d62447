"""Compile trizre's optional extension (``trizre/transport/_zread.pyx``) in place.

    python scripts/build_ext.py [--optional]

Cython turns the ``.pyx`` into C in a temporary directory and the C
compiler builds ``trizre/transport/_zread.<abi>.so`` next to it, where an
editable install imports it.  Without it trizre reads its inboxes in pure
Python, with the same behaviour, slower (docs/benchmarks.md).  Fails if
Cython or a compiler is missing, unless ``--optional``: then it says so
and exits 0 (``make demo``'s install, which must work without them).
Either way a failed build leaves no older build in place.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "trizre" / "transport" / "_zread.pyx"


def build() -> Path:
    from Cython.Build import cythonize  # noqa: PLC0415 - a build tool, not a dependency
    from setuptools import Distribution, Extension  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as temp:
        extension = Extension("trizre.transport._zread", [str(SOURCE)])
        (module,) = cythonize([extension], build_dir=temp, quiet=True)
        command = Distribution({"ext_modules": [module]}).get_command_obj("build_ext")
        command.build_temp = command.build_lib = temp
        command.ensure_finalized()
        command.run()
        built = Path(command.get_ext_fullpath(module.name))
        target = SOURCE.with_name(built.name)
        # A new file in its place, not the old one rewritten: a process
        # running with the old one mapped would crash (SIGBUS).
        staged = target.with_name(f".{target.name}.new")
        shutil.copyfile(built, staged)
        os.replace(staged, target)
        return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--optional", action="store_true", help="exit 0 if it cannot build")
    args = parser.parse_args()
    try:
        built = build()
    except Exception as exc:  # ImportError (no Cython), CompileError, LinkError, ...
        # One built from an older source must not stay in its place.
        for stale in SOURCE.parent.glob("_zread.*.so"):
            stale.unlink()
        if not args.optional:
            raise
        print(f"trizre: compiled inbox read not built ({exc}); pure Python it is", file=sys.stderr)
        return
    print(f"built {built.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
