"""The node: a Trio shell running the rules of :mod:`trizre.sansio` over :mod:`trizre.transport`."""
