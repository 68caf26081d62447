"""Freelance: the choice of server (contract vectors), failover and shotgun on loopback."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

import trizre
from tests.support.nodes import FAST, free_udp_port
from trizre import patterns
from trizre.patterns import IncomingRequest, RetryPolicy
from trizre.patterns._clients import Candidate, freelance_choice

ROOT = Path(__file__).resolve().parents[2]
VECTORS = json.loads((ROOT / "patterns" / "vectors" / "freelance.json").read_text())


@pytest.mark.parametrize("vector", VECTORS["choice"], ids=lambda v: v["name"])
def test_the_choice_is_the_contracts(vector: dict[str, Any]) -> None:
    candidates = [Candidate(**c) for c in vector["candidates"]]
    assert freelance_choice(candidates) == vector["choice"]


def answering(label: str, delay: float = 0.0) -> patterns.Handler:
    async def handler(request: IncomingRequest) -> bytes:
        await trio.sleep(delay)
        return label.encode()

    return handler


async def test_failover_prefers_the_first_name_and_moves_on_when_it_exits() -> None:
    port = free_udp_port()
    with trio.fail_after(20):
        async with (
            trizre.open_node("cli", beacon_port=port, **FAST) as cli,
            patterns.open_freelance_client(
                cli, ["s1", "s2", "s3"], policy=RetryPolicy(1, 3)
            ) as client,
            trizre.open_node("s2", beacon_port=port, **FAST) as s2,
            patterns.open_server(s2, answering("s2")),
            trizre.open_node("s3", beacon_port=port, **FAST) as s3,
            patterns.open_server(s3, answering("s3")),
        ):
            for name in ("s2", "s3"):
                await cli.wait_for_peer(name)
            assert await client.request(b"x") == (b"s2",)  # s1 is not there: s2 comes first
            async with (
                trizre.open_node("s1", beacon_port=port, **FAST) as s1,
                patterns.open_server(s1, answering("s1")),
            ):
                await cli.wait_for_peer("s1")
                assert await client.request(b"x") == (b"s1",)
            # s1 stopped (its Exit came at once): the next request goes to s2.
            assert await client.request(b"x") == (b"s2",)


async def test_failover_skips_a_server_that_never_answers_after_one_timeout() -> None:
    port = free_udp_port()
    with trio.fail_after(20):
        async with (
            trizre.open_node("mute", beacon_port=port, **FAST) as mute,  # present, serves nothing
            trizre.open_node("s2", beacon_port=port, **FAST) as s2,
            patterns.open_server(s2, answering("s2")),
            trizre.open_node("cli", beacon_port=port, **FAST) as cli,
            patterns.open_freelance_client(
                cli, ["mute", "s2"], policy=RetryPolicy(0.3, 3)
            ) as client,
        ):
            for name in ("mute", "s2"):
                await cli.wait_for_peer(name)
            start = trio.current_time()
            assert await client.request(b"x") == (b"s2",)
            assert trio.current_time() - start >= 0.3  # one attempt lost to the mute one
            start = trio.current_time()
            assert await client.request(b"x") == (b"s2",)  # it is suspect now: straight to s2
            assert mute.name == "mute"


async def test_shotgun_takes_the_first_reply_and_drops_the_rest() -> None:
    port = free_udp_port()
    ran: list[str] = []

    def noting(label: str, delay: float) -> patterns.Handler:
        async def handler(request: IncomingRequest) -> bytes:
            ran.append(label)
            await trio.sleep(delay)
            return label.encode()

        return handler

    with trio.fail_after(20):
        async with (
            trizre.open_node("slow", beacon_port=port, **FAST) as slow,
            patterns.open_server(slow, noting("slow", 0.3)),
            trizre.open_node("fast", beacon_port=port, **FAST) as fast,
            patterns.open_server(fast, noting("fast", 0.0)),
            trizre.open_node("cli", beacon_port=port, **FAST) as cli,
            patterns.open_freelance_client(
                cli, ["slow", "fast"], model="shotgun", policy=RetryPolicy(2, 2)
            ) as client,
        ):
            for name in ("slow", "fast"):
                await cli.wait_for_peer(name)
            assert await client.request(b"x") == (b"fast",)
            while client._router.dropped < 1:  # noqa: ASYNC110 -- a counter cannot wake us
                await trio.sleep(0.01)  # the slow one's late reply: dropped
            assert sorted(ran) == ["fast", "slow"]  # both ran it: that is shotgun


async def test_a_service_group_can_be_the_server_list() -> None:
    port = free_udp_port()
    with trio.fail_after(20):
        async with (
            trizre.open_node("w", beacon_port=port, **FAST) as w,
            patterns.open_server(w, answering("w"), service="calc"),
            trizre.open_node("cli", beacon_port=port, **FAST) as cli,
            patterns.open_freelance_client(cli, service="calc", model="shotgun") as client,
        ):
            # No wait for the group: an attempt waits for a live member.
            assert await client.request(b"x") == (b"w",)


@pytest.mark.parametrize(
    ("servers", "options", "error"),
    [
        ((), {}, ValueError),
        (["a"], {"service": "s"}, ValueError),
        (["a", "a"], {}, ValueError),
        ([""], {}, ValueError),
        ([7], {}, TypeError),
        ("ab", {}, TypeError),
        (["a"], {"model": "scatter"}, ValueError),
        ((), {"service": "mmi.x"}, ValueError),
    ],
)
async def test_bad_input_is_refused(servers: Any, options: dict[str, Any], error: type) -> None:
    async with trizre.open_node("cli", beacon_port=free_udp_port(), **FAST) as cli:
        with pytest.raises(error):
            async with patterns.open_freelance_client(cli, servers, **options):
                pass


SERVER = """
import sys
import trio, trizre
from trizre import patterns

port, name = int(sys.argv[1]), sys.argv[2]

async def main():
    async def answer(request):
        return name.encode()
    async with trizre.open_node(name, interface="lo", beacon_port=port,
                                beacon_interval=0.05, local_links=False) as node:
        async with patterns.open_server(node, answer):
            print("ready", flush=True)
            await trio.sleep_forever()

trio.run(main)
"""


async def test_failover_rides_out_a_server_process_killed_mid_stream(tmp_path: Path) -> None:
    """s1 gets SIGKILL while requests flow: every request is answered, by s2 from then on."""
    port = free_udp_port()
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    servers = {
        name: await trio.lowlevel.open_process(
            [sys.executable, str(script), str(port), name], env=env
        )
        for name in ("s1", "s2")
    }
    answers: list[bytes] = []
    try:
        with trio.fail_after(60):
            async with (
                trizre.open_node(
                    "cli", beacon_port=port, evasive_timeout=0.5, expired_timeout=3, **FAST
                ) as cli,
                patterns.open_freelance_client(
                    cli, ["s1", "s2"], policy=RetryPolicy(0.5, 4)
                ) as client,
            ):
                for name in servers:
                    await cli.wait_for_peer(name)
                for i in range(60):
                    if i == 20:
                        servers["s1"].kill()
                    answers.append((await client.request(b"%d" % i))[0])
    finally:
        for proc in servers.values():
            if proc.returncode is None:
                proc.kill()
        with trio.fail_after(10):
            for proc in servers.values():
                await proc.wait()
    assert len(answers) == 60
    assert answers[:20] == [b"s1"] * 20
    assert answers[21:] == [b"s2"] * 39  # the one in flight at the kill may go either way
