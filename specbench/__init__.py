"""specbench: one engine and one measurement protocol for speculative decoding."""

from pathlib import Path

# the checkout the package runs from: conf/, results/ and runners/ sit beside the package
ROOT = Path(__file__).resolve().parents[1]
