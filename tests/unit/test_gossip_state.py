"""The gossip service's rules (trizre.sansio._gossip), without sockets, on exact virtual times."""

from __future__ import annotations

import heapq
import itertools
import math

import pytest

from trizre import wire
from trizre.sansio._gossip import Deliver, Forget, GossipState, ToClient, ToRemote

HELLO, PING, PONG, INVALID = (
    wire.GossipHello(),
    wire.GossipPing(),
    wire.GossipPong(),
    wire.GossipInvalid(),
)


def pub(key: str, value: str, ttl: int = 0) -> wire.GossipPublish:
    return wire.GossipPublish(key, value, ttl)


def test_a_client_says_hello_first_and_then_gets_every_tuple() -> None:
    server = GossipState()
    server.publish("a", "tcp://a", 0, now=0.0)
    assert server.from_client(b"c1", pub("x", "y"), 0.0) == [ToClient(b"c1", INVALID)]
    assert server.from_client(b"c1", PING, 0.0) == [ToClient(b"c1", PONG)]  # in any state
    assert server.from_client(b"c1", HELLO, 0.0) == [ToClient(b"c1", pub("a", "tcp://a"))]


def test_a_new_tuple_is_delivered_and_passed_to_everyone_a_duplicate_to_nobody() -> None:
    server = GossipState()
    server.connected("r", 0.0)
    server.from_client(b"c1", HELLO, 0.0)
    server.from_client(b"c2", HELLO, 0.0)
    actions = server.from_client(b"c1", pub("k", "v"), 0.1)
    assert actions[0] == Deliver("k", "v")
    assert set(actions[1:]) == {
        ToClient(b"c1", pub("k", "v")),  # zgossip echoes to the sender too
        ToClient(b"c2", pub("k", "v")),
        ToRemote("r", pub("k", "v")),
    }
    assert server.from_client(b"c2", pub("k", "v"), 0.2) == []
    changed = server.from_remote("r", pub("k", "v2"), 0.3)
    assert changed[0] == Deliver("k", "v2")


def test_a_silent_client_is_forgotten_after_the_client_timeout() -> None:
    server = GossipState(client_timeout=1.0)
    server.from_client(b"c", HELLO, 0.0)
    assert server.deadline() == 1.0
    server.poll(0.999)
    assert server.from_client(b"c", pub("k", "v"), 0.999)[0] == Deliver("k", "v")
    server.poll(1.999)  # last heard at 0.999
    assert server.from_client(b"c", pub("k2", "v"), 2.0) == [ToClient(b"c", INVALID)]


def test_a_remote_is_greeted_pinged_and_greeted_again_when_it_forgot_us() -> None:
    service = GossipState()
    service.publish("me", "ipc:///tmp/me", 0, now=0.0)
    greeting = [ToRemote("hub", HELLO), ToRemote("hub", pub("me", "ipc:///tmp/me"))]
    assert service.connected("hub", 0.0) == greeting
    assert service.poll(0.49) == []
    assert service.poll(0.5) == [ToRemote("hub", PING)]
    assert service.from_remote("hub", PONG, 0.6) == []
    assert service.from_remote("hub", INVALID, 0.7) == greeting


def test_tuples_with_a_ttl_expire_unless_published_again() -> None:
    service = GossipState()
    service.from_remote("r", pub("k", "v", ttl=2000), 10.0)
    assert service.deadline() == 12.0
    assert service.poll(11.0) == []
    # A refresh that moves the expiry by more than the slack extends it, and travels on.
    service.connected("other", 11.5)
    refreshed = service.from_remote("r", pub("k", "v", ttl=2000), 11.5)
    assert refreshed == [ToRemote("other", pub("k", "v", ttl=2000))]
    # One that would move it by a few milliseconds (a copy back round a cycle) does not.
    assert service.from_remote("r", pub("k", "v", ttl=1995), 11.51) == []
    assert Forget("k") not in service.poll(12.0)
    assert Forget("k") in service.poll(13.5)
    assert "k" not in service.tuples


def test_our_own_tuples_are_refreshed_every_third_of_their_ttl() -> None:
    service = GossipState()
    service.connected("hub", 0.0)
    service.publish("me", "tcp://me", 3000, now=0.0)
    assert service.deadline() == pytest.approx(0.5)  # the hub's PING first
    actions = service.poll(1.0)
    assert ToRemote("hub", pub("me", "tcp://me", 3000)) in actions


