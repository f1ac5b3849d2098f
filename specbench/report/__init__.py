"""Tables and figures for people."""
