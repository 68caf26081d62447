"""This host's IPv4 network interfaces, and the choice of one for discovery.

Linux only, standard library only: interface names come from
:func:`socket.if_nameindex` and each interface is probed with the
``SIOCGIF*`` ioctls (flags, primary IPv4 address, netmask, broadcast
address) on an unconnected UDP socket, which sends nothing.

A ZRE node beacons on exactly one interface. :func:`select_interface` picks
it from a name or address, from ``$TRIZRE_INTERFACE``, or automatically by
zyre's rule (the first interface that is up, can broadcast and is not
loopback). Tests and examples pass ``"lo"``: loopback has no broadcast flag,
but the kernel treats ``127.255.255.255`` as its broadcast address, so that
is what :attr:`Interface.broadcast` holds for it.
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network
from typing import Final, final

import attrs

from .._errors import NodeError

__all__ = [
    "ENV_VAR",
    "Interface",
    "Interface6",
    "InterfaceError",
    "list_interfaces",
    "select_interface",
    "select_interface6",
]

ENV_VAR: Final = "TRIZRE_INTERFACE"
"""Environment variable read by :func:`select_interface` when no spec is given."""

# <linux/sockios.h> and <net/if.h>
_SIOCGIFFLAGS: Final = 0x8913
_SIOCGIFADDR: Final = 0x8915
_SIOCGIFBRDADDR: Final = 0x8919
_SIOCGIFNETMASK: Final = 0x891B
_IFF_UP: Final = 0x1
_IFF_BROADCAST: Final = 0x2
_IFF_LOOPBACK: Final = 0x8
_IFF_MULTICAST: Final = 0x1000
_IF_INET6: Final = "/proc/net/if_inet6"
_LINK_LOCAL: Final = IPv6Network("fe80::/10")
_ALL_NODES: Final = IPv6Address("ff02::1")
_IFNAMSIZ: Final = 16  # including the terminating NUL
# struct ifreq: a 16-byte name, then a union; a sockaddr_in's address is
# at union offset 4 (after sa_family and the port), the flags a short at 0.
_IFREQ_SIZE: Final = 40
_UNION: Final = _IFNAMSIZ
_ANY: Final = IPv4Address(0)


class InterfaceError(NodeError, ValueError):
    """No usable network interface matches what was asked for.

    The message names the spec (and where it came from) and lists this
    host's interfaces.
    """


@final
@attrs.frozen
class Interface:
    """One IPv4 network interface of this host.

    Attributes:
        name: the kernel's interface name, for example ``"lo"`` or ``"eth0"``.
        address: the interface's primary IPv4 address.
        netmask: the netmask of that address.
        broadcast: where beacons for this interface are sent: the configured
            broadcast address, or the subnet's broadcast address when none is
            configured (always so for loopback: ``127.255.255.255`` for
            ``127.0.0.1/8``).
        is_loopback: ``True`` for a loopback interface.

    Raises (on construction):
        TypeError: an address field is not an :class:`ipaddress.IPv4Address`.
        ValueError: *netmask* is not a contiguous netmask.
    """

    name: str
    address: IPv4Address = attrs.field(validator=attrs.validators.instance_of(IPv4Address))
    netmask: IPv4Address = attrs.field(validator=attrs.validators.instance_of(IPv4Address))
    broadcast: IPv4Address = attrs.field(validator=attrs.validators.instance_of(IPv4Address))
    is_loopback: bool
    _network: IPv4Network = attrs.field(init=False, repr=False, eq=False)

    @_network.default
    def _network_default(self) -> IPv4Network:
        return IPv4Network(f"{self.address}/{self.netmask}", strict=False)

    @property
    def network(self) -> IPv4Network:
        """The interface's subnet, for example ``127.0.0.0/8``."""
        return self._network

    def contains(self, addr: str | IPv4Address) -> bool:
        """``True`` when *addr* lies in this interface's subnet.

        Raises:
            ValueError: *addr* is a string that is not an IPv4 address
                (an IPv6 address or a host name included; no name is
                ever resolved).
            TypeError: *addr* is neither a string nor an IPv4Address.
        """
        if isinstance(addr, str):
            addr = IPv4Address(addr)
        elif not isinstance(addr, IPv4Address):
            raise TypeError(f"expected an IPv4 address or a str, got {addr!r}")
        return addr in self._network

    def __str__(self) -> str:
        kind = "loopback" if self.is_loopback else f"broadcast {self.broadcast}"
        return f"{self.name} {self.address}/{self._network.prefixlen} {kind}"


