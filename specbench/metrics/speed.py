"""Speed metrics, exactly as the measurement protocol defines them.

tokens: new tokens after the prompt; N_p: target forwards after prefill; N_q: draft
forwards (per sequence: the verifications it took part in and the draft forwards
during them); tau = cycle tokens / N_p, the papers' tokens per draft-verify cycle: the new
tokens less each turn's first, which the prefill gives, so AR's tau is 1.00;
delta = N_q / N_p; tok/s = tokens / wall seconds
(prefill included): at batch size B > 1, throughput, every token of the batch over the
batch's wall time, with each sample's latency beside it. Aggregates are ratios of sums
over all samples and turns.
"""

from __future__ import annotations

from collections import Counter
from statistics import median

from specbench.metrics.intervals import of_sums


def totals(runs: list[dict]) -> dict:
    """Aggregate per-sample measurements of one method (each a dict as specbench.metrics.records writes it)."""
    tokens = sum(r["new_tokens"] for r in runs)
    seconds = wall_seconds(runs)
    n_p = sum(r["target_forwards"] for r in runs)
    n_q = sum(r["draft_forwards"] for r in runs)
    lengths = Counter(n for r in runs for n in r["accept_lengths"])
    return {
        "samples": len(runs),
        "tokens": tokens,
        "seconds": round(seconds, 4),
        "tok_per_s": tokens / seconds if seconds else None,
        "tau": tau(runs),
        "delta": n_q / n_p if n_p else 0.0,
        "target_forwards": n_p,
        "batch_size": max((r.get("batch_size", 1) for r in runs), default=1),
        "mean_latency_s": sum(r["seconds"] for r in runs) / len(runs) if runs else None,
        "draft_forwards": n_q,
        "accept_length_hist": {str(k): lengths[k] for k in sorted(lengths)},
        "target_nll_per_token": sum(r.get("nll", 0.0) for r in runs) / tokens if tokens else None,
        "verifier": verifier_counts(runs),
    }


def cycle_tokens(run: dict) -> int:
    """The new tokens the draft-verify cycles gave: all but each turn's first (the prefill's)."""
    return run["new_tokens"] - sum(1 for ids in run["turn_ids"] if ids)


def tau(runs: list[dict]) -> float | None:
    """Cycle tokens per target forward over these samples (a ratio of sums); None without a verification."""
    forwards = sum(r["target_forwards"] for r in runs)
    return sum(cycle_tokens(r) for r in runs) / forwards if forwards else None


def sample_tau(run: dict) -> float | None:
    """One sample's tau (cycle tokens per target forward); None without a verification."""
    return tau([run])


def wall_seconds(runs: list[dict]) -> float:
    """Decoding wall time of these samples: each batch's time counted once."""
    batches = {r["batch_id"]: r["batch_seconds"] for r in runs if r.get("batch_size", 1) > 1}
    return sum(r["seconds"] for r in runs if r.get("batch_size", 1) == 1) + sum(batches.values())


def verifier_counts(runs: list[dict]) -> dict:
    """The verifier's counters summed over samples (observation lists stay per sample)."""
    counts: dict[str, int] = {}
    for r in runs:
        for key, value in r.get("verifier_notes", {}).items():
            if not isinstance(value, list):
                counts[key] = counts.get(key, 0) + value
    return counts


def speedup(method: list[dict], baseline: list[dict]) -> dict:
    """Speedup over the baseline on the same samples: ratio of aggregate tok/s (ours),
    the median of per-sample ratios (robust to one slow prompt), and their mean (the
    convention of EAGLE, MARS and Spec-Bench)."""
    m, b = totals(method), totals(baseline)
    per_sample = [r for r in (sample_speedup(x, y) for x, y in zip(method, baseline)) if r is not None]
    return {
        "speedup": m["tok_per_s"] / b["tok_per_s"] if m["tok_per_s"] and b["tok_per_s"] else None,
        "speedup_ci95": bootstrap_ci(method, baseline),
        "speedup_median_per_sample": median(per_sample) if per_sample else None,
        "speedup_mean_per_sample": sum(per_sample) / len(per_sample) if per_sample else None,
    }


