"""Benchmarks: run as `python -m benchmarks.<name>`; not part of the test suite (see docs/benchmarks.md)."""