@final
@attrs.frozen
class _Probe:
    """What the kernel reports about one interface; ``None`` where unset."""

    name: str
    flags: int
    address: IPv4Address | None
    netmask: IPv4Address | None
    broadcast: IPv4Address | None

    @property
    def up(self) -> bool:
        return bool(self.flags & _IFF_UP)

    @property
    def loopback(self) -> bool:
        return bool(self.flags & _IFF_LOOPBACK)

    @property
    def can_broadcast(self) -> bool:
        return bool(self.flags & _IFF_BROADCAST)

    def interface(self) -> Interface | None:
        """The :class:`Interface`, or ``None`` without an IPv4 address."""
        if self.address is None or self.netmask is None:
            return None
        broadcast = self.broadcast
        if broadcast is None or broadcast == _ANY:
            net = IPv4Network(f"{self.address}/{self.netmask}", strict=False)
            broadcast = net.broadcast_address
        return Interface(self.name, self.address, self.netmask, broadcast, self.loopback)

    def describe(self) -> str:
        iface = self.interface()
        if iface is None:
            return f"{self.name} ({'' if self.up else 'down, '}no IPv4 address)"
        return str(iface) if self.up else f"{iface} (down)"


def _ioctl(sock: socket.socket, request: int, name: bytes) -> bytes:
    return fcntl.ioctl(sock.fileno(), request, name.ljust(_IFREQ_SIZE, b"\0"))


def _ioctl_address(sock: socket.socket, request: int, name: bytes) -> IPv4Address:
    reply = _ioctl(sock, request, name)
    return IPv4Address(reply[_UNION + 4 : _UNION + 8])


def _probe(sock: socket.socket, name: str) -> _Probe | None:
    raw = os.fsencode(name)
    try:
        (flags,) = struct.unpack_from("H", _ioctl(sock, _SIOCGIFFLAGS, raw), _UNION)
    except OSError:  # the interface vanished since if_nameindex()
        return None
    address: IPv4Address | None
    netmask: IPv4Address | None
    broadcast: IPv4Address | None = None
    try:
        address = _ioctl_address(sock, _SIOCGIFADDR, raw)
        netmask = _ioctl_address(sock, _SIOCGIFNETMASK, raw)
        if flags & _IFF_BROADCAST:
            broadcast = _ioctl_address(sock, _SIOCGIFBRDADDR, raw)
    except OSError:  # EADDRNOTAVAIL: no IPv4 address
        address = netmask = broadcast = None
    return _Probe(name, flags, address, netmask, broadcast)


