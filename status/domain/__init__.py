"""The pure domain of the status service (stdlib only).

Identifiers, the lifecycle state machine, version and sequence rules,
definitions and policies, projections and the error hierarchy.  Nothing here
does I/O or reads a clock: time is passed in.
"""
