"""The nightly overhead history: the Parquet store, the nights its shards make up, change detection, the
static dashboard, and a synthetic history for tests (``teperf nightly``, ``history``, ``dashboard``,
``import``)."""