def _probe_all() -> list[_Probe]:
    """Probe every interface, in :func:`socket.if_nameindex` order."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        probes = (_probe(sock, name) for _index, name in socket.if_nameindex())
        return [probe for probe in probes if probe is not None]


def list_interfaces() -> list[Interface]:
    """The interfaces that are up and have an IPv4 address.

    In :func:`socket.if_nameindex` order (so ``lo`` usually comes first),
    loopback included. Only each interface's primary IPv4 address is seen.
    Never raises for a missing or odd interface (it is just left out);
    raises :class:`OSError` only if the probe socket cannot be created.
    """
    found = []
    for probe in _probe_all():
        iface = probe.interface() if probe.up else None
        if iface is not None:
            found.append(iface)
    return found


def select_interface(spec: str | None = None) -> Interface:
    """Choose the interface a node beacons on.

    *spec* is an interface name (``"lo"``, ``"eth0"``) or the primary IPv4
    address of one of this host's interfaces (``"127.0.0.1"``). With
    ``None``, ``$TRIZRE_INTERFACE`` is used the same way; when that is unset
    or empty, the first interface (in :func:`socket.if_nameindex` order)
    that is up, broadcast-capable and not loopback is chosen, as zyre does.
    Loopback is only ever used when asked for by name or address.

    Raises:
        InterfaceError: (a :class:`ValueError`) naming the spec and listing
            this host's interfaces, when no interface has that name or
            address, when it is down, has no IPv4 address, or can neither
            broadcast nor is loopback (a point-to-point link, where beacons
            cannot work), or, with no spec, when no interface qualifies.
            Only primary addresses match: a secondary address, or another
            address inside an interface's subnet, is not found.
        TypeError: *spec* is neither a ``str`` nor ``None``.
    """
    if spec is not None and not isinstance(spec, str):
        raise TypeError(f"interface spec must be a str or None, got {spec!r}")
    origin = "interface"
    if spec is None:
        env = os.environ.get(ENV_VAR, "").strip()
        if env:
            spec, origin = env, f"${ENV_VAR} interface"
    probes = _probe_all()
    if spec is None:
        for probe in probes:
            if probe.up and probe.can_broadcast and not probe.loopback:
                iface = probe.interface()
                if iface is not None:
                    return iface
        raise InterfaceError(
            "no interface is up, broadcast-capable, not loopback and has an IPv4 "
            f"address; name one (or set ${ENV_VAR}){_listing(probes)}"
        )
    return _resolve(spec, origin, probes)


def _resolve(spec: str, origin: str, probes: list[_Probe]) -> Interface:
    try:
        wanted: IPv4Address | None = IPv4Address(spec)
    except ValueError:
        wanted = None
    if wanted is not None:
        match = next((p for p in probes if p.address == wanted), None)
        if match is None:
            near = [
                i for i in map(_Probe.interface, probes) if i is not None and i.contains(wanted)
            ]
            hint = f" (it lies in {near[0].name}'s subnet: pass {near[0].name!r})" if near else ""
            raise InterfaceError(
                f"{origin} {spec!r}: no interface of this host has that IPv4 address"
                f"{hint}{_listing(probes)}"
            )
    else:
        match = next((p for p in probes if p.name == spec), None)
        if match is None:
            raise InterfaceError(f"{origin} {spec!r}: no such interface{_listing(probes)}")
    what = f"{origin} {spec!r}" if match.name == spec else f"{origin} {spec!r} ({match.name})"
    if not match.up:
        raise InterfaceError(f"{what} is down{_listing(probes)}")
    iface = match.interface()
    if iface is None:
        raise InterfaceError(f"{what} has no IPv4 address{_listing(probes)}")
    if not (match.can_broadcast or match.loopback):
        raise InterfaceError(
            f"{what} cannot broadcast (point-to-point?), so beacons cannot work on it"
            f"{_listing(probes)}"
        )
    return iface


def _listing(probes: list[_Probe]) -> str:
    if not probes:
        return "; this host reports no network interfaces"
    return "; interfaces on this host: " + ", ".join(p.describe() for p in probes)


# ------------------------------------------------------------------- IPv6


@final
@attrs.frozen
class Interface6:
    """One interface for IPv6 discovery: beacons to ``ff02::1`` on it, as zyre with ``ZSYS_IPV6``.

    Peers are reached at their link-local addresses, which only mean
    something with this interface's scope: endpoints carry it as
    ``tcp://fe80::1%eth0:port`` (zyre's form).

    Attributes:
        name: the kernel's interface name.
        index: its index (the scope id of its link-local addresses).
        address: its link-local IPv6 address.
    """

    name: str
    index: int
    address: IPv6Address
    broadcast: IPv6Address = _ALL_NODES  # the all-nodes group beacons go to
    is_loopback: bool = False

    @property
    def network(self) -> IPv6Network:
        """The link-local range, ``fe80::/10``."""
        return _LINK_LOCAL

    @property
    def scoped(self) -> str:
        """Our address with the scope, as endpoints write it: ``fe80::1%eth0``."""
        return f"{self.address}%{self.name}"

    def contains(self, addr: str) -> bool:
        """``True`` for a link-local address of this link (``fe80::x`` or ``fe80::x%<ours>``).

        Raises ``ValueError`` for a string that is not an IPv6 address.
        """
        host, _, scope = addr.partition("%")
        if scope and scope not in (self.name, str(self.index)):
            return False
        return IPv6Address(host) in _LINK_LOCAL

    def __str__(self) -> str:
        return f"{self.name} {self.address} (IPv6 multicast {self.broadcast})"


def _link_locals() -> dict[str, IPv6Address]:
    """Each interface's link-local IPv6 address, from ``/proc/net/if_inet6``."""
    found: dict[str, IPv6Address] = {}
    try:
        with open(_IF_INET6, encoding="ascii") as table:
            for line in table:
                fields = line.split()
                if len(fields) != 6:
                    continue
                address = IPv6Address(bytes.fromhex(fields[0]))
                flags = int(fields[4], 16)
                # Not tentative (0x40) or failed duplicate detection (0x08): usable.
                if address in _LINK_LOCAL and not flags & 0x48:
                    found.setdefault(fields[5], address)
    except OSError:
        pass  # no IPv6 in this kernel
    return found


