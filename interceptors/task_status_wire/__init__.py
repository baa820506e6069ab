"""The wire contract shared by the status service's gRPC adapter and the worker plugin:
``task_events.proto``, its generated modules, and the conversion between its messages and the
JSON shapes of the REST API (so both transports speak one set of semantics).

Regenerate after editing the .proto: ``scripts/proto`` (a test checks the files are current).
"""
