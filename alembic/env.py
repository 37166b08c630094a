"""Alembic environment of acta-sqla's own migrations (async, asyncpg).

The database is, in order: a connection handed in by `acta_sqla.migrate` (or by an
application folding acta's migrations into its own environment), `sqlalchemy.url` in the
Alembic config, ACTA_DATABASE_URL, or the embedded default.
"""

from __future__ import annotations

from acta_sqla.migrate import run_env
from alembic import context

run_env(context)
