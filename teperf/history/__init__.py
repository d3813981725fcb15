"""The nightly overhead history: the Parquet store, the nights its shards make up, change detection, the
static dashboard (``teperf nightly``, ``history``, ``dashboard``, ``import``)."""
