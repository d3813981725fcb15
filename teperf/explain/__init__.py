"""Where did the delta come from: ``teperf explain`` (``capture``: profile a cell again, ``diff``: what
changed per function, ``render``: text and JSON) and the counter lines of compare and bisect."""
