"""Helpers shared by tests/ and benchmarks/: the real traces, hand-made cases and campaign generators.

Not installed with synthtrace; importable from the repository root (pytest's pythonpath, the benchmarks'
sys.path).
"""
