"""Every option of a node, declared and validated in one place.

Each field of :class:`NodeConfig` is the option's one declaration: its type,
default and checks, and (``metadata``, see ``_options.py``) its meaning and
its command-line flag.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any, Final, Literal, TypeAlias, final

import attrs

from .. import wire
from .._errors import ConfigTypeError, ConfigValueError
from ..sansio._peer import PeerLimits
from ..transport._curve import CURVE_ALLOW_ANY, Certificate, allowed_keys, curve_key
from ..transport._interfaces import ENV_VAR
from ..transport._zsock import BUSY_POLL_MAX, check_busy_poll
from ._options import METADATA, CliFlag, Option
from ._options import declare as _option

__all__ = ["DiscoveryKind", "NodeConfig", "options"]

DiscoveryKind: TypeAlias = Literal["udp", "memory", "gossip"]
_DISCOVERY: Final = ("udp", "memory", "gossip")
_SCHEMES: Final = ("tcp://", "ipc://")


def _endpoints(value: str | tuple[str, ...] | list[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, tuple | list) or not all(isinstance(v, str) for v in value):
        raise ConfigTypeError(f"gossip_connect is an endpoint or a list of them, got {value!r}")
    return tuple(value)


def _check_endpoint(name: str, value: str) -> None:
    if not value.startswith(_SCHEMES) or len(value) <= 6:
        raise ConfigValueError(f"{name} must be a tcp:// or ipc:// endpoint, got {value!r}")
    if value.startswith("tcp://") and value[6:].split(":", maxsplit=1)[0] in ("*", "0.0.0.0", ""):
        raise ConfigValueError(
            f"{name} {value!r}: bind to an address peers can reach, not a wildcard "
            "(it is what the node publishes)"
        )


def _headers(
    value: Mapping[str, str] | tuple[tuple[str, str], ...] | None,
) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if isinstance(value, tuple):  # already pairs, as NodeConfig.headers holds them
        value = dict(value)
    if not isinstance(value, Mapping):
        raise ConfigTypeError(
            f"headers must be a mapping of str to str, got {type(value).__name__}"
        )
    for name, text in value.items():
        if not isinstance(name, str) or not isinstance(text, str):
            raise ConfigTypeError(
                f"header {name!r}: names and values are str, got "
                f"{type(name).__name__}: {type(text).__name__} (convert it: str(value))"
            )
    return wire.Hello(1, "", (), 0, "", dict(value)).headers


def _allow(value: Any) -> frozenset[bytes] | str | None:
    if value is None or value == CURVE_ALLOW_ANY:
        return value  # type: ignore[no-any-return]
    if isinstance(value, frozenset) and all(isinstance(k, bytes) and len(k) == 32 for k in value):
        return value  # already converted
    try:
        return allowed_keys(value)
    except (ValueError, TypeError) as exc:
        text = str(exc) if str(exc).startswith("curve_allow") else f"curve_allow: {exc}"
        kind = ConfigValueError if isinstance(exc, ValueError) else ConfigTypeError
        raise kind(text) from exc


def _server_key(value: Any) -> bytes | tuple[tuple[str, bytes], ...] | None:
    if value is None:
        return None
    try:
        if isinstance(value, Mapping | tuple):
            # {hub endpoint: its key}, or the pairs NodeConfig already holds.
            pairs = value.items() if isinstance(value, Mapping) else value
            converted = []
            for endpoint, key in pairs:
                if not isinstance(endpoint, str):
                    raise ConfigTypeError(f"a hub endpoint is a str, got {endpoint!r}")
                converted.append((endpoint, curve_key(key)))
            return tuple(converted)
        return curve_key(value)
    except ValueError as exc:
        raise ConfigValueError(f"gossip_server_key: {exc}") from None
    except TypeError as exc:
        raise ConfigTypeError(f"gossip_server_key: {exc}") from None


def _int_in(low: int, high: int) -> Any:
    def check(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
        if type(value) is not int:
            raise ConfigTypeError(f"{attribute.name} must be an int, got {type(value).__name__}")
        if not low <= value <= high:
            raise ConfigValueError(f"{attribute.name} must be in {low}..{high}, got {value!r}")

    return check


def _positive(unit: str) -> Any:
    def check(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigTypeError(f"{attribute.name} must be a number of {unit}, got {value!r}")
        if not (value > 0 and math.isfinite(value)):
            raise ConfigValueError(
                f"{attribute.name} must be a positive number of {unit}, got {value!r}"
            )

    return check


_seconds: Final = _positive("seconds")


def _flag(instance: object, attribute: attrs.Attribute[bool], value: bool) -> None:
    if type(value) is not bool:
        raise ConfigTypeError(f"{attribute.name} must be True or False, got {value!r}")


def _busy_poll(instance: object, attribute: attrs.Attribute[float], value: object) -> None:
    try:
        check_busy_poll(value)
    except TypeError as exc:
        raise ConfigTypeError(str(exc)) from None
    except ValueError as exc:
        raise ConfigValueError(str(exc)) from None


def options() -> tuple[tuple[str, Any, Option], ...]:
    """Every option of :class:`NodeConfig` in order: its name, its default, its :class:`Option`.

    Raises ``KeyError`` naming a field declared without its :class:`Option`.
    """
    found = []
    for field in attrs.fields(NodeConfig):
        if METADATA not in field.metadata:
            raise KeyError(f"NodeConfig.{field.name} has no metadata=_option(...)")
        found.append((field.name, field.default, field.metadata[METADATA]))
    return tuple(found)


@final
@attrs.frozen(kw_only=True)
class NodeConfig:
    """The options of :func:`~trizre.open_node`, checked together when made.

    ``open_node`` builds one from its keyword arguments (see its docstring
    for what each option means); a running node shows its own as
    :attr:`Node.config <trizre.Node.config>`.  Bad input raises
    :class:`~trizre.ConfigTypeError` (a ``TypeError``) for a value of the
    wrong type and :class:`~trizre.ConfigValueError` (a ``ValueError``) for
    one out of range, naming the option: among them an ``expired_timeout``
    not greater than ``evasive_timeout`` (a peer would expire before it was
    ever pinged).  A name or header the HELLO cannot carry raises
    :class:`trizre.wire.EncodeError` (a ``ValueError``).
    """

    name: str | None = attrs.field(
        default=None,
        metadata=_option(
            "public name, ≤ 255 UTF-8 bytes",
            shown="first 6 hex digits of the UUID",
            flag=CliFlag("--name", "NAME", "this node's name (each command has a default)"),
        ),
    )
    headers: tuple[tuple[str, str], ...] = attrs.field(
        default=None,
        converter=_headers,
        metadata=_option("sent to every peer in HELLO", shown="`{}`"),
    )
    interface: str | None = attrs.field(
        default=None,
        metadata=_option(
            'a name (`"lo"`, `"eth0"`) or one of this host\'s IPv4 addresses',
            shown=f"`${ENV_VAR}`, else the first up, broadcast-capable, non-loopback interface",
            flag=CliFlag(
                "--interface",
                "NAME|ADDR",
                f"interface to beacon on (default: ${ENV_VAR}, else the first up, "
                "broadcast-capable, non-loopback interface; the choice is printed). "
                "Use 'lo' to stay on this machine.",
            ),
        ),
    )
    beacon_port: int = attrs.field(
        default=wire.DISCOVERY_PORT,
        validator=_int_in(1, 65535),
        metadata=_option(
            "UDP discovery port",
            unit="port",
            flag=CliFlag("--beacon-port", "PORT", "UDP discovery port (default {default}, ZRE's)"),
        ),
    )
    beacon_interval: float = attrs.field(
        default=1.0,
        validator=_seconds,
        metadata=_option(
            "as zyre",
            unit="s",
            flag=CliFlag("--beacon-interval", "S", "seconds between beacons (default {default})"),
        ),
    )
    evasive_timeout: float = attrs.field(
        default=5.0,
        validator=_seconds,
        metadata=_option(
            "as zyre",
            unit="s",
            flag=CliFlag(
                "--evasive-timeout",
                "S",
                "silence before a peer is pinged and shown evasive (default {default})",
            ),
        ),
    )
    expired_timeout: float = attrs.field(
        default=30.0,
        validator=_seconds,
        metadata=_option(
            "as zyre; must be greater than `evasive_timeout`",
            unit="s",
            flag=CliFlag(
                "--expired-timeout", "S", "silence before a peer is removed (default {default})"
            ),
        ),
    )
    handshake_timeout: float = attrs.field(
        default=5.0,
        validator=_seconds,
        metadata=_option(
            "a peer we linked to that has not said HELLO by then is dropped, with its socket; "
            "doubled for each miss in a row (below)",
            unit="s",
        ),
    )
    election_timeout: float = attrs.field(
        default=5.0,
        validator=_seconds,
        metadata=_option(
            "how long an election may run before this node ends it: a contester whose wave "
            "is lowest declares it won ([elections.md](elections.md))",
            unit="s",
        ),
    )
    max_pending_peers: int = attrs.field(
        default=256,
        validator=_int_in(1, 2**31 - 1),
        metadata=_option(
            "at most this many TCP peers without HELLO hold a socket; beyond, the oldest is dropped"
        ),
    )
    new_peers_per_source: float = attrs.field(
        default=20.0,
        validator=_positive("peers a second"),
        metadata=_option(
            "new TCP peers one address may announce by beacon each second, after a burst of "
            "64; beyond, its beacons for new UUIDs are ignored"
        ),
    )
    protocol_version: int = attrs.field(
        default=2,
        metadata=_option("2 = 36/ZRE as zyre and pyre speak it; 3 = 43/ZRE as written"),
    )
    send_hwm: int = attrs.field(
        default=1000,
        validator=_int_in(1, 2**31 - 1),
        metadata=_option("messages queued per peer before sends wait"),
    )
    max_message_size: int = attrs.field(
        default=16 * 1024 * 1024,
        validator=_int_in(1, 2**62),
        metadata=_option(
            "the largest message, all frames together, this node sends (`whisper`/`shout` "
            "raise `MessageTooLarge` beyond) or takes (a peer sending more is dropped); peers "
            "should share it ([security.md](security.md))",
            unit="octets",
        ),
    )
    # Per-peer bounds (issue 25, docs/security.md): a peer past one is dropped.
    max_peer_groups: int = attrs.field(
        default=10_000,
        validator=_int_in(1, 2**31 - 1),
        metadata=_option(
            "groups one peer may be in (HELLO list, then JOINs); beyond, it is dropped"
        ),
    )
    max_headers: int = attrs.field(
        default=10_000,
        validator=_int_in(0, 2**31 - 1),
        metadata=_option("headers one peer's HELLO may carry; beyond, it is dropped"),
    )
    max_header_bytes: int = attrs.field(
        default=1024 * 1024,
        validator=_int_in(0, 2**62),
        metadata=_option(
            "octets of header names and values one peer's HELLO may carry; beyond, it is dropped",
            unit="octets",
        ),
    )
    beacons_refresh: bool = attrs.field(
        default=False,
        validator=_flag,
        metadata=_option("also count beacons as signs of life (pyre's rule)"),
    )
    watch_links: bool = attrs.field(
        default=True,
        validator=_flag,
        metadata=_option(
            "end an entered TCP peer at once when its connection into our inbox closes "
            "(one libzmq socket monitor on the inbox: [Send guarantee](#send-guarantee)); "
            "off, a broken link ends its peer by presence or the receiver's sequence check, "
            "as in zyre"
        ),
    )
    local_links: bool = attrs.field(
        default=True,
        validator=_flag,
        metadata=_option(
            "reach nodes of the same Trio run in memory, not over TCP (below)",
            shown="on, unless `$TRIZRE_LOCAL_LINKS` is `0`",
        ),
    )
    discovery: DiscoveryKind = attrs.field(
        default="udp",
        metadata=_option(
            '`"udp"`: ZRE beacons; `"gossip"`: zyre\'s gossip mode '
            '([discovery.md](discovery.md)); `"memory"`: nodes of one Trio run find each '
            "other without a beacon socket (tests, below)"
        ),
    )
    trace_dir: str | os.PathLike[str] | None = attrs.field(
        default=None,
        metadata=_option(
            "record a trace of the node and its patterns there ([traces.md](traces.md))"
        ),
    )
    trace_max_bytes: int = attrs.field(
        default=64 * 1024 * 1024,
        validator=_int_in(4096, 2**62),
        metadata=_option("rotate a trace file past this size", unit="octets"),
    )
    ipv6: bool = attrs.field(
        default=False,
        validator=_flag,
        metadata=_option(
            "beacon to `ff02::1` on `interface` and reach peers at link-local addresses, as "
            "zyre with `ZSYS_IPV6=1` ([discovery.md](discovery.md))"
        ),
    )
    endpoint: str | None = attrs.field(
        default=None,
        metadata=_option(
            "gossip mode: where the inbox binds and what the node publishes "
            "(`tcp://host:port`, `tcp://host:*`, `ipc://path`)",
            shown="a free port of the interface",
            flag=CliFlag(
                "--endpoint",
                "ENDPOINT",
                "this node's ZRE endpoint, e.g. tcp://127.0.0.1:*; needed with gossip",
            ),
        ),
    )
    gossip_bind: str | None = attrs.field(
        default=None,
        metadata=_option(
            "gossip mode: serve the gossip here",
            flag=CliFlag("--gossip-bind", "ENDPOINT", "also serve gossip at this endpoint"),
        ),
    )
    gossip_connect: tuple[str, ...] = attrs.field(
        default=(),
        converter=_endpoints,
        metadata=_option(
            "gossip mode: join the gossip served there (one endpoint or a list)",
            shown="none",
            # Named --gossip since the first command line: the flag that turns gossip on.
            flag=CliFlag(
                "--gossip",
                "ENDPOINT",
                "discover by gossip through this zgossip endpoint instead of beacons (repeatable)",
                repeat=True,
            ),
        ),
    )
    gossip_ttl: float = attrs.field(
        default=30.0,
        metadata=_option(
            "gossip mode: how long our tuple lives unless refreshed (it is, while we run); "
            "0: forever, as zyre",
            unit="s",
        ),
    )
    gossip_server_key: bytes | tuple[tuple[str, bytes], ...] | None = attrs.field(
        default=None,
        converter=_server_key,
        metadata=_option(
            "gossip over CURVE: the `gossip_connect` hubs' public key, or a mapping of their "
            "endpoints to their keys; needs `curve` (a CURVE node's own hub is always a CURVE "
            "server) ([security.md](security.md))",
            flag=CliFlag(
                "--gossip-server-key",
                "KEY",
                "gossip over CURVE: the --gossip hubs' public key (Z85, even one that "
                "begins with '-'), or its certificate file; needs --curve",
                key=True,
            ),
        ),
    )
    curve: Certificate | None = attrs.field(
        default=None,
        metadata=_option(
            "this node's `trizre.Certificate` (key pair): CURVE as 43/ZRE and zyre do it "
            "([security.md](security.md))",
            flag=CliFlag(
                "--curve",
                "CERT",
                "CURVE: this node's certificate file (a zcert secret file); peers without one "
                "are ignored",
            ),
        ),
    )
    curve_allow: frozenset[bytes] | str | None = attrs.field(
        default=None,
        converter=_allow,
        metadata=_option(
            "client keys allowed to connect: keys, a directory of certificates, or "
            "`trizre.CURVE_ALLOW_ANY`",
            shown="required with `curve`",
            flag=CliFlag(
                "--curve-allow",
                "DIR|any",
                "CURVE (required with --curve): accept only the public keys of the "
                "certificates in DIR, or 'any' key",
            ),
        ),
    )
    zap_domain: str = attrs.field(
        default="global", metadata=_option("the inbox's ZAP domain, as zyre")
    )
    busy_poll: float = attrs.field(
        default=0.0,
        validator=_busy_poll,
        metadata=_option(
            "low-latency mode, off at 0: after a message, the TCP inbox polls for the next "
            f"one up to this long (≤ {BUSY_POLL_MAX:g} s) before it sleeps; lower round-trip "
            "latency for CPU (below)",
            unit="s",
            flag=CliFlag(
                "--busy-poll",
                "S",
                "low-latency mode: after a message, poll the inbox this many seconds "
                f"(at most {BUSY_POLL_MAX:g}, e.g. 0.00005) before sleeping (default: off)",
            ),
        ),
    )

    @curve.validator
    def _check_curve(self, attribute: attrs.Attribute[Certificate | None], value: Any) -> None:
        if value is None:
            return
        if not isinstance(value, Certificate):
            raise ConfigTypeError(f"curve must be a trizre.Certificate, got {type(value).__name__}")
        if value.secret is None:
            raise ConfigValueError("curve needs a certificate with its secret key (a key pair)")

    @curve_allow.validator
    def _check_allow(self, attribute: attrs.Attribute[Any], value: Any) -> None:
        if self.curve is not None and value is None:
            raise ConfigValueError(
                "with curve, say who may connect: curve_allow=[public keys], a directory "
                "of certificates, or trizre.CURVE_ALLOW_ANY"
            )
        if self.curve is None and value is not None:
            raise ConfigValueError("curve_allow needs curve (this node's certificate)")

    @zap_domain.validator
    def _check_domain(self, attribute: attrs.Attribute[str], value: Any) -> None:
        if not isinstance(value, str):
            raise ConfigTypeError(f"zap_domain must be a str, got {type(value).__name__}")
        if not value or len(value.encode("utf-8")) > 254:
            raise ConfigValueError(f"zap_domain must be 1..254 UTF-8 bytes, got {value!r}")

    @ipv6.validator
    def _check_ipv6(self, attribute: attrs.Attribute[bool], value: bool) -> None:
        if value and self.discovery != "udp":
            raise ConfigValueError(
                "ipv6 is for beacon discovery (multicast to ff02::1); with gossip, "
                "give an IPv6 endpoint instead"
            )

    @endpoint.validator
    def _check_inbox_endpoint(self, attribute: attrs.Attribute[str | None], value: Any) -> None:
        if value is None:
            return
        if not isinstance(value, str):
            raise ConfigTypeError(f"endpoint must be a str, got {type(value).__name__}")
        if self.discovery != "gossip":
            raise ConfigValueError(
                "endpoint is for gossip discovery; with beacons the node binds a "
                "random port of its interface, as 36/ZRE says"
            )
        _check_endpoint("endpoint", value)

    @gossip_bind.validator
    def _check_gossip_bind(self, attribute: attrs.Attribute[str | None], value: Any) -> None:
        if value is not None:
            if not isinstance(value, str):
                raise ConfigTypeError(f"gossip_bind must be a str, got {type(value).__name__}")
            _check_endpoint("gossip_bind", value)

    @gossip_connect.validator
    def _check_gossip_connect(
        self, attribute: attrs.Attribute[tuple[str, ...]], value: Any
    ) -> None:
        for endpoint in value:
            _check_endpoint("gossip_connect", endpoint)
        gossiping = self.gossip_bind is not None or bool(value)
        if self.discovery == "gossip" and not gossiping:
            raise ConfigValueError("gossip discovery needs gossip_bind, gossip_connect or both")
        if self.discovery != "gossip" and gossiping:
            raise ConfigValueError('gossip_bind and gossip_connect need discovery="gossip"')

    @gossip_server_key.validator
    def _check_server_key(self, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is None:
            return
        if self.curve is None:
            raise ConfigValueError(
                "gossip_server_key needs curve: the node reaches the hub as a CURVE client "
                "with its own key pair"
            )
        if not self.gossip_connect:
            raise ConfigValueError(
                "gossip_server_key is the key of the gossip_connect hubs: give them"
            )
        if isinstance(value, tuple):
            strangers = sorted({endpoint for endpoint, _ in value} - set(self.gossip_connect))
            if strangers:
                raise ConfigValueError(
                    f"gossip_server_key names hubs that are not in gossip_connect: {strangers}"
                )

    @gossip_ttl.validator
    def _check_gossip_ttl(self, attribute: attrs.Attribute[float], value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigTypeError(f"gossip_ttl must be a number of seconds, got {value!r}")
        if not (0 <= value <= 4_000_000 and math.isfinite(value)):
            raise ConfigValueError(
                f"gossip_ttl must be 0 (forever) or a positive number of seconds, got {value!r}"
            )

    @property
    def peer_limits(self) -> PeerLimits:
        """The per-peer bounds, as each peer's protocol applies them."""
        return PeerLimits(
            self.max_peer_groups, self.max_headers, self.max_header_bytes, self.max_message_size
        )

    @property
    def hello_headers(self) -> tuple[tuple[str, str], ...]:
        """The headers our HELLO carries: ``headers``, plus ``X-PUBLICKEY`` with CURVE."""
        if self.curve is None:
            return self.headers
        return (*self.headers, ("X-PUBLICKEY", self.curve.public_z85))

    @name.validator
    def _check_name(self, attribute: attrs.Attribute[str | None], value: str | None) -> None:
        if value is not None and not isinstance(value, str):
            raise ConfigTypeError(f"name must be a str, got {type(value).__name__}")

    @interface.validator
    def _check_interface(self, attribute: attrs.Attribute[str | None], value: str | None) -> None:
        if value is not None and not isinstance(value, str):
            raise ConfigTypeError(
                f"interface must be a name or an IPv4 address (str), got {type(value).__name__}"
            )

    @protocol_version.validator
    def _check_version(self, attribute: attrs.Attribute[int], value: int) -> None:
        if value not in wire.MESSAGE_VERSIONS or type(value) is not int:
            raise ConfigValueError(f"protocol_version must be 2 or 3, got {value!r}")

    @expired_timeout.validator
    def _check_expired(self, attribute: attrs.Attribute[float], value: float) -> None:
        if value <= self.evasive_timeout:
            raise ConfigValueError(
                f"expired_timeout ({value!r} s) must be greater than evasive_timeout "
                f"({self.evasive_timeout!r} s): a peer must be pinged before it expires"
            )

    @discovery.validator
    def _check_discovery(self, attribute: attrs.Attribute[str], value: str) -> None:
        if value not in _DISCOVERY:
            raise ConfigValueError(f"discovery must be one of {_DISCOVERY}, got {value!r}")

    def __attrs_post_init__(self) -> None:
        if any(name == "X-PUBLICKEY" for name, _ in self.headers):
            raise ConfigValueError(
                "the X-PUBLICKEY header is the node's own: set curve=, not the header"
            )
        # The HELLO carries name and headers: let the codec judge them now.
        hello = wire.Hello(1, "tcp://127.0.0.1:1", (), 0, self.name or "x", self.hello_headers)
        wire.encode(hello)
