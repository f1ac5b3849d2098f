"""Offline searches over draft-tree shapes (EntMTP's acceptance frontier)."""
