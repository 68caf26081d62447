"""The rules, sans I/O: peer protocol, presence, elections, gossip state, guards.

Nothing here imports ``trio`` or ``zmq`` (``make lint`` checks it): inputs
carry the time, outputs are events and actions the node's shell carries out.
"""