def test_unpublish_forgets_here_only() -> None:
    service = GossipState()
    service.connected("hub", 0.0)
    service.from_remote("hub", pub("peer", "tcp://p"), 0.0)
    assert service.unpublish("peer") == [Forget("peer")]
    assert service.unpublish("peer") == []


def test_forever_tuples_stay_forever() -> None:
    service = GossipState()
    service.from_remote("r", pub("k", "v", 0), 0.0)
    assert service.from_remote("r", pub("k", "v", 5000), 1.0) == []
    assert service.deadline() == math.inf or service.deadline() > 1e9


class Simulation:
    """Services joined into a ring and a chord (a cycle), 5 ms per hop, on virtual time."""

    DELAY = 0.005

    def __init__(self, n: int) -> None:
        self.services = [GossipState() for _ in range(n)]
        self.queue: list[tuple[float, int, int, object, wire.GossipMessage, str]] = []
        self.counter = itertools.count()
        self.sent = 0
        self.known: dict[int, dict[str, str]] = {i: {} for i in range(n)}
        # Service i connects to i+1 (a ring) and 0 also to n//2 (a chord): cycles.
        self.links = [(i, (i + 1) % n) for i in range(n)] + [(0, n // 2)]
        self.now = 0.0
        for client, server in self.links:
            self.apply(client, self.services[client].connected(server, 0.0))

    def apply(self, at: int, actions: list[object]) -> None:
        for action in actions:
            if isinstance(action, Deliver):
                self.known[at][action.key] = action.value
            elif isinstance(action, Forget):
                self.known[at].pop(action.key, None)
            elif isinstance(action, ToRemote):
                assert isinstance(action.remote, int)
                self.push(at, action.remote, "from_client", action.message)
            elif isinstance(action, ToClient):
                self.push(at, action.client[0], "from_remote", action.message)

    def push(self, src: int, dst: int, method: str, message: wire.GossipMessage) -> None:
        self.sent += 1
        item = (self.now + self.DELAY, next(self.counter), dst, src, message, method)
        heapq.heappush(self.queue, item)

    def run_until(self, end: float) -> None:
        while True:
            due = self.queue[0][0] if self.queue else math.inf
            polls = [(s.deadline(), i) for i, s in enumerate(self.services)]
            poll_at, who = min(polls)
            if min(due, poll_at) > end:
                self.now = end
                return
            if due <= poll_at:
                self.now, _, dst, src, message, method = heapq.heappop(self.queue)
                service = self.services[dst]
                if method == "from_client":  # clients are named by their index, in one byte
                    self.apply(dst, service.from_client(bytes([src]), message, self.now))
                else:
                    self.apply(dst, service.from_remote(src, message, self.now))
            else:
                self.now = poll_at
                self.apply(who, self.services[who].poll(self.now))


def test_a_cyclic_network_converges_refreshes_without_looping_and_forgets_a_leaver() -> None:
    sim = Simulation(6)
    sim.apply(3, sim.services[3].publish("node-3", "tcp://10.0.0.3:49152", 3000, now=0.0))
    sim.run_until(0.2)
    assert all(sim.known[i].get("node-3") == "tcp://10.0.0.3:49152" for i in range(6) if i != 3)
    # Ten seconds of refreshes and PINGs: bounded traffic, no storm round the cycles.
    before = sim.sent
    sim.run_until(10.0)
    # PINGs and PONGs on 7 links, 2 a second, plus a refresh wave a second: about 400.
    assert sim.sent - before < 600, sim.sent - before
    assert all("node-3" in sim.services[i].tuples for i in range(6))
    # The publisher stops refreshing (it left): everyone forgets within the ttl.
    sim.services[3]._own.clear()
    sim.run_until(13.5)
    assert all("node-3" not in sim.services[i].tuples for i in range(6))
    assert all("node-3" not in sim.known[i] for i in range(6))


def test_the_table_is_bounded_and_known_keys_keep_their_room() -> None:
    service = GossipState(max_tuples=3)
    service.from_client(b"c", HELLO, 0.0)
    for i in range(10):
        service.from_client(b"c", pub(f"k{i}", "v"), 0.0)
    assert sorted(service.tuples) == ["k0", "k1", "k2"] and service.refused == 7
    assert service.from_client(b"c", pub("k1", "changed"), 0.1)[0] == Deliver("k1", "changed")
    with pytest.raises(ValueError, match="max_tuples"):
        GossipState(max_tuples=0)
