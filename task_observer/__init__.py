"""The ``task-observer`` command: the service, the observer, the demo stack, tokens, archives.

It sits above both ``status`` (the service) and ``observer`` and wires them from the settings;
neither imports it, and the service does not import the observer.
"""
