"""One error root: every exception trizre defines derives from ``trizre.TrizreError``.

The walk (``tests/support/option_tables.py``, which also draws the tree in
docs/errors.md) imports every module of the package, so an exception class
added anywhere later is checked too, without this file naming it.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.option_tables import library_exceptions
from trizre import (
    Certificate,
    ConfigError,
    ConfigTypeError,
    ConfigValueError,
    NodeConfig,
    TrizreError,
)

# Exceptions the library defines but never raises as an error.
NOT_ERRORS = {
    # A handler raises it to choose its reply's status; the server catches it.
    "trizre.patterns._server.ReplyWith",
}

EXCEPTIONS = library_exceptions()


def test_every_exception_trizre_defines_derives_from_trizre_error() -> None:
    strays = sorted(
        name
        for name, cls in EXCEPTIONS.items()
        if not issubclass(cls, TrizreError) and name not in NOT_ERRORS
    )
    assert not strays, f"derive these from trizre.TrizreError (or a family under it): {strays}"


def test_the_walk_reaches_every_family() -> None:
    # The walk itself is checked: it finds an exception of each layer.
    names = {name.rsplit(".", 1)[-1] for name in EXCEPTIONS}
    expected = {
        "NodeError",
        "DecodeError",
        "PatternError",
        "BinaryStarError",
        "TitanicUnknown",
        "MdpDecodeError",
        "CommandError",
        "JavaError",
        "AgentError",
        "InterfaceError",
    }
    assert expected <= names, expected - names


def _family(name: str) -> type[BaseException]:
    (cls,) = (c for dotted, c in EXCEPTIONS.items() if dotted.rsplit(".", 1)[-1] == name)
    return cls


@pytest.mark.parametrize(
    ("name", "family"),
    [
        ("BinaryStarError", "PatternError"),
        ("SplitBrain", "BinaryStarError"),
        ("DuplicateServer", "BinaryStarError"),
        ("TitanicStoreDamaged", "PatternError"),
        ("PatternDecodeError", "PatternError"),
        ("MdpDecodeError", "MdpError"),
        ("DecodeError", "WireError"),
        ("AddressError", "CommandError"),
        ("HiddenTraceFiles", "AuditError"),
        ("JavaError", "AuditError"),
        ("AgentError", "ConformanceError"),
        ("SetupError", "ConformanceError"),
        ("InterfaceError", "NodeError"),
        ("ConfigError", "NodeError"),
    ],
)
def test_each_error_sits_in_its_family(name: str, family: str) -> None:
    assert issubclass(_family(name), _family(family))


@pytest.mark.parametrize(
    ("name", "second"),
    [
        ("PatternDecodeError", ValueError),
        ("MdpDecodeError", ValueError),
        ("InterfaceError", ValueError),
        ("HiddenTraceFiles", ValueError),
        ("AddressError", ValueError),
        ("AgentError", RuntimeError),
        ("SetupError", RuntimeError),
        ("UnknownPeer", LookupError),
        ("MessageTooLarge", ValueError),
        ("EncodeError", ValueError),
        ("ConfigValueError", ValueError),
        ("ConfigTypeError", TypeError),
    ],
)
def test_second_bases_are_kept(name: str, second: type[BaseException]) -> None:
    # ``except ValueError`` code written before the root keeps working.
    assert issubclass(_family(name), second)


def test_events_idle_is_still_a_trio_too_slow_error() -> None:
    # By name: a unit test imports no trio.
    assert "TooSlowError" in {c.__name__ for c in _family("EventsIdle").__mro__}


@pytest.mark.parametrize(
    ("options", "kind", "message"),
    [
        ({"beacon_port": 0}, ConfigValueError, "beacon_port must be in 1..65535"),
        ({"evasive_timeout": 9.0, "expired_timeout": 9.0}, ConfigValueError, "expired_timeout"),
        ({"discovery": "carrier-pigeon"}, ConfigValueError, "discovery must be one of"),
        ({"name": 3}, ConfigTypeError, "name must be a str"),
        ({"headers": {"X-A": 1}}, ConfigTypeError, "names and values are str"),
        ({"gossip_connect": 7}, ConfigTypeError, "gossip_connect is an endpoint"),
        ({"beacons_refresh": 1}, ConfigTypeError, "beacons_refresh must be True or False"),
        ({"busy_poll": 0.002}, ConfigValueError, "busy_poll must be 0 \\(off\\) to 0.001"),
        ({"busy_poll": -1e-6}, ConfigValueError, "busy_poll must be 0 \\(off\\)"),
        ({"busy_poll": "50us"}, ConfigTypeError, "busy_poll must be a number of seconds"),
    ],
)
def test_a_bad_option_raises_a_config_error_that_names_it(
    options: dict[str, Any], kind: type[ConfigError], message: str
) -> None:
    with pytest.raises(kind, match=message) as raised:
        NodeConfig(**options)
    # Still what it was before the root: code catching ValueError/TypeError is unchanged.
    assert isinstance(raised.value, ValueError if kind is ConfigValueError else TypeError)
    assert isinstance(raised.value, ConfigError)


def test_a_bad_curve_allow_is_a_config_error_too() -> None:
    # The key rules live in the transport; the option's error names the option.
    with pytest.raises(ConfigTypeError, match="curve_allow"):
        NodeConfig(curve=Certificate.generate(), curve_allow=42)
    with pytest.raises(ConfigValueError, match="curve_allow"):
        NodeConfig(curve=Certificate.generate(), curve_allow=[b"short"])
