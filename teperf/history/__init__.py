"""The nightly overhead history: store, change detection, dashboard.

- ``store``: append-only Parquet files, one per run, on a local path or an fsspec URL.
- ``changepoint``: E-divisive means with a permutation test (steps), Mann-Kendall /
  Theil-Sen (drifts), with a minimum effect size.
- ``nights``: the shards of one night put back together; a night short of a shard says so.
- ``analysis``: history rows -> per-cell series and changes mapped onto commits.
- ``dashboard``: the static site (Jinja2, autoescaped; plotly.js bundled locally).
- ``synthetic``: a made-up history for tests and for trying the dashboard.

Commands: ``teperf nightly``, ``teperf history``, ``teperf dashboard``, ``teperf import``.
"""
