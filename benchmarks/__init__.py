"""Benchmarks: run as `python -m benchmarks.<name>`; not part of the test suite (see docs/benchmarks.md).

The modules import the steps' code in the functions that use it: most of it pulls in Paddle, boto3 or kserve
(seconds each to import), which --help and a benchmark's other parts do not need. Configuration and the
benchmarks' own modules are imported at the top.
"""
