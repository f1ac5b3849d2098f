"""The drafters' training prompts: generators per kind, their sources, and the checks that
keep benchmark prompts out of them."""
