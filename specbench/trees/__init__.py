"""Tree policies: which draft nodes to expand and keep."""
