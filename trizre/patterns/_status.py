"""Status announcements: how pattern servers tell watchers what they are.

A watcher (``trizre watch``, the monitoring page) joins the ZRE group
:data:`STATUS_GROUP`.  Each pattern server SHOUTs its status to that group
when it starts and whenever it changes, and WHISPERs it to each watcher
that joins, so a watcher started late still learns it.  With no watcher in
the group nothing is sent: a SHOUT to a group without members costs no
message.

A status is two frames: :data:`MAGIC`, then a JSON object with at least
``"key"`` (which of the node's servers: ``"server"``, ``"service:NAME"``)
and ``"kind"`` (``"server"``, ``"service"`` or ``"bstar"``).  JSON because
it is read by people and by the browser, and because a watcher must
ignore fields it does not know (older or newer servers).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

STATUS_GROUP: Final = "trizre/status"
"""The group watchers join to receive status announcements."""

BSTAR_GROUP: Final = "trizre/bstar"
"""The group a Binary Star server belongs to while it serves (its partner checks it)."""

OWN_GROUPS: Final = frozenset({STATUS_GROUP, BSTAR_GROUP})
"""trizre's own groups: watchers list them apart from the application's groups."""

MAGIC: Final = b"TRIZRE-STATUS/1"
"""First frame of every status message."""

MAX_STATUS_BYTES: Final = 64 * 1024
"""A status longer than this is ignored on receipt (a peer's junk must not grow us)."""


def encode_status(status: Mapping[str, Any]) -> tuple[bytes, bytes]:
    """The frames of a status message.

    Raises:
        ValueError: ``status`` lacks ``"key"`` or ``"kind"``, or does not
            encode to JSON within :data:`MAX_STATUS_BYTES`.
    """
    if not isinstance(status.get("key"), str) or not isinstance(status.get("kind"), str):
        raise ValueError(f"a status needs str 'key' and 'kind': {status!r}")
    body = json.dumps(status, separators=(",", ":"), sort_keys=True).encode()
    if len(body) > MAX_STATUS_BYTES:
        raise ValueError(f"status of {len(body)} bytes exceeds {MAX_STATUS_BYTES}")
    return MAGIC, body


def decode_status(frames: Sequence[bytes]) -> dict[str, Any] | None:
    """The status in ``frames``, or ``None`` when they are not a valid status message."""
    if len(frames) != 2 or frames[0] != MAGIC or len(frames[1]) > MAX_STATUS_BYTES:
        return None
    try:
        status = json.loads(frames[1])
    except (UnicodeDecodeError, ValueError):
        return None
    if (
        not isinstance(status, dict)
        or not isinstance(status.get("key"), str)
        or not isinstance(status.get("kind"), str)
    ):
        return None
    return status
