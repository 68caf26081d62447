"""The commands' node options are NodeConfig's declaration, parsed in this process.

``trizre/cli/_common.py`` makes its ``node`` flags from the declaration
(``trizre/node/_config.py``): the flags, their defaults and their help are
the declared ones, and a command line turns into the ``open_node``
arguments it always did.  (tests/system/test_cli.py runs the commands.)
"""

from __future__ import annotations

import argparse

import pytest

from trizre import NodeConfig
from trizre.cli import build_parser
from trizre.cli._common import CommandError, node_flags, node_kwargs

# The flags, and the option each sets, as the command line had them before
# they were made from the declaration: none may be renamed or lost.
FLAGS = {
    "--interface": "interface",
    "--beacon-port": "beacon_port",
    "--name": "name",
    "--beacon-interval": "beacon_interval",
    "--evasive-timeout": "evasive_timeout",
    "--expired-timeout": "expired_timeout",
    "--gossip": "gossip_connect",
    "--gossip-bind": "gossip_bind",
    "--gossip-server-key": "gossip_server_key",
    "--endpoint": "endpoint",
    "--curve": "curve",
    "--curve-allow": "curve_allow",
    "--busy-poll": "busy_poll",  # issue 28's low-latency mode, new
}


def parse(*argv: str) -> argparse.Namespace:
    return build_parser("peers").parse_args(["peers", *argv])


def node_group(command: str) -> argparse._ArgumentGroup:
    parser = build_parser(command)
    sub = next(
        action for action in parser._actions if isinstance(action, argparse._SubParsersAction)
    )
    return next(g for g in sub.choices[command]._action_groups if g.title == "node")


@pytest.mark.parametrize("command", ["peers", "ping", "chat", "watch", "mdp-bridge"])
def test_every_networked_command_offers_the_declared_flags(command: str) -> None:
    offered = {
        action.option_strings[0]: action.dest for action in node_group(command)._group_actions
    }
    assert offered == FLAGS
    assert offered == {flag.name: name for name, _, _, flag in node_flags()}


def test_defaults_and_help_are_the_declarations() -> None:
    fields = {f.name: f.default for f in NodeConfig.__attrs_attrs__}
    args = parse()
    for name in ("beacon_port", "beacon_interval", "evasive_timeout", "expired_timeout"):
        assert getattr(args, name) == fields[name]
    helps = {a.dest: a.help for a in node_group("peers")._group_actions}
    assert helps["beacon_port"] == "UDP discovery port (default 5670, ZRE's)"
    assert helps["beacon_interval"] == "seconds between beacons (default 1)"
    assert helps["expired_timeout"] == "silence before a peer is removed (default 30)"


def test_a_command_line_gives_the_open_node_arguments_it_always_did() -> None:
    args = parse(
        *("--interface", "lo", "--beacon-port", "5999", "--name", "n"),
        *("--beacon-interval", "0.5", "--evasive-timeout", "2", "--expired-timeout", "9"),
    )
    assert node_kwargs(args, name="default") == {
        "name": "n",
        "beacon_port": 5999,
        "beacon_interval": 0.5,
        "evasive_timeout": 2.0,
        "expired_timeout": 9.0,
        "interface": "lo",
        "busy_poll": 0.0,  # the node's default: off
    }
    assert node_kwargs(parse("--interface", "lo"), name="default")["name"] == "default"


def test_gossip_flags_give_gossip_discovery() -> None:
    args = parse(
        *("--gossip", "tcp://127.0.0.1:9001", "--gossip", "tcp://127.0.0.1:9002"),
        *("--endpoint", "tcp://127.0.0.1:*"),
    )
    kwargs = node_kwargs(args)
    assert kwargs["discovery"] == "gossip"
    assert kwargs["gossip_connect"] == ("tcp://127.0.0.1:9001", "tcp://127.0.0.1:9002")
    assert kwargs["endpoint"] == "tcp://127.0.0.1:*"
    assert "interface" not in kwargs
    NodeConfig(**kwargs)  # what open_node will check, accepted


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ("--evasive-timeout", "5", "--expired-timeout", "5"),
            "--expired-timeout must be greater than --evasive-timeout",
        ),
        (("--gossip", "tcp://127.0.0.1:9001"), "gossip needs --endpoint"),
        (("--curve-allow", "any"), "--curve-allow needs --curve"),
    ],
)
def test_refusals_name_the_flags(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        node_kwargs(parse("--interface", "lo", *argv))


@pytest.mark.parametrize(
    "argv",
    [
        ("--beacon-port", "0"),
        ("--beacon-interval", "-1"),
        ("--expired-timeout", "x"),
        ("--busy-poll", "-0.00005"),
    ],
)
def test_bad_values_are_usage_errors(argv: tuple[str, ...]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse(*argv)
    assert exited.value.code == 2


def test_busy_poll_gives_the_low_latency_mode() -> None:
    kwargs = node_kwargs(parse("--interface", "lo", "--busy-poll", "0.00005"))
    assert kwargs["busy_poll"] == 0.00005
    NodeConfig(**kwargs)  # what open_node will check, accepted
