"""The one cache of measurements kept between runs: dtype and compile probes, cost profiles
and shape calibrations. A record is a JSON file named by what it is valid for (the weights,
the machine fingerprint, what was measured) and carries its version; a run reads it, measures
only what it lacks, and writes it whole. A record timed while other processes used the CPU
is kept with `contended_cores`: reused while the machine stays busy (paying for it again
would cost every run), and timed again by the first run that finds the machine idle."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from specbench.costs import contention
from specbench.models import registry


def root() -> Path:
    """Where the cache's records live (SPECBENCH_CACHE, else ~/.cache/specbench)."""
    return registry.cache_dir() / "costs"


def write_whole(path: Path, text: str) -> None:
    """Write a cache file so that a reader (another run, a parallel test worker) sees the
    old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.partial-{os.getpid()}")
    tmp.write_text(text)
    tmp.replace(path)


def read(path: Path) -> dict | None:
    """The record at `path`, None when there is none (or it is not JSON)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def refine_now(what: str, others: float | None, log) -> bool:
    """Whether a record timed while others used `others` cores is to be timed again now
    (it was contended and the machine is idle), saying so."""
    if not contention.retime(others):
        return False
    log(f"refining {what} ({contention.note(others)}): the machine is idle now")
    return True


def keep(path: Path, text: str, what: str, others: float | None, log) -> None:
    """Save a record; one timed beside another job goes with that note."""
    write_whole(path, text)
    contention.kept(what, others, log)


def lacking(
    path: Path, fingerprint: dict, parts: list[str], refresh: bool = False, version: int | None = None, log=print
) -> tuple[dict | None, list[str]]:
    """The probe record at `path` (None where there is none valid for this machine's
    `fingerprint` and probe `version`) and which of `parts` (forward sizes, sub-probes) it
    lacks. A contended record found on an idle machine is dropped, every part it had then
    lacking too; `refresh`: every part lacking."""
    record = None if refresh else read(path)
    if record is not None and (
        record.get("fingerprint") != fingerprint or record.get("version") != version or "parts" not in record
    ):
        record = None
    if record is not None and refine_now(path.name, record.get("contended_cores"), log):
        parts, record = list(dict.fromkeys([*record["parts"], *parts])), None
    have = record["parts"] if record is not None else []
    return record, [part for part in parts if part not in have]


def added(
    path: Path,
    fingerprint: dict,
    record: dict | None,
    missing: list[str],
    fresh: dict,
    others: float | None,
    version: int | None = None,
    log=print,
) -> dict:
    """`record` (None: a new one) with the `missing` parts just measured (`fresh`, merged
    in, so a part one run adds never invalidates another's), saved; `others`: the cores
    other processes used meanwhile (contention.watch), kept as the record's note."""
    others = None if others is None else round(others, 2)
    if record is None:
        record = {
            "fingerprint": fingerprint,
            **({"version": version} if version is not None else {}),
            "parts": [],
            "contended_cores": others,
        }
    elif others is not None:
        record["contended_cores"] = max(record.get("contended_cores") or 0.0, others)
    have = record["parts"]
    record = merged(record, fresh)
    record["parts"] = [*have, *missing]
    keep(path, json.dumps(record, indent=1), path.name, others, log)
    return record


def measured_parts(
    path: Path,
    fingerprint: dict,
    measure: Callable[[list[str]], dict],
    parts: list[str],
    refresh: bool = False,
    version: int | None = None,
    log=print,
) -> tuple[dict, float | None]:
    """The probe record at `path` with every one of `parts` this run needs: `measure(missing)`
    times just the ones it lacks (`lacking`), so each part is timed at most once per machine
    and probe version, and they are added to it (`added`). Also returns the seconds
    measuring took (None when nothing was measured)."""
    record, missing = lacking(path, fingerprint, parts, refresh, version, log)
    if not missing:
        return record, None
    start = time.perf_counter()
    with contention.watch() as usage:
        fresh = measure(missing)
    return added(path, fingerprint, record, missing, fresh, usage.others, version, log), time.perf_counter() - start


def merged(old: dict, new: dict) -> dict:
    """`old` with `new`'s leaves written over it, nested dicts merged key by key (a probe's
    timings per kind and size)."""
    out = dict(old)
    for key, value in new.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out
