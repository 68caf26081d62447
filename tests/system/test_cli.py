"""The ``trizre`` command: help, version, peers, ping and chat, as a user runs them.

Each command runs in a child process under the loopback guard
(``tests/support/guarded_cli.py``), always with ``--interface lo``; the peers it
meets are nodes of this test process on the same beacon port.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

import trizre
from tests.support.cli import GUARDED, cli, lo, start
from tests.support.guarded_cli import VIOLATION_EXIT
from tests.support.nodes import FAST, free_udp_port, next_event
from trizre.cli import _ping as ping_command
from trizre.cli._common import CommandError
from trizre.transport._zsock import inbox_read

ROOT = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------- front door


def test_help_lists_every_command_and_version_works() -> None:
    result = cli("--help")
    assert result.returncode == 0
    for command in ("peers", "ping", "chat", "watch", "mdp-bridge", "audit", "version"):
        assert re.search(rf"^\s+{command}\s", result.stdout, re.M), command
    assert cli("--version").stdout == f"trizre {trizre.__version__}\n"
    assert cli("version").stdout == f"{trizre.__version__}\n"
    module = subprocess.run(
        [sys.executable, "-m", "trizre", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert module.stdout == f"trizre {trizre.__version__}\n"


def test_version_verbose_says_which_inbox_read_runs() -> None:
    lines = cli("version", "--verbose").stdout.splitlines()
    assert lines[0] == f"trizre {trizre.__version__}"
    read, detail = inbox_read()  # this process imported trizre as the command does
    assert lines[1] == f"inbox read and sends: {read} ({detail})"
    assert re.fullmatch(r"python 3\.\d+\.\d+, trio \S+, pyzmq \S+, libzmq 4\.\d+\.\d+", lines[2])
    assert len(lines) == 3
    pure = cli("version", "-v", env={**os.environ, "TRIZRE_PURE_PYTHON": "1"}).stdout
    assert pure.splitlines()[1] == "inbox read and sends: python (TRIZRE_PURE_PYTHON is set)"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "usage: trizre"),
        (("frobnicate",), "invalid choice"),
        (("peers", "--beacon-port", "0"), "port out of range"),
        (("peers", "--wait", "-1"), "positive number of seconds"),
        (("ping",), "required: NAME"),
        (("ping", "x", "--count", "0"), "must be at least 1"),
    ],
)
def test_usage_errors_exit_2_with_a_message(args: tuple[str, ...], message: str) -> None:
    result = cli(*args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_an_unknown_option_names_its_command_not_the_top_level_usage() -> None:
    """An operator's mistyped option must point at the command's own help."""
    result = cli("peers", "--port", "5670", "--wait", "0.1")
    assert result.returncode == 2
    assert result.stderr == (
        "trizre peers: error: unrecognized arguments: --port 5670\n"
        "Run 'trizre peers --help' for its options.\n"
    )


def test_a_gossip_server_key_beginning_with_a_dash_is_read_as_the_key() -> None:
    """A Z85 key begins with '-' about 1 time in 82; argparse alone took it for
    an option ("expected one argument").  Read as a key, it reaches the
    check that follows (here: no --gossip, no --curve)."""
    key = "-" + trizre.Certificate.generate().public_z85[1:]
    for option in (("--gossip-server-key", key), (f"--gossip-server-key={key}",)):
        result = cli("peers", *option, "--wait", "0.1")
        assert result.returncode == 1, result.stderr
        assert "needs --gossip (the hubs) and --curve" in result.stderr
    # Anything else after the flag is still an option: a missing key says so.
    result = cli("peers", "--gossip-server-key", "--wait", "0.1")
    assert result.returncode == 2
    assert "expected one argument" in result.stderr


def test_audit_help_names_the_command_it_was_run_as() -> None:
    assert cli("audit", "--help").stdout.startswith("usage: trizre audit ")
    module = subprocess.run(
        [sys.executable, "-m", "trizre.audit", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert module.stdout.startswith("usage: python -m trizre.audit ")


def test_a_bad_interface_is_one_line_and_exit_1() -> None:
    result = cli("peers", "--interface", "nosuch0", "--wait", "0.1")
    assert result.returncode == 1
    assert result.stderr.startswith("trizre: ") and "nosuch0" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_guessed_interface_is_named_with_the_reason() -> None:
    env = {**os.environ, "TRIZRE_INTERFACE": "lo"}
    port = str(free_udp_port())
    result = cli("peers", "--beacon-port", port, "--wait", "0.1", "--json", env=env)
    assert result.returncode == 0, result.stderr
    assert "beaconing on lo (127.0.0.1): from $TRIZRE_INTERFACE" in result.stderr
    assert json.loads(result.stdout) == {"peers": []}


# ------------------------------------------------------------------ peers


async def test_peers_lists_name_uuid_endpoint_groups_headers_presence() -> None:
    port = free_udp_port()
    with trio.fail_after(60):
        async with trizre.open_node(
            "alice", beacon_port=port, headers={"X-ROLE": "db"}, **FAST
        ) as alice:
            await alice.join("chat")
            await alice.join("ops")
            result = await trio.run_process(
                [*GUARDED, "peers", *lo(port), "--wait", "3", "--json"],
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
            assert result.returncode == 0, result.stderr
            peers = json.loads(result.stdout)["peers"]
            assert peers == [
                {
                    "name": "alice",
                    "uuid": str(alice.uuid),
                    "endpoint": alice.endpoint,
                    "groups": ["chat", "ops"],
                    "headers": {"X-ROLE": "db"},
                    "presence": "alive",
                }
            ]
            table = await trio.run_process(
                [*GUARDED, "peers", *lo(port), "--wait", "3"], capture_stdout=True
            )
            text = table.stdout.decode()
            assert re.search(r"alice\s+" + str(alice.uuid)[:8], text)
            assert "X-ROLE=db" in text and "chat, ops" in text


async def test_peers_names_a_peer_that_left_before_the_listing() -> None:
    """An empty listing must not read as "nobody was there" when a peer came and went."""
    port = free_udp_port()
    done: list[subprocess.CompletedProcess[bytes]] = []

    async def command() -> None:
        done.append(
            await trio.run_process(
                [*GUARDED, "peers", *lo(port), "--wait", "4"],
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
        )

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(command)
            async with trizre.open_node("bob", beacon_port=port, **FAST) as bob:
                await next_event(bob.events(), trizre.Enter)  # the command's node
            # bob stopped (GOODBYE to it): the command saw it enter and leave.
    (result,) = done
    assert result.returncode == 0, result.stderr
    assert b"1 peer(s) left before the listing: bob" in result.stderr, result.stderr
    assert b"no peers present after 4 s" in result.stderr, result.stderr


async def peer_names(*options: str) -> list[str]:
    """The names ``trizre peers --json`` lists with these options (it must succeed)."""
    result = await trio.run_process(
        [*GUARDED, "peers", *options, "--wait", "3", "--json"],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return [peer["name"] for peer in json.loads(result.stdout)["peers"]]


async def test_peers_by_gossip_and_with_curve(tmp_path: Path) -> None:
    hub = f"ipc://{tmp_path}/hub"
    with trio.fail_after(60):
        async with trizre.open_node(
            "hub", discovery="gossip", endpoint="tcp://127.0.0.1:*", gossip_bind=hub
        ):
            names = await peer_names("--gossip", hub, "--endpoint", "tcp://127.0.0.1:*")
            assert names == ["hub"]
    port = free_udp_port()
    ours, theirs = trizre.Certificate.generate(), trizre.Certificate.generate()
    ours.save(tmp_path / "ours")
    theirs.public_only().save(tmp_path / "theirs.pub")
    with trio.fail_after(60):
        async with (
            trizre.open_node(
                "secure", beacon_port=port, curve=theirs, curve_allow=trizre.CURVE_ALLOW_ANY, **FAST
            ),
            trizre.open_node("plain", beacon_port=port, **FAST),
        ):
            curve = ["--curve", str(tmp_path / "ours"), "--curve-allow", "any"]
            assert await peer_names(*lo(port), *curve) == ["secure"]
    no_allow = cli("peers", "--interface", "lo", "--curve", str(tmp_path / "ours"))
    assert no_allow.returncode == 1 and "--curve-allow" in no_allow.stderr
    public_only = cli(
        "peers",
        "--interface",
        "lo",
        "--curve",
        str(tmp_path / "theirs.pub"),
        "--curve-allow",
        "any",
    )
    assert public_only.returncode == 1 and "Traceback" not in public_only.stderr
    assert public_only.stderr.count("\n") == 1, public_only.stderr
    missing = cli(
        "peers", "--interface", "lo", "--curve", str(tmp_path / "nothing"), "--curve-allow", "any"
    )
    assert missing.returncode == 1 and "cannot read the certificate" in missing.stderr


async def test_peers_escapes_control_characters_in_what_peers_send() -> None:
    port = free_udp_port()
    with trio.fail_after(60):
        async with trizre.open_node("evil\x1b[2J", beacon_port=port, **FAST):
            result = await trio.run_process(
                [*GUARDED, "peers", *lo(port), "--wait", "3"], capture_stdout=True
            )
            assert b"\x1b" not in result.stdout
            assert b"evil\\x1b[2J" in result.stdout


# ------------------------------------------------------------------- ping


async def test_ping_counts_round_trips_and_prints_percentiles() -> None:
    port = free_udp_port()
    with trio.fail_after(60):
        async with trizre.open_node("target", beacon_port=port, **FAST):
            command = await start("ping", "target", *lo(port), "-c", "3", "-i", "0.05")
            await command.expect(r"^PING target \(.*\) at tcp://127\.0\.0\.1:\d+$")
            for seq in (1, 2, 3):
                await command.expect(rf"answer from .* seq={seq} time=\d+\.\d{{3}} ms")
            await command.expect(r"3 sent, 3 answered, 0\.0% lost")
            await command.expect(r"rtt min/avg/max = .* ms, p50 .*, p90 .*, p99 .* ms")
            code, _, err = await command.finish()
            assert code == 0, err


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
async def test_ping_stops_on_a_signal_with_its_summary(signum: int) -> None:
    port = free_udp_port()
    with trio.fail_after(60):
        async with trizre.open_node("target", beacon_port=port, **FAST):
            command = await start("ping", "target", *lo(port), "-i", "0.05")
            await command.expect("seq=2 ")
            command.process.send_signal(signum)
            await command.expect(r"\d+ sent, \d+ answered")
            code, _, err = await command.finish()
            assert code == 0  # answered pings: ping's own convention
            assert "Traceback" not in err


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
async def test_a_command_waiting_for_a_peer_stops_cleanly(signum: int, code: int) -> None:
    port = free_udp_port()
    with trio.fail_after(60):
        command = await start("peers", *lo(port), "--wait", "600")
        process = command.process
        # Give it time to start its node; the signal is handled at any time.
        async with trizre.open_node("probe", beacon_port=port, **FAST) as probe:
            await probe.wait_for_peer("trizre-peers")
        process.send_signal(signum)
        result, out, err = await command.finish()
        assert result == code
        assert "Traceback" not in err
        assert out.strip() == ""


async def test_ping_of_a_peer_that_never_comes_stops_on_sigterm_without_a_loss_figure() -> None:
    port = free_udp_port()
    with trio.fail_after(60):
        command = await start("ping", "nobody", *lo(port), "--wait", "600")
        async with trizre.open_node("probe", beacon_port=port, **FAST) as probe:
            await probe.wait_for_peer("trizre-ping")
        command.process.send_signal(signal.SIGTERM)
        code, out, err = await command.finish()
        assert code == 1  # nothing answered
        assert "% lost" not in out  # nothing was sent: no "0.0% lost"
        assert "waiting for nobody" in err and "Traceback" not in err


def test_ping_of_a_peer_that_never_comes_fails_after_its_wait() -> None:
    result = cli("ping", "nobody", *lo(free_udp_port()), "-c", "1", "--wait", "0.5")
    assert result.returncode == 1, result.stderr
    assert "no peer nobody appeared within 0.5 s" in result.stderr
    assert "trizre peers" in result.stderr and "Traceback" not in result.stderr


async def test_ping_takes_a_uuid_and_refuses_an_ambiguous_name() -> None:
    port = free_udp_port()
    with trio.fail_after(60):
        async with (
            trizre.open_node("twin", beacon_port=port, **FAST) as one,
            trizre.open_node("twin", beacon_port=port, **FAST) as two,
            trizre.open_node("pinger", beacon_port=port, **FAST) as pinger,
        ):
            await one.wait_for_peer(two.uuid)
            command = await start("ping", str(two.uuid), *lo(port), "-c", "1")
            await command.expect(rf"^PING {two.uuid} \({two.uuid}\) at tcp://")
            code, _, err = await command.finish()
            assert code == 0, err
            # The name's check, in process: the pinger has met both twins.
            await pinger.wait_for_peer(one.uuid)
            await pinger.wait_for_peer(two.uuid)
            args = argparse.Namespace(peer="twin", wait=5.0)
            with pytest.raises(CommandError, match="2 peers are named twin") as refused:
                await ping_command._find(pinger, args)
            assert "ping one by its UUID" in str(refused.value)
            assert str(one.uuid) in str(refused.value) and str(two.uuid) in str(refused.value)


# ------------------------------------------------------------------- chat


async def test_chat_shouts_lines_and_prints_the_group() -> None:
    port = free_udp_port()
    with trio.fail_after(60):
        async with trizre.open_node("bob", beacon_port=port, **FAST) as bob:
            events = bob.events()
            await bob.join("room")
            command = await start(
                "chat", "room", *lo(port), "--name", "alice", stdin=subprocess.PIPE
            )
            assert command.process.stdin is not None
            await command.expect(r"^\* chatting in room as alice$")
            joined: Any = await next_event(
                events, trizre.Join, lambda e: e.group == "room" and e.name == "alice"
            )
            # (bob may be met before the chat subscribed: it then says "is here")
            await command.expect(r"^\* bob (joined|is here)$")
            await bob.shout("room", b"hi \x1b[31mthere")
            await command.expect(r"^<bob> hi \\x1b\[31mthere$")
            await command.process.stdin.send_all("grüß dich\n\n".encode())
            shout = await next_event(events, trizre.Shout)
            assert (shout.peer, shout.frames) == (joined.peer, ("grüß dich".encode(),))
            await command.process.stdin.aclose()  # Ctrl-D: leave and exit 0
            left = await next_event(events, trizre.Leave)
            assert (left.peer, left.group) == (joined.peer, "room")
            code, _, err = await command.finish()
            assert code == 0, err


def test_the_guard_catches_a_command_leaving_loopback() -> None:
    # A documentation address (TEST-NET-1): the guard refuses it before any packet.
    result = cli(
        "peers",
        "--interface",
        "lo",
        "--gossip",
        "tcp://192.0.2.1:9999",  # ok-net: TEST-NET-1, the guard must catch it
        "--endpoint",
        "tcp://127.0.0.1:*",
        "--wait",
        "0.5",
    )
    assert result.returncode == VIOLATION_EXIT, result.stderr
    assert "192.0.2.1" in result.stderr
