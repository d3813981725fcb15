"""teperf: paired, interleaved host-overhead benchmarks for TransformerEngine.

Import-free: the worker imports ``teperf.worker`` through it in the measured side's interpreter."""

__version__ = "0.2.0"