def select_interface6(spec: str | None = None) -> Interface6:
    """Choose the interface a node beacons on over IPv6.

    *spec* is an interface name; ``None`` reads ``$TRIZRE_INTERFACE``, else
    takes the first interface that is up, multicast-capable, not loopback
    and has a usable link-local address.

    Raises:
        InterfaceError: naming the spec and listing the interfaces with
            IPv6 link-local addresses: no such interface, down, unable to
            multicast (``lo`` cannot), or without a usable link-local
            address (still in duplicate address detection, a second or two
            after the link came up, or IPv6 disabled on it).
        TypeError: *spec* is neither a ``str`` nor ``None``.
    """
    if spec is not None and not isinstance(spec, str):
        raise TypeError(f"interface spec must be a str or None, got {spec!r}")
    origin = "interface"
    if spec is None and (env := os.environ.get(ENV_VAR, "").strip()):
        spec, origin = env, f"${ENV_VAR} interface"
    probes = {p.name: p for p in _probe_all()}
    addresses = _link_locals()
    listing = "; interfaces with IPv6 link-local addresses: " + (
        ", ".join(f"{name} {addr}" for name, addr in addresses.items()) or "none"
    )

    def usable(name: str) -> bool:
        probe = probes.get(name)
        return (
            probe is not None
            and probe.up
            and bool(probe.flags & _IFF_MULTICAST)
            and not probe.loopback
            and name in addresses
        )

    if spec is None:
        for name in probes:
            if usable(name):
                return Interface6(name, socket.if_nametoindex(name), addresses[name])
        raise InterfaceError(
            "no interface is up, multicast-capable, not loopback and has an IPv6 "
            f"link-local address; name one (or set ${ENV_VAR}){listing}"
        )
    probe = probes.get(spec)
    if probe is None:
        raise InterfaceError(f"{origin} {spec!r}: no such interface{listing}")
    if not probe.up:
        raise InterfaceError(f"{origin} {spec!r} is down{listing}")
    if probe.loopback or not probe.flags & _IFF_MULTICAST:
        raise InterfaceError(
            f"{origin} {spec!r} cannot multicast, so IPv6 beacons cannot work on it{listing}"
        )
    if spec not in addresses:
        raise InterfaceError(
            f"{origin} {spec!r} has no usable IPv6 link-local address (IPv6 off, or the "
            f"address is still being checked for duplicates){listing}"
        )
    return Interface6(spec, socket.if_nametoindex(spec), addresses[spec])
