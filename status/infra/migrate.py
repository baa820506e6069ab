"""Run Alembic migrations programmatically (``task-observer migrate``, tests, ``dev``)."""

from __future__ import annotations

from importlib import resources

from alembic import command
from alembic.config import Config


def alembic_config(database_url: str) -> Config:
    """An Alembic config pointing at the packaged ``status.migrations`` folder."""
    config = Config()
    config.set_main_option("script_location", str(resources.files("status.migrations")))
    # '%' must be escaped for ConfigParser interpolation (URL-encoded passwords).
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(database_url), revision)
