"""Running the suite: start the target, find it by its beacons (or gossip), run each case."""

from __future__ import annotations

import shlex
import socket
import sys
import time
import uuid
from collections.abc import Sequence
from typing import Any, Literal

import attrs
import trio
import zmq
import zmq.utils.z85

from .. import wire
from ..transport._interfaces import Interface
from ._agent import AgentError, AgentProcess, start_agent, stop_agent
from ._cases import Case, select
from ._errors import ConformanceError
from ._harness import (
    BeaconRadio,
    Fail,
    GossipLink,
    Harness,
    NotApplicable,
    Profile,
    TargetInfo,
    interface_named,
    open_hub,
    reachable,
)

Status = Literal["pass", "fail", "n/a", "error"]

#: Shorthand targets: the agents this package ships.
BUILTIN_AGENTS: dict[str, list[str]] = {
    "trizre": [sys.executable, "-m", "trizre.conformance.trizre_agent"],
    "zyre": [sys.executable, "-m", "trizre.conformance.zyre_agent"],
    "pyre": [sys.executable, "-m", "trizre.conformance.pyre_agent"],
    "zyre.js": [sys.executable, "-m", "trizre.conformance.zyrejs_agent"],
}


@attrs.frozen
class Result:
    """One case's outcome.  ``sent``/``expected``/``got`` are set for a fail,
    ``reason`` for not applicable or an error of the suite itself."""

    id: str
    title: str
    clause: str
    kind: str
    status: Status
    seconds: float
    sent: str = ""
    expected: str = ""
    got: str = ""
    reason: str = ""

    def as_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class Report:
    """The whole run: what was tested, how, and every case's result."""

    target: str
    interface: str
    beacon_port: int
    target_uuid: str
    results: tuple[Result, ...]
    seconds: float
    agent_log: tuple[str, ...] = ()
    restarts: tuple[str, ...] = ()
    """The cases after which the target had died and was started again."""

    def counts(self) -> dict[str, int]:
        out = {"pass": 0, "fail": 0, "n/a": 0, "error": 0}
        for result in self.results:
            out[result.status] += 1
        return out

    @property
    def ok(self) -> bool:
        """No case failed and none broke."""
        counts = self.counts()
        return counts["fail"] == 0 and counts["error"] == 0

    def as_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "interface": self.interface,
            "beacon_port": self.beacon_port,
            "target_uuid": self.target_uuid,
            "seconds": round(self.seconds, 2),
            "counts": self.counts(),
            "results": [r.as_json() for r in self.results],
            "agent_log": list(self.agent_log),
            "restarts": list(self.restarts),
        }


class SetupError(ConformanceError, RuntimeError):
    """The target could not be started or found: no case ran."""


