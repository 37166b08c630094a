"""The name of the schema acta's models are declared in, in a module of its own: the
models, the engine helpers and the statement builders all need it, and none of them may
import another for it (that made an import circle: models -> store -> models)."""

from __future__ import annotations

SCHEMA = "acta"
"""The schema name the models are declared in; remapped at run time when configured
(``ACTA_SCHEMA``, through ``schema_translate_map``)."""
