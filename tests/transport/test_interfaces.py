"""Interface discovery and selection.

The real-host tests only *read* interface state (ioctls on an unconnected
socket send nothing). States this host may not have (an interface that is
down, has no address, is point-to-point) are faked by replacing the probe.
"""

from __future__ import annotations

import socket
from ipaddress import IPv4Address

import pytest

import trizre
from trizre.transport import _interfaces
from trizre.transport._interfaces import (
    ENV_VAR,
    Interface,
    InterfaceError,
    list_interfaces,
    select_interface,
)

LOOPBACK = Interface(
    name="lo",
    address=IPv4Address("127.0.0.1"),
    netmask=IPv4Address("255.0.0.0"),
    broadcast=IPv4Address("127.255.255.255"),
    is_loopback=True,
)


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)


def _fake(
    name: str, flags: int, cidr: str | None, broadcast: str | None = None
) -> _interfaces._Probe:
    if cidr is None:
        return _interfaces._Probe(name, flags, None, None, None)
    address, prefix = cidr.split("/")
    mask = IPv4Address((0xFFFFFFFF << (32 - int(prefix))) & 0xFFFFFFFF)
    brd = IPv4Address(broadcast) if broadcast is not None else None
    return _interfaces._Probe(name, flags, IPv4Address(address), mask, brd)


UP, BRD, LOOP = 0x1, 0x2, 0x8
FAKE_HOST = [
    _fake("lo", UP | LOOP, "127.0.0.1/8"),
    _fake("tun0", UP, "10.8.0.2/32"),
    _fake("eth9", BRD, "10.1.0.5/24", "10.1.0.255"),  # ok-net; down
    _fake("wlan9", UP | BRD, None),  # up, no IPv4
    _fake("eth7", UP | BRD, "10.2.0.5/24", "10.2.0.255"),  # ok-net
    _fake("eth8", UP | BRD, "10.3.0.5/16", "0.0.0.0"),  # no broadcast configured
]


@pytest.fixture
def fake_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_interfaces, "_probe_all", lambda: list(FAKE_HOST))


# --- the real host ----------------------------------------------------------


def test_lo_by_name() -> None:
    assert select_interface("lo") == LOOPBACK


def test_lo_by_address() -> None:
    assert select_interface("127.0.0.1") == LOOPBACK


def test_list_interfaces_has_lo_in_index_order() -> None:
    found = list_interfaces()
    assert LOOPBACK in found
    order = [name for _index, name in socket.if_nameindex()]
    names = [iface.name for iface in found]
    assert names == sorted(names, key=order.index)


@pytest.mark.parametrize("spec", ["nosuch0", "", "x" * 40, "lo\0", "lo "])
def test_unknown_name(spec: str) -> None:
    with pytest.raises(InterfaceError) as info:
        select_interface(spec)
    message = str(info.value)
    assert repr(spec) in message
    assert "no such interface" in message
    assert "lo 127.0.0.1/8 loopback" in message  # the listing of what exists
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("spec", ["203.0.113.7", "127.0.0.2", "0.0.0.0", "127.255.255.255"])
def test_unknown_address(spec: str) -> None:
    with pytest.raises(InterfaceError, match="no interface of this host has that IPv4 address"):
        select_interface(spec)


def test_address_in_a_subnet_hints_at_the_interface() -> None:
    with pytest.raises(InterfaceError, match=r"lies in lo's subnet: pass 'lo'"):
        select_interface("127.0.0.2")


def test_spec_type_is_checked() -> None:
    with pytest.raises(TypeError):
        select_interface(b"lo")  # type: ignore[arg-type]


def test_environment_is_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, "lo")
    assert select_interface() == LOOPBACK
    monkeypatch.setenv(ENV_VAR, "127.0.0.1")
    assert select_interface(None) == LOOPBACK


def test_explicit_spec_beats_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, "nosuch0")
    assert select_interface("lo") == LOOPBACK


def test_bad_environment_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, "nosuch0")
    with pytest.raises(InterfaceError, match=r"\$TRIZRE_INTERFACE interface 'nosuch0'"):
        select_interface()


