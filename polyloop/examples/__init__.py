"""Agents that ship with PolyLoop, to try it without writing one.

`polyloop.examples.demo:agent` is the demo agent: a scripted model (no
network, no API key) and four real tools in a scratch directory, with a
crash switch. `polyloop demo` runs it.
"""
