"""Benchmarks: ``python -m bench.bench_<name>`` (not run by the test suite)."""
