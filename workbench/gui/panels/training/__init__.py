"""Training: the wizard, live curves, run comparison, evaluation and profiler views."""
