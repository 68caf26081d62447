"""The trace writer: :class:`Tracer` records one node's lines to a file.

Recording must cost little, so lines are formatted by hand (no
``json.dumps`` on the per-message path), buffered, and written in batches:
at most every ``flush_interval`` seconds or ``flush_lines`` lines, and on
close.  A process killed with SIGKILL loses at most that last batch.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Final, final
from uuid import UUID

from ._contract import SCHEMA_VERSION

__all__ = ["Tracer"]

_OPEN: Final = f'{{"v":{SCHEMA_VERSION},"t":'


@final
class Tracer:
    """Writes one node's trace lines to ``directory/<name>-<uuid>.jsonl``.

    The name is made safe for a file name, and prefixed with ``node`` when
    it starts with ``_`` or ``.`` (``node_cli-<uuid>.jsonl``): Spark skips
    such files, and the audit would refuse them.

    ``max_bytes`` bounds one file: past it the file is renamed
    ``...<n>.jsonl`` (n = 1, 2, ... in order of age) and a new one begun;
    nothing is deleted.  Bad input: a ``max_bytes`` below 4096 raises
    ``ValueError``; an unwritable directory raises ``OSError`` at once.
    Not thread-safe: one node, one Trio thread.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        node: UUID,
        name: str,
        *,
        max_bytes: int = 64 * 1024 * 1024,
        flush_interval: float = 0.1,
        flush_lines: int = 4096,
    ) -> None:
        if max_bytes < 4096:
            raise ValueError(f"trace max_bytes must be at least 4096, got {max_bytes}")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:64] or "node"
        if safe.startswith(("_", ".")):
            safe = "node" + safe  # Spark (the audit) never reads files named _* or .*
        self._stem = f"{safe}-{node.hex}"
        self.path = self.directory / f"{self._stem}.jsonl"
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - held open
        self._written = self._file.tell()
        self._rotations = 0
        self._max_bytes = max_bytes
        self._flush_interval = flush_interval
        self._flush_lines = flush_lines
        self._buffer: list[str] = []
        self._last_flush = time.monotonic()
        # Everything after "t" and "m" that is the same on every line.
        self._head = f',"node":"{node.hex}","name":{json.dumps(name)},"kind":"'
        self.closed = False

    # -------------------------------------------------------------- writing

    def _stamp(self) -> str:
        return f'{_OPEN}{time.time():.6f},"m":{time.monotonic():.6f}{self._head}'

    def record(self, kind: str, **fields: Any) -> None:
        """Record one event; ``fields`` are JSON values (UUIDs become hex)."""
        if self.closed:
            return
        parts = [self._stamp(), kind, '"']
        for key, value in fields.items():
            shown = value.hex if isinstance(value, UUID) else value
            parts.append(f',"{key}":{json.dumps(shown)}')
        parts.append("}\n")
        self._append("".join(parts))

    def message(self, kind: str, peer_hex: str, seq: int, group: str | None = None) -> None:
        """The per-message fast path: whisper/shout sent/received."""
        if self.closed:
            return
        if group is None:
            self._append(f'{self._stamp()}{kind}","peer":"{peer_hex}","seq":{seq}}}\n')
        else:
            self._append(
                f'{self._stamp()}{kind}","peer":"{peer_hex}","group":{json.dumps(group)},'
                f'"seq":{seq}}}\n'
            )

    def _append(self, line: str) -> None:
        buffer = self._buffer
        buffer.append(line)
        if len(buffer) >= self._flush_lines or (
            time.monotonic() - self._last_flush >= self._flush_interval
        ):
            self.flush()

    def flush(self) -> None:
        """Write what is buffered (a few hundred KiB at most; page cache speed)."""
        if not self._buffer or self.closed:
            return
        data = "".join(self._buffer)
        self._buffer.clear()
        self._last_flush = time.monotonic()
        self._file.write(data)
        self._file.flush()
        self._written += len(data.encode("utf-8")) if not data.isascii() else len(data)
        if self._written >= self._max_bytes:
            self._rotate()

    def _rotate(self) -> None:
        self._file.close()
        self._rotations += 1
        self.path.rename(self.directory / f"{self._stem}.{self._rotations}.jsonl")
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
        self._written = 0

    def close(self) -> None:
        """Flush and close; later records are ignored.  Idempotent."""
        if self.closed:
            return
        self.flush()
        self.closed = True
        self._file.close()