def sample_speedup(method: dict, baseline: dict) -> float | None:
    """One sample's tok/s over the baseline's tok/s on the same prompt; None without timings."""
    if method["seconds"] and baseline["seconds"] and baseline["new_tokens"]:
        return (method["new_tokens"] / method["seconds"]) / (baseline["new_tokens"] / baseline["seconds"])
    return None


def bootstrap_ci(method: list[dict], baseline: list[dict]) -> list[float] | None:
    """95% interval (specbench.metrics.intervals) of the aggregate speedup over resampled
    batches (a sample at batch size 1), each batch's method and AR tokens and wall time drawn
    together: how far the ratio could move with other prompts of the same kind. A batch
    drawn twice counts its tokens and its wall time twice. None below MIN_GROUPS batches."""
    table = [
        [*_tokens_seconds([method[i] for i in g]), *_tokens_seconds([baseline[i] for i in g])]
        for g in batch_groups(method)
    ]
    return of_sums(table, lambda s: (s[0] / s[1]) / (s[2] / s[3])).bounds


def ratio_ci(runs: list[dict], numerator, denominator) -> list[float] | None:
    """95% interval (over batches, as bootstrap_ci) of sum(numerator) / sum(denominator),
    each a record's key or a function of the record (tau = cycle_tokens / target_forwards);
    None below MIN_GROUPS batches."""

    def value(run, part):
        return part(run) if callable(part) else run[part]

    table = [
        [sum(value(runs[i], numerator) for i in g), sum(value(runs[i], denominator) for i in g)]
        for g in batch_groups(runs)
    ]
    return of_sums(table, lambda s: s[0] / s[1]).bounds


def intervals(runs: list[dict]) -> dict:
    """tau's and delta's 95% intervals, for a run's results beside their point values."""
    return {
        "tau_ci95": ratio_ci(runs, cycle_tokens, "target_forwards"),
        "delta_ci95": ratio_ci(runs, "draft_forwards", "target_forwards"),
    }


def batch_groups(runs: list[dict]) -> list[list[int]]:
    """Indices of the samples decoded together (one per sample at batch size 1), ordered by
    batch id (a sample's id at batch size 1), so an interval does not depend on the order
    the records were written in."""
    groups: dict[str, list[int]] = {}
    for i, run in enumerate(runs):
        batched = run.get("batch_size", 1) > 1 and run.get("batch_id")
        groups.setdefault(run["batch_id"] if batched else str(i), []).append(i)
    return sorted(groups.values(), key=lambda g: (str(runs[g[0]].get("batch_id", "")), g[0]))


def _tokens_seconds(runs: list[dict]) -> tuple[int, float]:
    return sum(r["new_tokens"] for r in runs), wall_seconds(runs)


def agreement(method: list[dict], baseline: list[dict]) -> dict:
    """Precision of a (possibly lossy) method against the baseline's output for the same
    prompt and settings: how often the ids are identical, and the tokens (and fraction of
    the baseline's tokens) reproduced before the first difference."""
    exact, prefix_fractions, prefix_tokens = [], [], []
    for x, y in zip(method, baseline):
        for a, b in zip(x["turn_ids"], y["turn_ids"]):
            exact.append(a == b)
            common = next((i for i, (s, t) in enumerate(zip(a, b)) if s != t), min(len(a), len(b)))
            prefix_fractions.append(common / max(len(b), 1))
            prefix_tokens.append(common)
    if not exact:
        return {}
    return {
        "exact_match_rate": sum(exact) / len(exact),
        "mean_common_prefix_fraction": sum(prefix_fractions) / len(prefix_fractions),
        "mean_common_prefix_tokens": sum(prefix_tokens) / len(prefix_tokens),
    }
