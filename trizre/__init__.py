"""trizre: a Trio-native ZeroMQ Realtime Exchange (ZRE) implementation."""

__version__ = "0.1.0"
