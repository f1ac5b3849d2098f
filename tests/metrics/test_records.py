"""Resume from a samples file torn at any point: every complete record is kept, and the
next append starts on a line of its own."""

import json

import pytest

from specbench.metrics.records import read_records

FIRST, SECOND, THIRD = ({"id": str(i), "method": {"new_tokens": i}} for i in range(3))
LINES = json.dumps(FIRST) + "\n" + json.dumps(SECOND)


@pytest.mark.parametrize(
    "torn",
    [
        LINES + "\n" + json.dumps(THIRD)[:9],  # killed mid-write
        LINES,  # the whole record, killed before its newline
        LINES + "\n\n",  # an empty last line
        json.dumps(FIRST) + "\n\n" + json.dumps(SECOND) + "\n",  # an empty line between records
    ],
    ids=["half record", "record without newline", "empty last line", "empty line between"],
)
def test_torn_samples_file_keeps_complete_records_and_appends_on_a_new_line(torn, tmp_path):
    path = tmp_path / "samples.jsonl"
    path.write_text(torn)
    assert read_records(path) == [FIRST, SECOND]
    with open(path, "a", encoding="utf-8") as out:  # as the Runner appends
        out.write(json.dumps(THIRD) + "\n")
    assert read_records(path) == [FIRST, SECOND, THIRD]
    assert path.read_text().endswith(json.dumps(SECOND) + "\n" + json.dumps(THIRD) + "\n")


def test_missing_file_has_no_records(tmp_path):
    assert read_records(tmp_path / "samples.jsonl") == []
