"""Code that runs inside the measured process.

Everything under ``teperf.worker`` depends on the standard library, torch and
(for the TE backend) transformer_engine only, so that it runs in whatever
interpreter a side points at. torch is imported lazily, after the process has
been pinned to its core.
"""
