"""Task Status Service: the source of truth for task, step and workflow status."""

__version__ = "0.1.0"
