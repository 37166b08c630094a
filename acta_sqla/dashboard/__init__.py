"""acta's web dashboard (the optional extra ``acta-sqla[dashboard]``): see, search and act
on jobs. ``acta dashboard`` serves it; ``acta_dashboard(...)`` is the ASGI app to mount in
your own application, behind your own authentication::

    from acta_sqla.dashboard import acta_dashboard
    app.mount("/acta", acta_dashboard(engine=engine))

Nothing else in acta imports this package: a worker never loads Starlette or Jinja2.
"""

from __future__ import annotations

try:
    import jinja2  # noqa: F401
    import starlette  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        f"the acta dashboard needs the 'dashboard' extra ({exc.name} is missing): "
        "pip install 'acta-sqla[dashboard]'"
    ) from exc

from .app import NAV, acta_dashboard

__all__ = ["NAV", "acta_dashboard"]
