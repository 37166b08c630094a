"""Side-by-side benchmarks of acta-sqla and PgQueuer (see docs/performance.md).

Not part of the test suite: run ``python -m benchmarks.run`` (``--smoke`` for a quick check).
"""
