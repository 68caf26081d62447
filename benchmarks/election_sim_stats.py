"""The simulated election figures of docs/elections.md, reproduced (no network: seconds).

Groups form on tests/support/election_sim.py's simulated network (seeded, so the
counts are exact), then the leader leaves.  Printed per mix: formations
whose every node reported the lowest contester, re-elections likewise,
and for trizre-only groups how many elections needed the timeout.

    .venv/bin/python benchmarks/election_sim_stats.py [--seeds 2000]
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.election_sim import Network
from trizre.sansio._peer import node_id


def four(zyre: int, seeds: int) -> tuple[Counter[str], Counter[str]]:
    formed: Counter[str] = Counter()
    again: Counter[str] = Counter()
    for seed in range(seeds):
        net = Network(random.Random(seed), 4, 4, zyre=zyre)
        net.meet()
        net.settle()
        formed[net.outcome()] += 1
        if net.outcome() == "agree":
            net.leave(min(net.contesters, key=node_id))
            net.settle()
            again[net.outcome()] += 1
    return formed, again


def trizre_only(seeds: int) -> tuple[Counter[str], int, int]:
    outcomes: Counter[str] = Counter()
    elections = slow = 0
    for seed in range(seeds):
        rng = random.Random(seed)
        n = rng.randint(2, 8)
        net = Network(rng, n, rng.randint(1, n))
        net.meet()
        net.settle()
        outcomes[net.outcome()] += 1
        elections += 1
        slow += max(net.elected_at.get(u, 0.0) for u in net.alive) > 4.9
        if len(net.contesters) > 1 and n > 2:
            began = net.now
            net.leave(min(net.contesters, key=node_id))
            net.settle()
            outcomes["re-election " + net.outcome()] += 1
            elections += 1
            slow += max(net.elected_at.get(u, 0.0) for u in net.alive) - began > 4.9
    return outcomes, elections, slow


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=2000)
    args = parser.parse_args()
    for label, zyre in (("4 zyre", 4), ("2 zyre + 2 trizre", 2), ("4 trizre", 0)):
        formed, again = four(zyre, args.seeds)
        print(f"{label}, all contesting: formed {dict(formed)}; leader left: {dict(again)}")
    outcomes, elections, slow = trizre_only(args.seeds * 5 // 2)
    print(f"2-8 trizre: {dict(outcomes)}; {slow} of {elections} elections needed the timeout")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
