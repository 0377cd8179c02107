"""Benchmarks of the agentwatch ground floor: store appends and reads, live delivery.

Run them with `make bench` (or `python -m bench [--quick] [--only NAME ...]`). Every figure is printed
beside a raw baseline measured in the same run, and as the ratio between the two; see `bench/README.md`.
"""
