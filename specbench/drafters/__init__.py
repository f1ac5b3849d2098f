"""Drafters: where draft tokens come from."""