def test_automatic_choice_is_not_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only reads the choice; no socket is opened on it."""
    monkeypatch.setenv(ENV_VAR, "")  # empty means unset
    candidates = [iface for iface in list_interfaces() if not iface.is_loopback]
    if not candidates:
        with pytest.raises(InterfaceError, match="no interface is up, broadcast-capable"):
            select_interface()
        return
    chosen = select_interface()
    assert not chosen.is_loopback
    assert chosen in candidates


# --- contains ---------------------------------------------------------------


def test_contains() -> None:
    assert LOOPBACK.contains("127.0.0.1")
    assert LOOPBACK.contains("127.200.3.4")
    assert LOOPBACK.contains(IPv4Address("127.255.255.255"))
    assert not LOOPBACK.contains("198.51.100.1")  # ok-net: only compared, never contacted
    assert not LOOPBACK.contains(IPv4Address("128.0.0.1"))
    host = Interface(
        "x",
        IPv4Address("10.0.0.7"),
        IPv4Address("255.255.255.255"),  # ok-net
        IPv4Address("10.0.0.7"),
        False,
    )
    assert host.contains("10.0.0.7")
    assert not host.contains("10.0.0.8")


@pytest.mark.parametrize("bad", ["", "localhost", "::1", "127.0.0.256", "127.1"])
def test_contains_rejects_non_ipv4(bad: str) -> None:
    with pytest.raises(ValueError):
        LOOPBACK.contains(bad)


def test_contains_type() -> None:
    with pytest.raises(TypeError):
        LOOPBACK.contains(0x7F000001)  # type: ignore[arg-type]


def test_interface_validates() -> None:
    with pytest.raises(TypeError):
        Interface(
            "x",
            "10.0.0.1",  # type: ignore[arg-type]
            IPv4Address("255.0.0.0"),
            IPv4Address("10.255.255.255"),  # ok-net
            False,
        )
    with pytest.raises(ValueError):
        Interface(
            "x",
            IPv4Address("10.0.0.1"),
            IPv4Address("255.0.255.0"),
            IPv4Address("10.255.255.255"),  # ok-net
            False,
        )


def test_interface_is_frozen_and_hashable() -> None:
    assert hash(LOOPBACK) == hash(select_interface("lo"))
    with pytest.raises(AttributeError):
        LOOPBACK.name = "eth0"  # type: ignore[misc]
    assert str(LOOPBACK.network) == "127.0.0.0/8"


# --- faked host states ------------------------------------------------------


@pytest.mark.usefixtures("fake_host")
def test_fake_listing_skips_down_and_addressless() -> None:
    assert [iface.name for iface in list_interfaces()] == ["lo", "tun0", "eth7", "eth8"]


@pytest.mark.usefixtures("fake_host")
def test_fake_automatic_choice_skips_loopback_p2p_down_and_addressless() -> None:
    chosen = select_interface()
    assert chosen.name == "eth7"
    assert chosen.broadcast == IPv4Address("10.2.0.255")  # ok-net
    assert not chosen.is_loopback


@pytest.mark.usefixtures("fake_host")
def test_fake_missing_broadcast_is_the_subnet_broadcast() -> None:
    assert select_interface("eth8").broadcast == IPv4Address("10.3.255.255")  # ok-net


@pytest.mark.usefixtures("fake_host")
@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("eth9", "'eth9' is down"),
        ("10.1.0.5", r"'10.1.0.5' \(eth9\) is down"),
        ("wlan9", "'wlan9' has no IPv4 address"),
        ("tun0", "'tun0' cannot broadcast"),
    ],
)
def test_fake_unusable(spec: str, problem: str) -> None:
    with pytest.raises(InterfaceError, match=problem) as info:
        select_interface(spec)
    message = str(info.value)
    assert "eth9 10.1.0.5/24 broadcast 10.1.0.255 (down)" in message  # ok-net
    assert "wlan9 (no IPv4 address)" in message


def test_fake_no_suitable_interface(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_interfaces, "_probe_all", lambda: [FAKE_HOST[0], FAKE_HOST[2]])
    with pytest.raises(InterfaceError, match="no interface is up, broadcast-capable") as info:
        select_interface()
    assert "lo 127.0.0.1/8 loopback" in str(info.value)
    assert select_interface("lo").is_loopback


def test_fake_no_interfaces_at_all(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_interfaces, "_probe_all", list)
    with pytest.raises(InterfaceError, match="reports no network interfaces"):
        select_interface("lo")


# ------------------------------------------------------------------- IPv6


def test_an_ipv6_interface_contains_link_local_addresses_of_its_own_scope() -> None:
    from ipaddress import IPv6Address  # noqa: PLC0415

    from trizre.transport._interfaces import Interface6  # noqa: PLC0415

    veth = Interface6("veth0", 7, IPv6Address("fe80::1"))
    assert veth.scoped == "fe80::1%veth0"
    assert (
        veth.contains("fe80::2") and veth.contains("fe80::2%veth0") and veth.contains("fe80::2%7")
    )
    assert not veth.contains("fe80::2%eth1")  # another link's
    assert not veth.contains("2001:db8::1")  # ok-net: documentation prefix, never reached
    with pytest.raises(ValueError):
        veth.contains("not an address")


def test_ipv6_selection_explains_what_is_wrong() -> None:
    from trizre.transport._interfaces import select_interface6  # noqa: PLC0415

    with pytest.raises(trizre.InterfaceError, match="'lo' cannot multicast"):
        select_interface6("lo")
    with pytest.raises(trizre.InterfaceError, match="no such interface"):
        select_interface6("no-such-if0")
    with pytest.raises(TypeError):
        select_interface6(6)  # type: ignore[arg-type]


async def test_an_ipv6_node_on_loopback_refuses_to_start() -> None:
    with pytest.raises(trizre.InterfaceError, match="cannot multicast"):
        async with trizre.open_node("six", ipv6=True, interface="lo"):
            raise AssertionError("started")
    with pytest.raises(ValueError, match="ipv6 is for beacon discovery"):
        trizre.NodeConfig(ipv6=True, discovery="gossip", gossip_bind="ipc:///tmp/x")


def test_endpoints_of_every_kind_give_their_host() -> None:
    from trizre.node._node import _endpoint_host  # noqa: PLC0415

    assert _endpoint_host("tcp://127.0.0.1:5670") == "127.0.0.1"
    assert _endpoint_host("tcp://fe80::1%eth0:5670") == "fe80::1%eth0"  # zyre's form
    assert _endpoint_host("tcp://[fe80::1%eth0]:5670") == "fe80::1%eth0"  # libzmq's
    assert _endpoint_host("tcp://fe80::1:5670") == "fe80::1"  # HELLO: scope stripped
    assert _endpoint_host("tcp://example.org:5670") is None  # never resolved
    assert _endpoint_host("ipc:///tmp/x") is None
