"""Drafters: where draft tokens come from. Each module's `load` is the DrafterLoader
(specbench.engine.parts) its config's `_target_` names."""
