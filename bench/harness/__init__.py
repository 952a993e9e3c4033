"""tally benchmark harness: the modules behind bench/run.py (see its docstring)."""
