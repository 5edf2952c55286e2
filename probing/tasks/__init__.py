"""One module per entry script (`probe.py` -> `probing.tasks.probe.run`); nothing below this package imports it."""
