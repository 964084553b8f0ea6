"""Reusable harnesses that drive the runtime the way a serving engine under faults would: the soak's
workload, its disk fault injector and its read oracle (``benchmarks/soak.py`` and the test suite share
them)."""
