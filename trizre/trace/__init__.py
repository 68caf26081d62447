"""Traces: the contract (kinds, schema) in ``_contract``, the writer in ``_writer``.

The audit imports the contract only (``make lint`` checks it).
"""
