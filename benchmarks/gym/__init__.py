"""The optimizer gym's command line: ``python -m benchmarks.gym --help`` (see optimizers.gym)."""
