"""How bytes move: pyzmq under Trio, links to peers, discovery, CURVE's ZAP handler."""
