"""The Typer application behind the `acta` command (`typer typer_app.py run` works too)."""

from acta_sqla.cli import app

__all__ = ["app"]
