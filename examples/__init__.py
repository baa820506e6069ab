"""Runnable examples of the Temporal plugin and the coordinator helper."""
