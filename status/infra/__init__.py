"""Adapters of the status service: database tables, unit of work, settings."""
