"""Benchmarks that print their figures (``python -m bench.ingest``); not timed tests."""
