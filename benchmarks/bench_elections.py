"""Leader elections between real processes: how often a group agrees, and how fast.

Four agents start at once on a veth pair between two network namespaces
this run creates (zyre only ever runs inside them), all contesting group
G: four zyre nodes (``tests/interop/zyre_agent.c`` over libzyre), two
zyre and two trizre, or four trizre (``tests/interop/trizre_agent.py``).
A round succeeds when every agent has reported LEADER naming the lowest
id; then that agent stops and the round succeeds again when the other
three name the next lowest.  zyre has no election timeout: a zyre group
that has not agreed within ``--patience`` seconds never will (its count
is stuck until the membership changes).

    .venv/bin/python benchmarks/bench_elections.py [--rounds 20] [--patience 40]

Needs root (namespaces) and zyre built (``make zyre``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests import netns
from tests.interop import trizre_agent_command, zyre_agent_command, zyre_unavailable
from tests.netns import Agent
from tests.test_interop_zyre import ZyreAgent

MIXES = {"zyre": "zzzz", "mixed": "ztzt", "trizre": "tttt"}
SLOW_REELECTION = 5.0  # s: the election timeout; a re-election past it is worth a look (--keep)


def node_id(agent: Agent) -> str:
    return uuid.UUID(agent.uuid).hex.upper()


def start(
    kind: str, name: str, ns: netns.Namespace, seconds: float, agent_log: bool = False
) -> Agent:
    """One agent; ``agent_log``: a trizre agent prints trizre's DEBUG log as events."""
    if kind == "z":
        argv = zyre_agent_command(
            name, ns.interface, ("G",), {}, max_seconds=seconds, extra=("--contest", "G")
        )
        return ZyreAgent(argv, namespace=ns, label=name)
    argv = trizre_agent_command(
        name,
        ("G",),
        {},
        max_seconds=seconds,
        extra=("--contest", "G", "--interface", ns.interface, *(["--log"] if agent_log else [])),
    )
    return Agent(argv, namespace=ns, label=name)


def agreed(agents: list[Agent], leader: Agent, since: float, patience: float) -> float | None:
    """Seconds after ``since`` until every agent named ``leader``; None if one never did."""
    want = node_id(leader)
    last = since
    deadline = since + patience
    for agent in agents:
        try:
            event = agent.expect(
                lambda e: (
                    e.get("event") == "LEADER"
                    and e["_t"] > since
                    and uuid.UUID(str(e["peer"])).hex.upper() == want
                ),
                max(0.0, deadline - time.monotonic()),
            )
        except AssertionError:
            return None
        last = max(last, event["_t"])
    return last - since


def one_round(
    mix: str, patience: float, keep: Path | None = None, agent_log: bool = False
) -> dict[str, float | None]:
    """One formation and one re-election; with ``keep``, what each agent said if one failed."""
    result: dict[str, float | None] = {"formed": None, "reelected": None}
    with netns.open_netns_pair() as (a, b):
        spaces = [a, b, a, b]
        agents = [
            start(kind, f"{kind}{i}", spaces[i], 3 * patience, agent_log)
            for i, kind in enumerate(mix)
        ]
        try:
            began = min(agent.started()["_t"] for agent in agents)
            ranked = sorted(agents, key=node_id)
            result["formed"] = agreed(agents, ranked[0], began, patience)
            if result["formed"] is not None:
                stopped = time.monotonic()
                ranked[0].stop()
                result["reelected"] = agreed(ranked[1:], ranked[1], stopped, patience)
            return result
        finally:
            for agent in agents:
                agent.stop()
            slow = result["reelected"] is None or result["reelected"] > SLOW_REELECTION
            if keep is not None and slow:
                _keep(keep, agents, result)


def _keep(directory: Path, agents: list[Agent], result: dict[str, float | None]) -> None:
    """Every event each agent printed, and its stderr: a failed round's evidence."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "result.json").write_text(json.dumps(result) + "\n")
    for agent in agents:
        lines = [json.dumps(event) for event in agent.history]
        (directory / f"{agent.label}.jsonl").write_text("\n".join(lines) + "\n")
        (directory / f"{agent.label}.stderr").write_text("\n".join(agent.stderr_lines) + "\n")


def summary(name: str, rounds: list[dict[str, float | None]]) -> dict[str, Any]:
    formed = [r["formed"] for r in rounds if r["formed"] is not None]
    again = [r["reelected"] for r in rounds if r["reelected"] is not None]
    return {
        "mix": name,
        "rounds": len(rounds),
        "formed_agree": len(formed),
        "reelected_agree": len(again),
        "formed_median_s": round(statistics.median(formed), 2) if formed else None,
        "formed_max_s": round(max(formed), 2) if formed else None,
        "formed_over_5s": sum(t > 5 for t in formed),
        "reelected_median_s": round(statistics.median(again), 2) if again else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--patience", type=float, default=40.0)
    parser.add_argument("--mix", action="append", choices=sorted(MIXES))
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--keep",
        type=Path,
        help="save here the agents' events of rounds whose re-election failed or took over 5 s",
    )
    parser.add_argument(
        "--agent-log", action="store_true", help="trizre agents print trizre's debug log"
    )
    args = parser.parse_args()
    reason = netns.netns_available() or zyre_unavailable()
    if reason:
        print(f"bench_elections: SKIPPED, cannot run here: {reason}", file=sys.stderr)
        return 0
    results = []
    for name in args.mix or ["zyre", "mixed", "trizre"]:
        rounds = []
        for i in range(args.rounds):
            keep = None if args.keep is None else args.keep / f"{name}-round-{i}"
            rounds.append(one_round(MIXES[name], args.patience, keep, args.agent_log))
            print(f"{name} round {i}: {rounds[-1]}", file=sys.stderr, flush=True)
        results.append(summary(name, rounds))
        print(json.dumps(results[-1]), flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
