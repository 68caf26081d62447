"""Issue 32 against real zyre: two zyre and two trizre contesters end on one leader.

Two zyre agents (zyre's default timers) in one namespace, two trizre nodes
in one process in the other, every node contesting from its start; each
node's *last* LEADER before anyone stops must name the lowest id
(``benchmarks/bench_elections.py --settle`` runs the same rounds, and its
variants, for ``make bench``).  Rounds run a few at a time, each in its
own pair of namespaces.  trizre's election timeout is shortened so that a
repair (two timeouts after a decision) and its rerun end well within a
round.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from benchmarks.bench_elections import settle_round
from tests.interop import zyre_unavailable
from tests.support import netns

_reason = netns.netns_available() or zyre_unavailable()
pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(_reason is not None, reason=f"zyre interop: {_reason}"),
]

ROUNDS = 10  # a failure in one round of three shows in ten with >98% odds
AT_ONCE = 5
SETTLE = 9.0  # s per round: formation, a timeout, a repair and its rerun fit
ELECTION_TIMEOUT = 2.0


def test_two_zyre_and_two_trizre_in_one_process_end_on_one_leader() -> None:
    def one(_: int) -> dict[str, Any]:
        return settle_round(SETTLE, election_timeout=ELECTION_TIMEOUT)

    with ThreadPoolExecutor(AT_ONCE) as pool:
        rounds = list(pool.map(one, range(ROUNDS)))
    failed = [r for r in rounds if r["outcome"] != "agree"]
    assert failed == [], failed
