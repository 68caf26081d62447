"""Every ```python block of the documentation, made into a program that runs.

A block stands alone unless an HTML comment just before it names a
harness: ``<!-- snippet: patterns -->``.  A harness gives a fragment what
its text says exists (a node on loopback, the servers it talks to) and
runs it as the body of an ``async def`` under ``trio.fail_after``, so
fragments may ``await`` and ``async with`` at top level.  Every node a
harness opens beacons on loopback.

Used by ``tests/test_docs_snippets.py``; ``python tests/doc_snippets.py``
lists the blocks found.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("README.md", "docs/**/*.md", "patterns/*.md")

_BLOCK = re.compile(
    r"(?:<!--\s*snippet:\s*(?P<harness>[\w-]+)\s*-->\s*\n)?^```python\n(?P<code>.*?)^```",
    re.S | re.M,
)


@dataclass(frozen=True)
class Snippet:
    path: str
    line: int
    harness: str | None
    code: str

    @property
    def name(self) -> str:
        return f"{self.path}:{self.line}"

    def program(self) -> str:
        """The program that runs this block."""
        if self.harness is None:
            return self.code
        prelude = HARNESSES[self.harness]
        body = textwrap.indent(self.code, "    ")
        return f"{_COMMON}\n{prelude}\n\nasync def __snippet__():\n{body}\n    pass\n\n{_MAIN}"


def snippets() -> list[Snippet]:
    """Every ```python block in the documentation, in file order."""
    found = []
    for pattern in SOURCES:
        for path in sorted(ROOT.glob(pattern)):
            text = path.read_text()
            for match in _BLOCK.finditer(text):
                line = text.count("\n", 0, match.start("code"))
                found.append(
                    Snippet(str(path.relative_to(ROOT)), line, match["harness"], match["code"])
                )
    return found


_COMMON = """\
import contextlib
import trio
import trizre
from trizre import patterns
from trizre.patterns import RetryPolicy


async def echo(request):
    return b"".join(request.body)


transfer = handler = echo
"""

_MAIN = """\
async def __main__():
    with trio.fail_after(60):
        async with context() as names:
            globals().update(names)
            await __snippet__()


trio.run(__main__)
"""

HARNESSES: dict[str, str] = {
    # A node named "app" on loopback.
    "patterns": """\
@contextlib.asynccontextmanager
async def context():
    async with trizre.open_node("app", interface="lo") as node:
        yield {"node": node}
""",
    # "node", and servers s1, s2, s3 and two workers of "calc" running echo.
    "freelance": """\
@contextlib.asynccontextmanager
async def context():
    async with contextlib.AsyncExitStack() as stack:
        for name in ("s1", "s2", "s3", "c1", "c2"):
            server = await stack.enter_async_context(trizre.open_node(name, interface="lo"))
            service = "calc" if name.startswith("c") else None
            await stack.enter_async_context(patterns.open_server(server, echo, service=service))
        node = await stack.enter_async_context(trizre.open_node("app", interface="lo"))
        for name in ("s1", "s2", "s3", "c1", "c2"):
            await node.wait_for_peer(name)
        yield {"node": node}
""",
    # "node", "titanic_node", and a worker of "pay" with a shared reply cache.
    "titanic": """\
@contextlib.asynccontextmanager
async def context():
    async with (
        trizre.open_node("worker", interface="lo") as worker,
        patterns.open_server(
            worker, echo, service="pay", reply_cache=patterns.ReplyCache(per_client=False)
        ),
        trizre.open_node("titanic", interface="lo") as titanic_node,
        trizre.open_node("app", interface="lo") as node,
    ):
        yield {"node": node, "titanic_node": titanic_node}
""",
}


if __name__ == "__main__":
    for snippet in snippets():
        print(snippet.name, snippet.harness or "-", len(snippet.code.splitlines()), "lines")
