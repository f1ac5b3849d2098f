"""Benchmark prompts: every dataset yields the same record shape."""