def free_udp_port(address: str) -> int:
    """A UDP port nobody uses on ``address`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind((address, 0))
        port: int = probe.getsockname()[1]
        return port


def target_argv(target: str) -> list[str] | None:
    """The agent command for TARGET, or ``None`` when TARGET names a running node.

    ``trizre`` is the agent shipped here; ``beacons`` (no agent) means
    "a node already beaconing on the port"; anything else is a command line.
    """
    if target in BUILTIN_AGENTS:
        return list(BUILTIN_AGENTS[target])
    if target == "beacons":
        return None
    argv = shlex.split(target)
    if not argv:
        raise ValueError("TARGET is empty")
    return argv


async def run_suite(
    target: str,
    *,
    interface: str = "lo",
    beacon_port: int | None = None,
    cases: Sequence[str] | None = None,
    profile: Profile | None = None,
    passive_only: bool = False,
    find_timeout: float = 20.0,
    target_interface: str | None = None,
    target_prefix: Sequence[str] = (),
) -> Report:
    """Run the suite against TARGET (see :func:`target_argv`) on ``interface``.

    ``target_interface`` (default: ``interface``) is the interface the
    agent is told to use; ``target_prefix`` is put before its command line
    (``ip netns exec NS``, when the suite and the target are in two
    namespaces joined by a veth pair: ``trizre conformance --netns``).

    The agent (if any) is told the interface, a free beacon port (or
    ``beacon_port``), short presence timeouts and one group and header the
    cases look for; it is stopped at the end, also on cancellation.  For
    the CURVE cases, and then the gossip cases, it is started again (with
    CURVE; in gossip mode, connected to a ZGP hub the suite binds on
    ``interface``).

    Raises:
        SetupError: the agent did not start, or no beacon of the target was
            heard within ``find_timeout`` s.
        ValueError: an unknown case id or interface.
    """
    profile = profile or Profile()
    chosen = select(list(cases) if cases is not None else None)
    iface = interface_named(interface)
    if beacon_port is None:
        beacon_port = free_udp_port(str(iface.address))
    argv = target_argv(target)
    wall = time.monotonic()
    radio = BeaconRadio(iface, beacon_port)
    results: list[Result] = []
    restarts: list[str] = []
    config: dict[str, Any] = {
        "name": "conformance-target",
        "interface": target_interface or interface,
        "port": beacon_port,
        "beacon_interval": 0.25,
        "evasive": profile.evasive,
        "expired": profile.expired,
        "headers": {"X-Conformance": "yes"},
        "groups": ["conformance-pre", "conformance-elect"],
        "contest": ["conformance-elect"],
    }
    plain = [c for c in chosen if not c.needs & {"curve", "gossip"}]
    secure = [c for c in chosen if "curve" in c.needs]
    gossip = [c for c in chosen if "gossip" in c.needs]
    seen: set[uuid.UUID] = set()
    agent: AgentProcess | None = None
    first: TargetInfo | None = None
    hub: GossipLink | None = None
    hub_mark = 0

    async def launch(nursery: trio.Nursery, extra: dict[str, Any]) -> TargetInfo:
        nonlocal agent, hub_mark
        if hub is not None:
            hub_mark = hub.mark()  # the new target's traffic starts here
        if argv is not None:
            try:
                agent = await start_agent(
                    [*target_prefix, *argv], {**config, **extra}, nursery, startup=find_timeout
                )
            except (AgentError, OSError) as exc:
                raise SetupError(f"cannot start the target: {exc}") from exc
        if "gossip" in extra:
            assert hub is not None
            return await _find_by_gossip(iface, hub, hub_mark, agent, find_timeout)
        info = await radio.wait_for_stranger(seen, find_timeout, _uuid_of(agent))
        if info is None:
            raise SetupError(
                f"heard no beacon on {iface.name} port {beacon_port} in {find_timeout} s"
            )
        seen.add(info.uuid)
        return info

    async def run_all(harness: Harness, cases: list[Case], extra: dict[str, Any]) -> None:
        nonlocal agent
        for one in cases:
            if agent is not None and await _died(agent):
                # A crash is the case's failure, not every later case's:
                # start the target again (a new node, a new UUID).
                restarts.append(results[-1].id if results else "start")
                await stop_agent(agent)
                harness.target = await launch(harness.nursery, extra)
                harness.agent = agent
                harness.hub_mark = hub_mark
                harness.target_hub = _gossip_endpoint(agent) if "gossip" in extra else None
            results.append(await _run_case(harness, one, passive_only))

    try:
        await radio.bind()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(radio.listen)
            first = await launch(nursery, {})
            harness = Harness(iface, radio, first, profile, agent, nursery)
            await run_all(harness, plain, {})
            if secure:
                # The CURVE cases need the target started again, with CURVE.
                why = "needs an agent (to start the target with CURVE)" if agent is None else ""
                if agent is not None:
                    await stop_agent(agent)
                    harness.target = await launch(nursery, {"curve": True})
                    harness.agent = agent
                    harness.target_key = _key_of(agent)
                    if harness.target_key is None:
                        why = "the agent reports no CURVE public key (no CURVE support)"
                if why:
                    results += [_result(c, "n/a", 0.0, reason=why) for c in secure]
                else:
                    await run_all(harness, secure, {"curve": True})
                harness.target_key = None
            if gossip:
                # The gossip cases need the target started again, in gossip mode,
                # connected to the suite's hub.
                hub = await nursery.start(_serve_hub, iface)
                why = "needs an agent (to start the target in gossip mode)"
                if agent is not None:
                    await stop_agent(agent)
                    why = ""
                    extra: dict[str, Any] = {"gossip": hub.endpoint}
                    try:
                        harness.target = await launch(nursery, extra)
                    except _NoGossip as exc:
                        why = str(exc)
                    except SetupError as exc:
                        # The other cases' results stand: these could not run.
                        results += [_result(c, "error", 0.0, reason=str(exc)) for c in gossip]
                        gossip = []
                    harness.agent = agent
                    harness.hub, harness.hub_mark = hub, hub_mark
                    harness.target_hub = _gossip_endpoint(agent)
                if why:
                    results += [_result(c, "n/a", 0.0, reason=why) for c in gossip]
                elif gossip:
                    await run_all(harness, gossip, extra)
            nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # The nursery wraps what launch() raised: give the caller the one
        # typed error the docstring promises, not a group.
        raise _single(group) from None
    finally:
        if agent is not None:
            await stop_agent(agent)
        radio.close()
    order = {c.id: i for i, c in enumerate(chosen)}
    return Report(
        target,
        iface.name,
        beacon_port,
        first.uuid.hex,
        tuple(sorted(results, key=lambda r: order[r.id])),
        time.monotonic() - wall,
        tuple(agent.transcript(200)) if agent is not None else (),
        tuple(restarts),
    )


async def _serve_hub(
    iface: Interface, *, task_status: trio.TaskStatus[GossipLink] = trio.TASK_STATUS_IGNORED
) -> None:
    """Run the suite's ZGP hub until cancelled, handing it to the caller once bound."""
    async with open_hub(iface) as hub:
        task_status.started(hub)
        await trio.sleep_forever()


