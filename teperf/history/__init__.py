"""The nightly overhead history: store, change detection, dashboard.

- ``store``: append-only Parquet files, one per run, on a local path or an fsspec URL.
- ``changepoint``: the levels' search: E-divisive means with a permutation test (steps where no
  night's paired compare exists), Mann-Kendall / Theil-Sen (drifts), with a minimum effect size.
- ``nights``: the shards of one night put back together; a night short of a shard says so.
- ``analysis``: history rows -> per-cell series; change points from the nights' paired compares.
- ``dashboard``: the static site (Jinja2, autoescaped; plotly.js bundled locally).
- ``synthetic``: a made-up history for tests and for trying the dashboard.

Commands: ``teperf nightly``, ``teperf history``, ``teperf dashboard``, ``teperf import``.
"""
