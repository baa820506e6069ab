"""Temporal plugin: interceptors that report activity steps to the status service."""