class _NoGossip(ConformanceError):
    """The agent started, but says nothing of a gossip hub: no gossip support."""


def _gossip_endpoint(agent: AgentProcess | None) -> str | None:
    """The endpoint of the target's own ZGP hub, as its agent reports it."""
    text = agent.info.get("gossip_endpoint") if agent is not None else None
    return text if isinstance(text, str) and text.startswith("tcp://") else None


def _parse_endpoint(text: object) -> tuple[str, int] | None:
    """``tcp://HOST:PORT`` (a ``|key`` suffix ignored) as (host, port), else ``None``."""
    if not isinstance(text, str) or not text.startswith("tcp://"):
        return None
    host, _, port = text.split("|", 1)[0][6:].rpartition(":")
    return (host, int(port)) if host and port.isdigit() and 0 < int(port) < 65536 else None


async def _find_by_gossip(
    iface: Interface, hub: GossipLink, mark: int, agent: AgentProcess | None, within: float
) -> TargetInfo:
    """The gossiping target: its mailbox from the tuple it publishes to the hub.

    A target that publishes nothing (or nothing readable) is still run, at
    the endpoint its agent reports, so that the cases say what is wrong.
    Raises :class:`_NoGossip` for an agent that reports no hub of its own,
    :class:`SetupError` when the target cannot be found at all, or names a
    mailbox off the suite's interface (where the suite never connects).
    """
    if _gossip_endpoint(agent) is None:
        raise _NoGossip("the agent reports no gossip hub of its own (no gossip support)")
    wanted = _uuid_of(agent)

    def ours(message: Any) -> bool:
        try:
            return wanted is not None and uuid.UUID(hex=message.key) == wanted
        except ValueError:
            return False

    got = await hub.expect(wire.GossipPublish, within, mark, ours)
    text = got[2].value if got is not None else None
    if _parse_endpoint(text) is None:
        text = agent.info.get("endpoint") if agent is not None else None
    where = _parse_endpoint(text)
    if where is None or wanted is None:
        raise SetupError(
            f"the target in gossip mode published no tuple of its own in {within} s, "
            "and its agent names no UUID and endpoint"
        )
    assert isinstance(text, str)
    if not reachable(iface, text):
        raise SetupError(f"the target's mailbox {text} is not on {iface.name}")
    return TargetInfo(wanted, where[0], where[1], 0, 0, b"")


def _key_of(agent: AgentProcess) -> bytes | None:
    """The 32-octet CURVE public key the agent reports (Z85 text), if it reports one."""
    text = agent.info.get("public_key")
    if not isinstance(text, str) or len(text) != 40:
        return None
    try:
        return zmq.utils.z85.decode(text)
    except (ValueError, KeyError, TypeError):
        return None


def _result(case: Case, status: Status, seconds: float, **more: str) -> Result:
    return Result(case.id, case.title, case.clause, case.kind, status, round(seconds, 3), **more)


def _uuid_of(agent: AgentProcess | None) -> uuid.UUID | None:
    """The UUID the agent says its node has, if it says one."""
    text = agent.info.get("uuid") if agent is not None else None
    try:
        return uuid.UUID(hex=text) if isinstance(text, str) else None
    except ValueError:
        return None


async def _died(agent: AgentProcess) -> bool:
    """Whether the agent has exited (waiting a moment for one that is on its way out)."""
    if agent.eof or agent.proc.poll() is not None:
        return True
    if agent.events and agent.events[-1].get("event") == "error":
        with trio.move_on_after(2):
            await agent.proc.wait()
    return agent.proc.poll() is not None


async def _run_case(h: Harness, case: Case, passive_only: bool) -> Result:
    began = time.monotonic()

    def result(status: Status, **more: str) -> Result:
        return _result(case, status, time.monotonic() - began, **more)

    if passive_only and case.kind == "active":
        return result("n/a", reason="active case (run without --passive-only)")
    if "agent" in case.needs and h.agent is None:
        return result("n/a", reason="needs an agent")
    try:
        try:
            with trio.fail_after(60):
                await case.run(h)
        except BaseExceptionGroup as group:
            raise _single(group) from None
    except Fail as fail:
        return result("fail", sent=fail.sent, expected=fail.expected, got=fail.got)
    except NotApplicable as why:
        return result("n/a", reason=str(why))
    except trio.TooSlowError:
        return result("error", reason="the case did not finish in 60 s")
    except (OSError, AgentError, RuntimeError, ValueError) as exc:
        return result("error", reason=f"{type(exc).__name__}: {exc}")
    return result("pass")


def _single(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one exception a case's nurseries wrapped, or the group itself."""
    leaves: list[BaseException] = []

    def walk(exc: BaseException) -> None:
        if isinstance(exc, BaseExceptionGroup):
            for inner in exc.exceptions:
                walk(inner)
        else:
            leaves.append(exc)

    walk(group)
    return leaves[0] if len(leaves) == 1 else group
