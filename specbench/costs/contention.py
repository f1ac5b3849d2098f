"""Whether other processes used the CPU while we timed. A probe or profile measured beside
another job (a training run, a test suite) prices every forward too high; thrown away, it
would be paid again by every run while the machine stays busy. So a measurement records how
many cores others used; a contended one is cached with that note, reused while the machine
is busy, and measured again (refined) by the first run that finds the machine idle."""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import dataclass

# average cores used by other processes above which timings are not trusted for the cache;
# SPECBENCH_CONTENDED_CORES raises it on a machine that is never idle (a shared node)
DEFAULT_CONTENDED_CORES = 0.25


def contended(others: float | None) -> bool:
    """Whether timings taken while others used `others` cores are unfit to cache."""
    return others is not None and others > float(os.environ.get("SPECBENCH_CONTENDED_CORES", DEFAULT_CONTENDED_CORES))


@dataclass
class Usage:
    others: float | None = None  # mean cores busy outside this process; None where unknown


@contextmanager
def watch():
    """Yields a Usage filled in on exit: the machine's busy CPU time minus this process's,
    over the wall time in between (Linux /proc/stat; unknown elsewhere)."""
    usage = Usage()
    busy, own, wall = _busy_seconds(), time.process_time(), time.perf_counter()
    yield usage
    elapsed = time.perf_counter() - wall
    if busy is not None and elapsed > 0:
        usage.others = max(0.0, ((_busy_seconds() - busy) - (time.process_time() - own)) / elapsed)


def idle_now(seconds: float = 0.5) -> bool:
    """Whether other processes leave the CPU free enough to time on, sampled over `seconds`
    (False where unknown: a contended measurement is then kept, not refined)."""
    with watch() as usage:
        time.sleep(seconds)
    return usage.others is not None and not contended(usage.others)


def retime(others: float | None) -> bool:
    """Whether a cached measurement timed while others used `others` cores is to be timed
    again now: it was contended, and the machine is idle (looked at only then)."""
    return contended(others) and idle_now()


def note(others: float | None) -> str:
    """A contended measurement, in words, for a log line or a summary."""
    return f"timed while other processes kept {others:.1f} cores busy"


def kept(what: str, others: float | None, log) -> None:
    """Say, where `what` was timed beside another job, that it is cached with that note."""
    if contended(others):
        log(
            f"  note: {what} {note(others)}; cached with this note, and timed again by the first run on an idle machine"
        )


def _busy_seconds() -> float | None:
    """CPU seconds spent by all cores on anything but idling, since boot."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = [int(x) for x in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    guests = sum(fields[8:10])  # guest time is already counted in user and nice
    return (sum(fields) - idle - guests) / os.sysconf("SC_CLK_TCK")
