"""Benchmarks: ``python -m bench.<module>``; each prints its figures against a baseline."""
