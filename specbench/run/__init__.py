"""One benchmark run: its config composed and checked, the plan of what it will use on this
machine, the runner and its groups, the cached AR baseline, the summary and tracking."""
