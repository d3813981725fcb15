"""Code that runs inside the measured process: the standard library, torch and (for the TE backend)
transformer_engine only, so that it runs in whatever interpreter a side points at."""
