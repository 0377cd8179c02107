"""Reads: pure functions over the store (and the live ring) that answer the read tools.

They never import the runtime; the runtime and every surface call them.
"""
