"""The schema's ``MetaData`` and the column types its tables share.

Types are chosen so the same definitions work on MySQL 8.0, MariaDB 10.6+ and SQLite (the ``dev``
default):

* timestamps are ``DATETIME(3)`` on MySQL/MariaDB (millisecond precision, UTC);
* identifiers are strings (``tsk_v1_<bucket>_<ULID>`` and friends, design D4);
* version columns are 64-bit; versions travel as decimal strings in JSON.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
    }
)

# Millisecond timestamps on MySQL/MariaDB; SQLite stores ISO text.
Timestamp = sa.DateTime().with_variant(mysql.DATETIME(fsp=3), "mysql", "mariadb")
# AUTO_INCREMENT BIGINT on MySQL; SQLite only auto-increments INTEGER PRIMARY KEY.
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Json = sa.JSON()
Id = sa.String(64)  # workflowId / taskId / executionId / eventId
Version = sa.BigInteger()

MYSQL_TABLE_ARGS: dict[str, Any] = {
    "mysql_engine": "InnoDB",
    "mysql_charset": "utf8mb4",
    "mysql_collate": "utf8mb4_bin",
}
