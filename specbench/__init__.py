"""specbench: one engine and one measurement protocol for speculative decoding."""
