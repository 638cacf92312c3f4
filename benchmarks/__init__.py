"""Benchmarks: see benchmarks/README.md (run with ``python3 dev.py bench``)."""
