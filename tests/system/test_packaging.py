"""What a user installs: the wheel's and sdist's contents, a fresh install, Linux only.

The build runs offline (``--no-isolation``: hatchling comes with the dev
extra), and the fresh venv gets the wheel without dependencies, reading
them from this venv's site-packages through a ``.pth`` line (which does
not process this venv's own ``.pth`` files, so the editable trizre stays
out of sight).
"""

from __future__ import annotations

import email
import re
import subprocess
import sys
import sysconfig
import tarfile
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

import trizre

ROOT = Path(__file__).resolve().parents[2]


def test_import_elsewhere_than_linux_says_why() -> None:
    result = subprocess.run(
        [sys.executable, "-c", "import sys; sys.platform = 'darwin'; import trizre"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert "ImportError: trizre runs on Linux only (this is 'darwin')" in result.stderr


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return out


def test_the_wheel_holds_the_package_its_license_and_metadata(dist: Path) -> None:
    (wheel,) = dist.glob("trizre-*.whl")
    assert wheel.name == f"trizre-{trizre.__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        info = f"trizre-{trizre.__version__}.dist-info"
        metadata = email.message_from_bytes(archive.read(f"{info}/METADATA"))
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
    for wanted in (
        "trizre/__init__.py",
        "trizre/__main__.py",
        "trizre/py.typed",
        "trizre/cli/__init__.py",
        "trizre/cli/watch.html",
        "trizre/cli/watch.js",
        "trizre/cli/watch.css",
        "trizre/patterns/__init__.py",
        "trizre/audit/cli.py",
        "trizre/wire/__init__.py",
        f"{info}/licenses/LICENSE",
    ):
        assert wanted in names, wanted
    tops = {name.split("/", 1)[0] for name in names}
    assert tops == {"trizre", info}, tops  # no tests, benchmarks or examples
    assert not any("__pycache__" in name or name.endswith(".pyc") for name in names)
    assert "trizre = trizre.cli:main" in entry_points
    classifiers = metadata.get_all("Classifier") or []
    assert "Operating System :: POSIX :: Linux" in classifiers
    # Claim what CI tests: the one Python it runs on (a version claimed but
    # never run is a promise nobody checked).
    claimed = {
        c.rsplit(" :: ", 1)[1] for c in classifiers if re.fullmatch(r".*Python :: 3\.\d+", c)
    }
    assert claimed == {f"{sys.version_info.major}.{sys.version_info.minor}"}
    assert metadata["Requires-Python"] == ">=3.11"
    assert metadata["License-Expression"] == "MPL-2.0"
    assert any(url.startswith("Changelog, ") for url in metadata.get_all("Project-URL") or [])
    readme = metadata.get_payload()
    assert readme.startswith("# trizre")  # the README, on the index
    assert metadata["Description-Content-Type"] == "text/markdown"
    # On the index a relative link (docs/node.md, LICENSE) leads nowhere.
    links = re.findall(r"\]\(([^)]+)\)", readme)
    assert "https://github.com/trizre/trizre/blob/main/docs/getting-started.md" in links
    assert all(link.startswith(("https://", "#")) for link in links), links


def test_the_sdist_can_build_and_test_and_holds_nothing_local(dist: Path) -> None:
    (sdist,) = dist.glob("trizre-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    for wanted in ("pyproject.toml", "LICENSE", "CHANGELOG.md", "README.md", "Makefile"):
        assert wanted in names, wanted
    assert "trizre/__init__.py" in names and "tests/conftest.py" in names
    assert not any(n.startswith((".venv", "site/", "dist/", ".git/")) for n in names)
    assert not any("__pycache__" in n for n in names)


def test_the_sdist_holds_every_tracked_file_it_includes(dist: Path) -> None:
    """What git tracks under the sdist's include list is in it (a test's vectors too)."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (an unpacked sdist): nothing to compare with")
    pathspec = pytest.importorskip("pathspec")  # hatchling's own matcher
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    sdist_config = config["tool"]["hatch"]["build"]["targets"]["sdist"]
    include = pathspec.GitIgnoreSpec.from_lines(sdist_config["include"])
    exclude = pathspec.GitIgnoreSpec.from_lines(sdist_config.get("exclude", []))
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
    ).stdout.decode()
    wanted, unwanted = set(), set()
    for name in filter(None, tracked.split("\0")):
        if not include.match_file(name):
            continue
        if exclude.match_file(name):
            unwanted.add(name)
            continue
        path = ROOT / name
        if path.is_dir():  # a symlink to a directory: its files, under its name
            wanted |= {f"{name}/{f.relative_to(path)}" for f in path.rglob("*") if f.is_file()}
        else:
            wanted.add(name)
    (sdist,) = dist.glob("trizre-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert "patterns/vectors/envelope.json" in wanted  # the comparison sees them
    assert not wanted - names, sorted(wanted - names)
    assert "tests/interop/vendor/czmq-4.2.1.tar.gz" in unwanted  # a test peer's source
    assert not unwanted & names, sorted(unwanted & names)


def test_the_wheel_installs_in_a_fresh_venv_and_runs(dist: Path, tmp_path: Path) -> None:
    (wheel,) = dist.glob("trizre-*.whl")
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel)],
        check=True,
        timeout=300,
    )
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    # Dependencies from this venv, as a plain path (its .pth files are not read).
    (Path(purelib) / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    where = subprocess.run(
        [str(python), "-c", "import trizre; print(trizre.__file__); print(trizre.__version__)"],
        cwd=tmp_path,  # not the checkout, whose trizre/ would be imported instead
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    assert where == [str(Path(purelib) / "trizre" / "__init__.py"), trizre.__version__]
    version = subprocess.run(
        [str(env_dir / "bin" / "trizre"), "--version"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert version.stdout == f"trizre {trizre.__version__}\n"
