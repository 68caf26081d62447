"""Every ```python block of the documentation, as the program a reader would paste.

A block is a whole program: it runs as it stands, pasted into a file, with
no harness to give it nodes or servers, and no top-level ``await`` (which
only ``python -m trio``'s prompt accepts).  A block that is a fragment of
a program is therefore refused, and so is an HTML comment naming a harness
(``<!-- snippet: ... -->``), which an earlier version of this collector
took to wrap fragments.

Used by ``tests/docs/test_docs_snippets.py``; ``python tests/support/doc_snippets.py``
lists the blocks found.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("README.md", "docs/**/*.md", "patterns/*.md")

_BLOCK = re.compile(r"^```python\n(?P<code>.*?)^```", re.S | re.M)
HARNESS_COMMENT = re.compile(r"<!--\s*snippet:")


@dataclass(frozen=True)
class Snippet:
    path: str
    line: int
    code: str

    @property
    def name(self) -> str:
        return f"{self.path}:{self.line}"

    def program(self) -> str:
        """The program that runs this block: the block itself, as pasted."""
        return self.code


def snippets() -> list[Snippet]:
    """Every ```python block in the documentation, in file order."""
    found = []
    for pattern in SOURCES:
        for path in sorted(ROOT.glob(pattern)):
            text = path.read_text()
            for match in _BLOCK.finditer(text):
                line = text.count("\n", 0, match.start("code"))
                found.append(Snippet(str(path.relative_to(ROOT)), line, match["code"]))
    return found


if __name__ == "__main__":
    for snippet in snippets():
        print(snippet.name, len(snippet.code.splitlines()), "lines")
