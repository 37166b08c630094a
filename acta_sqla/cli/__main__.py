"""``python -m acta_sqla.cli``: the ``acta`` command without its console script."""

from . import main

main()
