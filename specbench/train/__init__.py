"""Training drafters for a target."""
