"""Benchmarks: `make bench` (bench/run.py), bench/tick.py, bench/locustfile.py."""
