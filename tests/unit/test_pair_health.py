"""A Binary Star pair's health (trizre.patterns._pair_health), judged at exact times."""

from __future__ import annotations

import pytest

from trizre.patterns._pair_health import ServerSeen, pair_health

T0 = 1_000.0  # the primary became ACTIVE
KILLED = 1_500.0  # kill -9 of the primary: it is heard no more
TOOK_OVER = 1_500.6  # the backup's takeover (failover timeout 0.5 s, a client asked)


def primary(**changes: object) -> ServerSeen:
    fields: dict[str, object] = {
        "name": "p",
        "role": "primary",
        "state": "ACTIVE",
        "since": T0,
        "up": True,
        "last_heard": KILLED,
        "transitions": ((T0, "PRIMARY", "ACTIVE", "PEER_BACKUP"),),
    }
    fields.update(changes)
    return ServerSeen(**fields)  # type: ignore[arg-type]


def backup(**changes: object) -> ServerSeen:
    fields: dict[str, object] = {
        "name": "b",
        "role": "backup",
        "state": "PASSIVE",
        "since": T0,
        "up": True,
        "last_heard": KILLED,
        "transitions": ((T0, "BACKUP", "PASSIVE", "PEER_ACTIVE"),),
    }
    fields.update(changes)
    return ServerSeen(**fields)  # type: ignore[arg-type]


TAKEN_OVER = {
    "state": "ACTIVE",
    "since": TOOK_OVER,
    "last_heard": TOOK_OVER + 10,
    "transitions": (
        (T0, "BACKUP", "PASSIVE", "PEER_ACTIVE"),
        (TOOK_OVER, "PASSIVE", "ACTIVE", "CLIENT_REQUEST"),
    ),
}


def test_a_pair_with_an_active_and_a_passive_is_ok() -> None:
    health = pair_health([primary(), backup()], KILLED)
    assert (health.status, health.serving, health.standby) == ("ok", "p", "b")
    assert health.summary() == "ok"
    assert [s.shown for s in health.servers] == ["ACTIVE", "PASSIVE"]
    assert health.last_failover is None


def test_after_kill_9_of_the_active_one_active_label_and_degraded_since_the_takeover() -> None:
    """The dead primary is still present (and even responsive for a few seconds)."""
    for now, up in ((TOOK_OVER, True), (TOOK_OVER + 4.9, True), (TOOK_OVER + 29, False)):
        health = pair_health([primary(up=up), backup(**TAKEN_OVER)], now)
        assert health.status == "degraded", now
        assert (health.serving, health.standby) == ("b", None)
        assert [(s.name, s.shown) for s in health.servers] == [("p", "down"), ("b", "ACTIVE")]
        assert health.servers[0].claims == "ACTIVE"
        assert health.since == KILLED  # the last time the watcher heard the primary
        assert health.summary(lambda t: f"at {t:.0f}") == "degraded: no standby since at 1500"
        failover = health.last_failover
        assert failover is not None
        assert (failover.time, failover.server, failover.event) == (
            TOOK_OVER,
            "b",
            "CLIENT_REQUEST",
        )
        assert "silent" in failover.why


def test_the_standby_lost_since_its_takeover_when_the_dead_one_was_heard_later() -> None:
    # The watcher heard the primary after the takeover, within the margin.
    health = pair_health([primary(last_heard=TOOK_OVER + 1.0), backup(**TAKEN_OVER)], TOOK_OVER + 1)
    assert health.status == "degraded" and health.since == TOOK_OVER


def test_a_server_that_left_stays_down_with_when_it_was_last_heard() -> None:
    health = pair_health([primary(up=False), backup(**TAKEN_OVER)], KILLED + 60)
    assert health.servers[0].shown == "down" and health.servers[0].last_heard == KILLED
    # Only the serving server left: the pair is down since it was last heard.
    health = pair_health([primary(up=False), backup(up=False)], KILLED + 60)
    assert (health.status, health.reason, health.since) == ("down", "no server active", KILLED)
    assert [s.shown for s in health.servers] == ["down", "down"]


def test_a_dead_passive_leaves_the_pair_degraded_since_it_was_last_heard() -> None:
    health = pair_health([primary(), backup(up=False, last_heard=1_200.0)], 1_300.0)
    assert (health.status, health.serving, health.since) == ("degraded", "p", 1_200.0)
    assert health.summary() == "degraded: no standby since 1200.000"


def test_a_pair_that_never_had_a_standby_is_degraded_since_it_serves() -> None:
    health = pair_health([primary()], KILLED)
    assert (health.status, health.since) == ("degraded", T0)


def test_split_brain_only_when_both_are_heard_after_the_takeover() -> None:
    both = [primary(last_heard=TOOK_OVER + 2.0), backup(**TAKEN_OVER)]
    assert pair_health(both, TOOK_OVER + 2.0).status == "degraded"  # within the margin
    both = [primary(last_heard=TOOK_OVER + 2.01), backup(**TAKEN_OVER)]
    health = pair_health(both, TOOK_OVER + 2.01)
    assert (health.status, health.since) == ("split brain", TOOK_OVER)
    assert [s.shown for s in health.servers] == ["ACTIVE", "ACTIVE"]  # the one case for two
    # A margin of its own:
    both = [primary(last_heard=TOOK_OVER + 2.01), backup(**TAKEN_OVER)]
    assert pair_health(both, TOOK_OVER + 2.01, margin=5).status == "degraded"


def test_the_older_claim_heard_on_and_the_newer_gone_leaves_the_older_serving() -> None:
    health = pair_health(
        [primary(last_heard=TOOK_OVER + 9), backup(**{**TAKEN_OVER, "up": False})], TOOK_OVER + 9
    )
    assert (health.status, health.serving) == ("degraded", "p")
    assert [s.shown for s in health.servers] == ["ACTIVE", "down"]


def test_a_backup_not_yet_passive_is_no_standby() -> None:
    """A BACKUP that never heard the active one refuses clients: it cannot take over."""
    health = pair_health([primary(), backup(state="BACKUP", transitions=())], T0)
    assert (health.status, health.reason, health.standby) == ("degraded", "standby not ready", None)
    assert health.summary() == "degraded: standby not ready"


def test_servers_that_are_starting_serve_nobody_yet() -> None:
    health = pair_health(
        [primary(state="PRIMARY", transitions=()), backup(state="BACKUP", transitions=())], T0
    )
    assert (health.status, health.since, health.standby) == ("down", None, None)


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="one server per role"):
        pair_health([primary(), primary(name="p2")], T0)
    with pytest.raises(ValueError, match="one server per role"):
        pair_health([primary(), backup(), backup(name="b2")], T0)
