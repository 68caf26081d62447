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

``--settle`` runs issue 32's scenario instead: two zyre nodes in one
namespace, two trizre nodes in one process in the other (``--split-trizre``:
one process each), every node contesting from its start with zyre's default
timers; after ``--settle-seconds`` each node's *last* LEADER before anyone
stops is compared. A round is a *split* when two nodes end on different
leaders. ``--lowest`` picks which side holds the lowest id (trizre's ids
are drawn to sort below or above zyre's), ``--late zyre|trizre`` starts
that side a second later; ``--variant NAME`` (repeatable) runs named ones.

    .venv/bin/python benchmarks/bench_elections.py --settle --rounds 100

Needs root (namespaces) and zyre built (``make zyre``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.interop import trizre_agent_command, zyre_agent_command, zyre_unavailable
from tests.support import netns
from tests.support.netns import Agent
from tests.support.zyre_talk import ZyreAgent

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


def _keep(directory: Path, agents: list[Agent], result: dict[str, Any]) -> None:
    """Every event each agent printed, and its stderr: a failed round's evidence."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "result.json").write_text(json.dumps(result) + "\n")
    for agent in agents:
        lines = [json.dumps(event) for event in agent.history]
        (directory / f"{agent.label}.jsonl").write_text("\n".join(lines) + "\n")
        (directory / f"{agent.label}.stderr").write_text("\n".join(agent.stderr_lines) + "\n")


NODES_AGENT = Path(__file__).resolve().parent.parent / "tests" / "interop" / "trizre_nodes_agent.py"
FIRST_DIGIT = {"any": "", "trizre": "0", "zyre": "F"}  # trizre ids below, or above, zyre's


def _trizre_nodes(
    ns: netns.Namespace,
    name: str,
    nodes: int,
    seconds: float,
    lowest: str,
    agent_log: bool,
    election_timeout: float = 5.0,
) -> Agent:
    """``nodes`` trizre nodes in one process, each contesting G from its start."""
    argv = [sys.executable, "-u", str(NODES_AGENT), "--name", name, "--nodes", str(nodes)]
    argv += ["--election-timeout", str(election_timeout)]
    argv += ["--contest", "G", "--group", "G", "--interface", ns.interface]
    argv += ["--max-seconds", str(seconds), "--uuid-first-digit", FIRST_DIGIT[lowest]]
    return Agent([*argv, *(["--log"] if agent_log else [])], namespace=ns, label=name)


_NETNS_SETUP = threading.Lock()


@contextlib.contextmanager
def _netns_pair() -> Iterator[netns.NetnsPair]:
    """``open_netns_pair``, safe for rounds run at once in threads.

    A pair's removal keeps killing what runs in its namespaces for a moment
    after they are gone, found by inode; a pair made meanwhile can get such
    an inode again (seen: its ``ip`` killed). Made and removed one at a time.
    """
    with _NETNS_SETUP:
        opened = netns.open_netns_pair()
        pair = opened.__enter__()
    try:
        yield pair
    finally:
        with _NETNS_SETUP:
            opened.__exit__(*sys.exc_info())


def settle_round(
    settle: float,
    *,
    split_trizre: bool = False,
    lowest: str = "any",
    late: str = "",
    keep: Path | None = None,
    agent_log: bool = False,
    election_timeout: float = 5.0,
) -> dict[str, Any]:
    """Issue 32's scenario once: every node's last LEADER after ``settle`` seconds.

    Two zyre agents in one namespace, two trizre nodes in the other (one
    process, or two with ``split_trizre``), all contesting G from the
    start; ``late`` ("zyre" or "trizre") starts that side a second after
    the other.  The outcome is ``agree`` (every node ends on the lowest
    id), ``split`` (two nodes end on different leaders), ``other`` (one
    leader, not the lowest) or ``unfinished`` (some node reported none).
    """
    with _netns_pair() as (a, b):
        agents: list[Agent] = []
        try:

            def zyre_side() -> None:
                for i in range(2):
                    argv = zyre_agent_command(
                        f"z{i}", a.interface, ("G",), {}, max_seconds=3 * settle,
                        extra=("--contest", "G"),
                    )  # fmt: skip
                    agents.append(ZyreAgent(argv, namespace=a, label=f"z{i}"))

            def trizre_side() -> None:
                for i, nodes in enumerate([1, 1] if split_trizre else [2]):
                    agents.append(
                        _trizre_nodes(
                            b, f"t{i}", nodes, 3 * settle, lowest, agent_log, election_timeout
                        )
                    )

            sides = [trizre_side, zyre_side] if late == "zyre" else [zyre_side, trizre_side]
            sides[0]()
            if late:
                for agent in agents:
                    agent.started()
                time.sleep(1.0)
            sides[1]()
            began = min(agent.started()["_t"] for agent in agents)
            time.sleep(max(0.0, began + settle - time.monotonic()))
        finally:
            # What counts is said before anyone stops: a node that sees a
            # peer stop elects again among those left, rightly.
            stopping = time.monotonic()
            for agent in agents:
                agent.stop()
    reports = _reports(agents, stopping)
    want = min(node for _, node in reports)
    result = {
        "outcome": _judge(reports),
        # As a harness that listens on while the others stop would judge:
        # trizre nodes that see both zyre nodes go elect among themselves.
        "outcome_listening_on": _judge(_reports(agents, math.inf)),
        "lowest": next(kind for kind, node in reports if node == want),
        "reports": {
            f"{kind} {node[:4]}": [x[:4] for x in said] for (kind, node), said in reports.items()
        },
    }
    if keep is not None and result["outcome"] != "agree":
        _keep(keep, agents, result)
    return result


def _reports(agents: list[Agent], until: float) -> dict[tuple[str, str], list[str]]:
    """Every node, as (kind, id): the leaders it reported before ``until``, in order."""
    reports: dict[tuple[str, str], list[str]] = {}
    for agent in agents:
        node_ids = agent.info.get("uuids", [agent.info.get("uuid")])
        kind = "zyre" if isinstance(agent, ZyreAgent) else "trizre"
        for i, hex_id in enumerate(node_ids):
            said = [
                uuid.UUID(str(e["peer"])).hex.upper()
                for e in agent.history
                if e.get("event") == "LEADER" and e.get("node", 0) == i and e["_t"] < until
            ]
            reports[(kind, uuid.UUID(str(hex_id)).hex.upper())] = said
    return reports


def _judge(reports: dict[tuple[str, str], list[str]]) -> str:
    """``agree``, ``split``, ``other`` or ``unfinished`` (see :func:`settle_round`)."""
    last = {said[-1] if said else None for said in reports.values()}
    if None in last:
        return "unfinished"
    if len(last) > 1:
        return "split"
    return "agree" if last == {min(node for _, node in reports)} else "other"


#: Issue 32's scenario ("main") and its variants, as settle_round's arguments.
VARIANTS: dict[str, dict[str, Any]] = {
    "main": {"split_trizre": False, "lowest": "any", "late": ""},
    "split-trizre": {"split_trizre": True, "lowest": "any", "late": ""},
    "zyre-lowest": {"split_trizre": False, "lowest": "zyre", "late": ""},
    "trizre-lowest": {"split_trizre": False, "lowest": "trizre", "late": ""},
    "zyre-late": {"split_trizre": False, "lowest": "any", "late": "zyre"},
    "trizre-late": {"split_trizre": False, "lowest": "any", "late": "trizre"},
}


def settle_summary(name: str, rounds: list[dict[str, Any]]) -> dict[str, Any]:
    outcomes = [r["outcome"] for r in rounds]
    splits = outcomes.count("split")
    return {
        "scenario": name,
        "rounds": len(rounds),
        "splits": splits,
        "splits_per_100": round(100 * splits / len(rounds), 1) if rounds else None,
        "splits_listening_on": sum(r["outcome_listening_on"] == "split" for r in rounds),
        "unfinished": outcomes.count("unfinished"),
        "other": outcomes.count("other"),
        "agree": outcomes.count("agree"),
        "zyre_lowest": sum(r["lowest"] == "zyre" for r in rounds),
    }


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
    parser.add_argument(
        "--settle", action="store_true", help="issue 32's scenario: splits per 100 rounds"
    )
    parser.add_argument("--settle-seconds", type=float, default=14.0)
    parser.add_argument("--split-trizre", action="store_true", help="one trizre node a process")
    parser.add_argument("--lowest", choices=sorted(FIRST_DIGIT), default="any")
    parser.add_argument("--late", choices=["zyre", "trizre"], default="")
    parser.add_argument(
        "--variant",
        action="append",
        choices=sorted(VARIANTS),
        help="with --settle: run these scenarios, --rounds each (instead of the flags above)",
    )
    args = parser.parse_args()
    reason = netns.netns_available() or zyre_unavailable()
    if reason:
        print(f"bench_elections: SKIPPED, cannot run here: {reason}", file=sys.stderr)
        return 0
    results = []
    scenarios: dict[str, dict[str, Any]] = {}
    if args.settle and args.variant:
        scenarios = {name: VARIANTS[name] for name in args.variant}
    elif args.settle:
        flags = {"split_trizre": args.split_trizre, "lowest": args.lowest, "late": args.late}
        named = [name for name, kwargs in VARIANTS.items() if kwargs == flags]
        scenarios = {named[0] if named else json.dumps(flags): flags}
    for name, kwargs in scenarios.items():
        rounds = []
        for i in range(args.rounds):
            keep = None if args.keep is None else args.keep / f"settle-{name}-round-{i}"
            rounds.append(
                settle_round(args.settle_seconds, keep=keep, agent_log=args.agent_log, **kwargs)
            )
            print(f"settle {name} round {i}: {rounds[-1]}", file=sys.stderr, flush=True)
        results.append(settle_summary(name, rounds))
        print(json.dumps(results[-1]), flush=True)
    for name in [] if args.settle else args.mix or ["zyre", "mixed", "trizre"]:
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
