"""teperf counters check: file.py (the expected-counters file and its calls sidecar), gate.py (count a
side or read a bundle's counters, compare, --update) and render.py (the text). Import from the modules."""
