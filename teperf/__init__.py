"""teperf: paired, interleaved host-overhead benchmarks for TransformerEngine.

Kept import-free on purpose: the worker (which runs in the measured side's
interpreter) imports ``teperf.worker`` through this package, and must not pull
in click, pandas or anything else the side may lack.
"""

__version__ = "0.2.0"
