"""Sans-I/O codec for the ZRE wire: UDP beacons and ZeroMQ TCP messages.

Nothing here does I/O or imports trio or zmq: bytes in, attrs objects out,
and back. Decoders raise only :class:`DecodeError` (and its subclasses
:class:`VersionMismatch` and :class:`UnknownCommand`), whatever they are
fed; encoders raise :class:`EncodeError` for values the wire cannot carry.
Beside ZRE itself: czmq's gossip protocol (ZGP), which zyre's gossip
discovery speaks, and 27/ZAP requests, which a CURVE node answers.
See ``docs/wire.md``.
"""

from ._beacon import (
    BEACON_VERSIONS,
    CURVE_KEY_SIZE,
    DISCOVERY_PORT,
    Beacon,
    decode_beacon,
    encode_beacon,
)
from ._errors import DecodeError, EncodeError, UnknownCommand, VersionMismatch, WireError
from ._gossip import (
    GOSSIP_SIGNATURE,
    GossipCommand,
    GossipHello,
    GossipInvalid,
    GossipMessage,
    GossipPing,
    GossipPong,
    GossipPublish,
    decode_gossip,
    encode_gossip,
)
from ._message import (
    DEFAULT_VERSION,
    MESSAGE_VERSIONS,
    SIGNATURE,
    Command,
    Elect,
    Goodbye,
    Hello,
    Join,
    Leader,
    Leave,
    Message,
    Ping,
    PingOk,
    Shout,
    Whisper,
)
from ._message_codec import (
    HEADER,
    decode,
    election_body,
    encode,
    encode_whisper,
    group_string,
    hello_excess,
    parse_election_body,
    shout_builder,
    shout_encoder,
    shout_header,
    whisper_sequence,
)
from ._oversize import OVERSIZE
from ._sequence import (
    HELLO_SEQUENCE,
    INITIAL_SEQUENCE,
    SEQUENCE_MODULUS,
    is_next,
    next_sequence,
    sequence_distance,
)
from ._zap import (
    ZAP_ENDPOINT,
    ZAP_VERSION,
    ZapReply,
    ZapRequest,
    decode_zap_request,
    encode_zap_reply,
)

__all__ = [
    "OVERSIZE",
    # beacons
    "BEACON_VERSIONS",
    "CURVE_KEY_SIZE",
    "DISCOVERY_PORT",
    "Beacon",
    "decode_beacon",
    "encode_beacon",
    # messages
    "DEFAULT_VERSION",
    "MESSAGE_VERSIONS",
    "SIGNATURE",
    "Command",
    "Elect",
    "Goodbye",
    "Hello",
    "Join",
    "Leader",
    "Leave",
    "Message",
    "Ping",
    "PingOk",
    "Shout",
    "Whisper",
    "HEADER",
    "decode",
    "election_body",
    "encode",
    "encode_whisper",
    "hello_excess",
    "parse_election_body",
    "group_string",
    "shout_builder",
    "shout_encoder",
    "shout_header",
    "whisper_sequence",
    # errors
    "DecodeError",
    "EncodeError",
    "UnknownCommand",
    "VersionMismatch",
    "WireError",
    # ZGP, czmq's gossip (zyre's gossip discovery)
    "GOSSIP_SIGNATURE",
    "GossipCommand",
    "GossipHello",
    "GossipInvalid",
    "GossipMessage",
    "GossipPing",
    "GossipPong",
    "GossipPublish",
    "decode_gossip",
    "encode_gossip",
    # 27/ZAP, for CURVE
    "ZAP_ENDPOINT",
    "ZAP_VERSION",
    "ZapReply",
    "ZapRequest",
    "decode_zap_request",
    "encode_zap_reply",
    # sequence numbers
    "HELLO_SEQUENCE",
    "INITIAL_SEQUENCE",
    "SEQUENCE_MODULUS",
    "is_next",
    "next_sequence",
    "sequence_distance",
]
