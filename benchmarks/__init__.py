"""Benchmarks: runnable with ``python -m benchmarks.<name>``."""
