"""Reading the transcribed paper tables (results/reference/<paper>.csv) in tests."""

import csv
from pathlib import Path

REFERENCE = Path(__file__).resolve().parents[1] / "results" / "reference"
HEADER = ["paper", "table", "model", "method", "dataset", "temperature", "setting", "metric", "value"]
KEY = HEADER[:-1]


def load(paper: str) -> tuple[list[str], list[dict]]:
    """The CSV's header and its rows as dicts."""
    with (REFERENCE / f"{paper}.csv").open(newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = next(reader)
        return header, [dict(zip(header, r)) for r in reader]
