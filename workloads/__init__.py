"""Workloads: hyper-parameter tuning generator, Coflow-Benchmark reader, JSON format."""
