"""Sample records: what one method produced for one sample, built the same way by the
runner and by the calibration decodes, and the JSONL files runs keep them in."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from specbench.engine.loop import merge_notes


@dataclass
class MethodRun:
    """What one method produced for one sample (all turns)."""

    new_tokens: int
    seconds: float  # this sample's latency (all turns), decoding only
    prefill_seconds: float
    target_forwards: int
    draft_forwards: int
    accept_lengths: list[int]
    turn_ids: list[list[int]]
    turn_texts: list[str]
    stop_reasons: list[str]
    prompt_tokens: list[int]
    nll: float  # target NLL of all new tokens (T=1), summed
    step_draft_forwards: list[int]
    tree_widths: list[list[int]]
    accepted_sibling_ranks: list[list[int]]
    verifier_notes: dict
    batch_size: int = 1  # sequences decoded together (gen.batch_size, fewer in a last batch)
    batch_seconds: float = 0.0  # the whole batch's decoding time, the same in each of its samples
    verify_seconds: float = 0.0  # the whole batch's time in the target's verification forwards
    batch_id: str = ""  # the first sample of its batch: throughput counts each batch's time once
    # per verification: the verified tree's summed draft confidence
    tree_scores: list[float] = field(default_factory=list)


def method_run(runs: list, batch_size: int, batch_seconds: float, batch_id: str, verify_seconds: float) -> MethodRun:
    """One sample's turns, summed."""
    return MethodRun(
        new_tokens=sum(len(r.ids) for _, r, _ in runs),
        seconds=sum(r.seconds for _, r, _ in runs),
        prefill_seconds=sum(r.prefill_seconds for _, r, _ in runs),
        target_forwards=sum(r.target_forwards for _, r, _ in runs),
        draft_forwards=sum(r.draft_forwards for _, r, _ in runs),
        accept_lengths=[n for _, r, _ in runs for n in r.accept_lengths],
        turn_ids=[r.ids for _, r, _ in runs],
        turn_texts=[t for _, _, t in runs],
        stop_reasons=[r.stop_reason for _, r, _ in runs],
        prompt_tokens=[n for n, _, _ in runs],
        nll=sum(r.nll for _, r, _ in runs),
        step_draft_forwards=[n for _, r, _ in runs for n in r.step_draft_forwards],
        tree_widths=[w for _, r, _ in runs for w in r.tree_widths],
        accepted_sibling_ranks=[a for _, r, _ in runs for a in r.accepted_sibling_ranks],
        tree_scores=[v for _, r, _ in runs for v in r.tree_scores],
        verifier_notes=notes_of([r for _, r, _ in runs]),
        batch_size=batch_size,
        batch_seconds=batch_seconds,
        verify_seconds=verify_seconds,
        batch_id=batch_id,
    )


def notes_of(results) -> dict:
    notes = {}
    for result in results:
        merge_notes(notes, result.verifier_notes)
    return notes


def read_records(path: Path) -> list[dict]:
    """Finished samples (or corpus rows) of an earlier, possibly interrupted run. The file is
    left ending with the newline of its last complete record, so the next append starts a
    line of its own: a torn record (killed mid-write) and empty last lines are cut, and a
    complete record that lacks only its newline is kept and gets one. Empty lines between
    records are skipped."""
    if not path.exists():
        return []
    records, read, good_bytes, ends_line = [], 0, 0, True
    with open(path, "rb") as f:
        for line in f:
            read += len(line)
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                break
            good_bytes, ends_line = read, line.endswith(b"\n")
    with open(path, "rb+") as f:
        f.truncate(good_bytes)
        if not ends_line:
            f.seek(good_bytes)
            f.write(b"\n")
    return records
