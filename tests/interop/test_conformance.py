"""The conformance suite: trizre passes it, and no case passes vacuously.

* trizre (the agent shipped in the package) passes every applicable case;
  the expected matrix column is written here, so a regression shows.
* tests/support/conformance_fake.py is a small ZRE node that passes too; each of its
  ``--break`` flags breaks one rule, and the cases that check that rule must
  then fail.  Every case is covered by at least one flag.
* Without an agent (a node that only beacons), the agent cases are not
  applicable and the rest still run.

Everything here stays on loopback, or in namespaces the suite makes
(``--netns``): the loopback guard watches this process, and the agents and
the CLI run under it too (tests/support/guarded_agent.py, tests/support/guarded_cli.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

import trizre
from tests.support.nodes import free_udp_port
from trizre.conformance import CASES, Profile, run_suite

REPO = Path(__file__).resolve().parents[2]
GUARDED = f"{sys.executable} -u {REPO / 'tests' / 'support' / 'guarded_agent.py'}"
#: The agents run under the loopback guard too (see tests/support/guarded_agent.py).
TRIZRE = f"{GUARDED} trizre.conformance.trizre_agent"
FAKE = f"{GUARDED} tests.support.conformance_fake"
#: The fake's runs wait 2 s for a reply (not 5) and 8 s for the target to
#: show itself (not 20): a broken flag's case waits that long for what never
#: comes, and CI time is short.  The unbroken fake passes with the same
#: waits, so a broken case's fail is the flag's doing, never a short wait's.
FAKE_WAITS: dict[str, Any] = {"profile": Profile(reply=2.0), "find_timeout": 8.0}

#: trizre's column of the matrix: the cases it does not pass, and why.
TRIZRE_NOT_PASSING = {
    # A node without CURVE ignores keyed beacons, so the zero-octet key
    # question (zyre's bug) cannot be asked of it.
    "beacon-v3-zero-key": "n/a",
}

#: flag of the fake -> the cases that must fail against it.
BREAKS: dict[str, tuple[str, ...]] = {
    "beacon-23": ("beacon-target-format",),
    "ignore-beacons": ("beacon-v1",),
    "accept-any-beacon": (
        "beacon-short",
        "beacon-long-v1",
        "beacon-bad-header",
        "beacon-version-2",
        "beacon-54-v1",
        "beacon-oversize",
        "beacon-v3-unkeyed",
    ),
    "crash-on-54": ("beacon-v3-keyed",),
    "accept-keyed-except-zero": ("beacon-v3-zero-key",),
    "self-by-port": ("beacon-own-uuid",),
    "ignore-port-zero": ("beacon-port-zero",),
    "hello-seq-0": ("hello-first", "sequence-increments"),
    "hello-no-headers": ("hello-fields",),
    "no-ping-ok": ("ping",),
    "no-wrap": ("sequence-wrap",),
    "no-seq-check": ("sequence-gap",),
    "ping-before-hello": ("before-hello",),
    "ignore-unknown-hello": ("hello-unknown",),
    "lenient-signature": ("bad-signature",),
    "any-version": ("bad-version",),
    "crash-on-big": ("oversize-frame",),
    "ascii-names": ("utf8-name-headers",),
    "no-join-events": ("join-leave-in",),
    "no-whisper-events": ("whisper-in",),
    "no-shout-events": ("shout-in",),
    "no-evasive-ping": ("evasive-ping",),
    "early-ping": ("evasive-ping",),
    "never-expire": ("expired-exit",),
    "no-whisper-out": ("whisper-out",),
    "status-stuck": ("join-out",),
    "no-shout-out": ("shout-out",),
    "shout-to-all": ("shout-not-member",),
    "no-elect": ("elect-start", "elect-leader"),
    "elect-lowercase-id": ("elect-start",),
    "no-leader": ("elect-leader",),
    "curve-beacon-unkeyed": ("curve-beacon",),
    "curve-plain-dealer": ("curve-meet",),
    "curve-drop-zero-key": ("curve-zero-key",),
    "curve-accept-unkeyed": ("curve-downgrade-beacon",),
    "curve-plain-mailbox": ("curve-plain-hello",),
    "curve-keyless-hello": ("curve-keyless-hello",),
    "curve-crash-empty-key": ("curve-empty-key-header",),
    "gossip-publish-first": ("gossip-hello-first",),
    "gossip-no-publish": ("gossip-publish-self", "gossip-server-hello", "gossip-server-forward"),
    "gossip-ignore-deliver": ("gossip-deliver",),
    "gossip-no-rehello": ("gossip-invalid-rehello",),
    "gossip-hello-no-tuples": ("gossip-server-hello", "gossip-server-forward"),
    "gossip-no-pong": ("gossip-server-ping", "gossip-malformed"),
    "gossip-publish-without-hello": ("gossip-server-invalid",),
    "gossip-no-forward": ("gossip-server-forward",),
    "gossip-crash-on-malformed": ("gossip-malformed",),
    "gossip-self-by-endpoint": ("gossip-own-tuple",),
}


def _statuses(report: trizre.conformance.Report) -> dict[str, str]:
    return {r.id: r.status for r in report.results}


def _explain(report: trizre.conformance.Report) -> str:
    from trizre.conformance._report import table  # noqa: PLC0415

    return table(report)


async def test_trizre_passes_every_applicable_case() -> None:
    with trio.fail_after(240):
        report = await run_suite(TRIZRE)
    expected = {c.id: TRIZRE_NOT_PASSING.get(c.id, "pass") for c in CASES}
    assert _statuses(report) == expected, _explain(report)


async def test_the_fake_target_passes_unbroken() -> None:
    """The baseline for the flags below: the fake passes every case trizre does,
    with the profile they run with."""
    with trio.fail_after(240):
        report = await run_suite(FAKE, **FAKE_WAITS)
    expected = {c.id: TRIZRE_NOT_PASSING.get(c.id, "pass") for c in CASES}
    assert _statuses(report) == expected, _explain(report)


#: zyre's and pyre's columns (every case not listed passes), each deviation
#: explained in docs/conformance.md.
ZYRE_NOT_PASSING = {
    "beacon-54-v1": "fail",  # takes 22 or 54 octets whatever the version
    "beacon-own-uuid": "fail",  # knows its own beacons by sender address (zbeacon), not UUID
    "beacon-v3-zero-key": "n/a",
    "curve-zero-key": "fail",  # public_key[0] == 0 taken for "no key"
    "curve-empty-key-header": "fail",  # assert (public_key[0] != 0) aborts the process
    "gossip-own-tuple": "fail",  # knows its own tuple by endpoint, not key: meets itself
    "gossip-malformed": "fail",  # zgossip's zloop ends on the first malformed frame
}
PYRE_NOT_PASSING = {
    # struct.unpack of anything but 22 octets kills pyre's node thread.
    "beacon-short": "fail",
    "beacon-long-v1": "fail",
    "beacon-54-v1": "fail",
    "beacon-oversize": "fail",
    "beacon-v3-keyed": "fail",
    "beacon-v3-zero-key": "fail",
    "beacon-own-uuid": "fail",  # no UUID check on beacons
    "sequence-wrap": "fail",  # counts modulo 65535: expects 0 after 65534
    # no elections, no CURVE in pyre
    "elect-start": "n/a",
    "elect-leader": "n/a",
    "curve-beacon": "n/a",
    "curve-meet": "n/a",
    "curve-zero-key": "n/a",
    "curve-downgrade-beacon": "n/a",
    "curve-plain-hello": "n/a",
    "curve-keyless-hello": "n/a",
    "curve-empty-key-header": "n/a",
    # no gossip discovery in pyre
    **{c.id: "n/a" for c in CASES if "gossip" in c.needs},
}


#: zyre.js 1.3.0 (npm), built against the system libzmq; run only where it is
#: installed (docs/conformance.md says how), never installed by the tests.
ZYREJS_NOT_PASSING = {
    "beacon-own-uuid": "fail",  # knows its own beacon by the whole datagram (UUID and port)
    "sequence-wrap": "fail",  # counts modulo 65535, as pyre does
    "before-hello": "fail",  # a peer known by beacon may PING before HELLO
    "beacon-v3-zero-key": "n/a",
    # no CURVE, no elections, no gossip in zyre.js
    **{c.id: "n/a" for c in CASES if c.needs & {"curve", "gossip"}},
    "elect-start": "n/a",
    "elect-leader": "n/a",
}


def _netns_reason(implementation: str) -> str | None:
    from tests.interop import zyre_unavailable  # noqa: PLC0415
    from trizre.conformance._netns import unavailable  # noqa: PLC0415

    reason = unavailable()
    if reason is None and implementation == "zyre":
        reason = zyre_unavailable()
    if reason is None and implementation == "zyre.js":
        import shutil  # noqa: PLC0415

        from trizre.conformance.zyrejs_agent import default_modules  # noqa: PLC0415

        if shutil.which("node") is None:
            reason = "node (Node.js) is not installed"
        elif not (default_modules() / "zyre.js").is_dir():
            reason = f"zyre.js is not installed in {default_modules()} (docs/conformance.md)"
    if reason is None and implementation == "pyre":
        try:
            import pyre  # type: ignore[import-untyped]  # noqa: F401, PLC0415
        except ImportError:
            reason = "pyre is not installed"
    return reason


@pytest.mark.netns
@pytest.mark.parametrize(
    ("implementation", "not_passing"),
    # trizre's column is asserted on lo above: not run twice, for CI time.
    [("zyre", ZYRE_NOT_PASSING), ("pyre", PYRE_NOT_PASSING), ("zyre.js", ZYREJS_NOT_PASSING)],
)
def test_the_matrix_in_namespaces(
    implementation: str, not_passing: dict[str, str], tmp_path: Path
) -> None:
    """The suite run as users run it for zyre, pyre (and zyre.js, where installed):
    ``--netns``, the target in a namespace of its own."""
    reason = _netns_reason(implementation)
    if reason is not None:
        pytest.skip(reason)
    done = subprocess.run(
        [sys.executable, "-m", "trizre", "conformance", implementation, "--netns", "--json"],
        check=False,
        capture_output=True,
        text=True,
        timeout=400,
        cwd=REPO,
    )
    report = json.loads(done.stdout)
    statuses = {r["id"]: r["status"] for r in report["results"]}
    expected = {c.id: not_passing.get(c.id, "pass") for c in CASES}
    assert statuses == expected, json.dumps(report, indent=1)[:20000]


def test_every_case_is_broken_by_some_flag() -> None:
    from tests.support.conformance_fake import FLAGS  # noqa: PLC0415

    covered = {case for cases in BREAKS.values() for case in cases}
    assert covered == {c.id for c in CASES}
    assert set(BREAKS) == set(FLAGS)


@pytest.mark.parametrize("flag", sorted(BREAKS))
async def test_a_broken_target_fails_the_cases_for_its_bug(flag: str) -> None:
    with trio.fail_after(120):
        report = await run_suite(f"{FAKE} --break {flag}", cases=list(BREAKS[flag]), **FAKE_WAITS)
    statuses = _statuses(report)
    assert statuses == dict.fromkeys(BREAKS[flag], "fail"), _explain(report)
    for result in report.results:
        assert result.sent and result.expected and result.got, result


async def test_without_an_agent_the_agent_cases_are_not_applicable() -> None:
    port = free_udp_port()
    async with trizre.open_node(
        "plain", interface="lo", beacon_port=port, beacon_interval=0.25, local_links=False
    ):
        with trio.fail_after(60):
            report = await run_suite(
                "beacons",
                beacon_port=port,
                cases=["ping", "sequence-gap", "whisper-out", "shout-in"],
            )
    assert _statuses(report) == {
        "ping": "pass",
        "sequence-gap": "pass",
        "whisper-out": "n/a",
        "shout-in": "n/a",
    }, _explain(report)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(REPO / "tests" / "support" / "guarded_cli.py"), "conformance", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )


def test_cli_json_html_and_list(tmp_path: Path) -> None:
    listed = _cli("--list")
    assert listed.returncode == 0
    assert len(listed.stdout.splitlines()) == len(CASES)
    html = tmp_path / "report.html"
    done = _cli("trizre", "--case", "ping", "--case", "hello-first", "--json", "--html", str(html))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["counts"] == {"pass": 2, "fail": 0, "n/a": 0, "error": 0}
    assert [r["id"] for r in report["results"]] == ["hello-first", "ping"]
    assert "36/ZRE" in report["results"][0]["clause"]
    assert "<table>" in html.read_text()


def test_cli_says_why_a_target_cannot_run() -> None:
    done = _cli("/nonexistent/agent", "--case", "ping")
    assert done.returncode == 1
    assert done.stderr.startswith("trizre conformance: cannot start the target"), done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr


def test_cli_unknown_case_is_a_clear_error() -> None:
    done = _cli("trizre", "--case", "no-such-case")
    assert done.returncode == 1
    assert done.stderr.startswith("trizre conformance: no case 'no-such-case'"), done.stderr


def test_the_suite_connects_only_to_endpoints_on_its_interface() -> None:
    """What a gossiping target publishes is connected to only if it is on the suite's interface."""
    from trizre.conformance._harness import interface_named, reachable  # noqa: PLC0415

    lo = interface_named("lo")
    assert reachable(lo, "tcp://127.0.0.1:5670")
    assert reachable(lo, "tcp://127.0.0.2:5670|Z85KEY")
    for endpoint in (
        "tcp://10.0.0.1:5670",
        "tcp://example.com:5670",
        "tcp://127.0.0.1:0",
        "tcp://127.0.0.1:x",
        "tcp://127.0.0.1",
        "ipc:///tmp/x",
        "",
    ):
        assert not reachable(lo, endpoint), endpoint
