"""Run Alembic migrations programmatically (``task-observer migrate``, tests, ``dev``)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

import status

_PACKAGE = Path(status.__file__).resolve().parent


def script_location() -> Path:
    """The Alembic environment: ``status/migrations`` in an installed wheel (the build maps the
    checkout's top-level ``migrations/`` there), the top-level ``migrations/`` in a checkout."""
    for candidate in (_PACKAGE / "migrations", _PACKAGE.parent / "migrations"):
        if (candidate / "env.py").is_file():
            return candidate
    raise RuntimeError(f"no Alembic environment beside {_PACKAGE}: the installation is incomplete")


def alembic_config(database_url: str) -> Config:
    """An Alembic config pointing at the service's migrations (see ``script_location``)."""
    config = Config()
    config.set_main_option("script_location", str(script_location()))
    # '%' must be escaped for ConfigParser interpolation (URL-encoded passwords).
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(database_url), revision)
