"""The speedup a run's own counters imply under a cost profile.

For each verification step s of a batch, with B_s rows still decoding, mean cached
context c_s, the widest row's tree n_s (rows pad to it) and d_s draft forwards over about
(n_s - 1) / d_s nodes each:

    method ms = sum_s f_T(B_s, c_s, n_s) + d_s * f_D(B_s, c_s, (n_s - 1) / d_s) + overhead + commit + tree(n_s)
    AR ms     = sum over AR's steps on the same rows and tokens of f_T(B, c, 1) + overhead

so the predicted decode speedup is AR ms / method ms (throughput at the same batch size);
at batch size 1 with constant context this is TALON's tau * f_T(1) / (mean f_T(n) + delta *
f_D + overhead). The predicted speedup adds each turn's prefill, f_T(B, 0, prompt tokens),
to both, as the measured one counts it (on 128-token answers it was 3-6% of AR's time on
AMD EPYC Zen 5, and left out, every prediction read that much high). tree(n) is
the per-step work of building and checking a tree beyond AR's step (a plane in the rows'
mean tree size and the step's draft forwards, calibrated on other prompts: autotune.overhead_line). What the measured
decode time holds beyond the predicted forwards is the engine's own overhead.
"""

from __future__ import annotations

from statistics import fmean

from specbench.costs.profile import CostProfile
from specbench.metrics.speed import batch_groups

# the widest drift of a decode's pace from its profile's that pace() corrects: absolute times
# on these VMs drift up to 1.5x between runs
MAX_PACE = 2.0


def turn_steps(run: dict) -> list[list[tuple[int, int, int]]]:
    """Per turn of a sample: (context, tree rows, draft forwards) of every verification."""
    turns, step = [], 0
    for prompt_len, ids in zip(run["prompt_tokens"], run["turn_ids"]):
        produced, found = 1, []  # the prefill picks the first token
        while produced < len(ids) and step < len(run["accept_lengths"]):
            found.append(
                (prompt_len + produced - 1, 1 + sum(run["tree_widths"][step]), run["step_draft_forwards"][step])
            )
            produced += run["accept_lengths"][step]
            step += 1
        turns.append(found)
    return turns


def predict(runs: list[dict], profile: CostProfile, drafter: str | None, tree_overhead: dict | None = None) -> dict:
    """Predicted speedup over AR at the runs' batch size for the samples `runs` (as specbench.metrics.records
    writes them), the verification steps, and the share of the measured decode time that
    the profiled forwards do not explain. `tree_overhead` ({"ms", "ms_per_node", "ms_per_draft"}) prices
    each drafting step's tree work; without it that work is left out."""
    priced_drafts = drafter is not None and profile.draft_ms(drafter, 1, 0, 1) is not None
    method_ms = ar_ms = prefill_ms = forward_ms = decode_ms = tree_ms = verify_ms = measured_verify_ms = 0.0
    steps = 0
    drafted = False
    for batch in ([runs[i] for i in group] for group in batch_groups(runs)):
        per_row = [turn_steps(r) for r in batch]
        for turn in range(max(len(t) for t in per_row)):
            rows = [(r, t[turn]) for r, t in zip(batch, per_row) if turn < len(t)]
            for s in range(max((len(found) for _, found in rows), default=0)):
                active = [found[s] for _, found in rows if s < len(found)]
                verify, draft, tree, step = step_ms(active, profile, drafter if priced_drafts else None, tree_overhead)
                drafted = drafted or any(d for _, _, d in active)
                forward_ms += verify + draft
                verify_ms += verify
                tree_ms += tree
                method_ms += step
                steps += 1
            ar_ms += ar_turn_ms([(r["prompt_tokens"][turn], len(r["turn_ids"][turn])) for r, _ in rows], profile)
            prefill_ms += profile.target_ms(len(rows), 0, max(r["prompt_tokens"][turn] for r, _ in rows))
        # every row holds the batch's time over all turns, but only its own turns' prefills:
        # the row with the most turns was in every prefill
        decode_ms += min((r.get("batch_seconds", r["seconds"]) - r.get("prefill_seconds", 0.0)) * 1000 for r in batch)
        if measured_verify_ms is not None and all(r.get("verify_seconds") for r in batch):
            measured_verify_ms += min(r["verify_seconds"] for r in batch) * 1000
        else:
            measured_verify_ms = None
    if not method_ms:
        return {}
    result = {
        "predicted_speedup": (ar_ms + prefill_ms) / (method_ms + prefill_ms),
        "predicted_decode_speedup": ar_ms / method_ms,
        "predicted_decode_seconds": method_ms / 1000,
        "predicted_ar_decode_seconds": ar_ms / 1000,
        "predicted_prefill_seconds": prefill_ms / 1000,
        "measured_decode_seconds": decode_ms / 1000,
        "predicted_verify_seconds": verify_ms / 1000,
        # the verification forwards as timed in the decode (None for records that did not time them)
        "measured_verify_seconds": measured_verify_ms / 1000 if measured_verify_ms is not None else None,
        "steps": steps,
        "engine_overhead_share": None,
        "tree_overhead_ms_per_step": tree_ms / steps if tree_overhead else None,
        "profile": {"model": profile.key["model"], "dtype": profile.key["dtype"]},
    }
    if decode_ms:  # the forwards at the pace the decode ran, as calibration reads unpriced work
        result["engine_overhead_share"] = max(0.0, 1 - forward_ms * pace(result) / decode_ms)
    if drafted and not priced_drafts:
        result["note"] = f"no cost curve for drafter {drafter}: draft forwards left out of the prediction"
    return result


def step_ms(active: list[tuple], profile: CostProfile, drafter: str | None, tree_overhead: dict | None) -> tuple:
    """(verification, drafting, tree work, the whole step) ms of one batched step whose rows
    are at (context, tokens verified, draft forwards) `active`: the widest row's forwards for
    the batch, drafting priced where `drafter` is given, the engine's work per step and the
    commit on top."""
    width, context = len(active), fmean(c for c, _, _ in active)
    n, drafts = max(n for _, n, _ in active), max(d for _, _, d in active)
    verify = profile.target_ms(width, context, n)
    draft = (
        drafts * profile.draft_ms(drafter, width, context, max(1.0, (n - 1) / drafts)) if drafts and drafter else 0.0
    )
    tree = tree_step_ms(tree_overhead, fmean(n for _, n, _ in active), drafts) if n > 1 else 0.0
    step = verify + draft + tree + profile.step_overhead(width) + (profile.commit_ms if n > 1 else 0.0)
    return verify, draft, tree, step


def pace(forecast: dict) -> float:
    """How much slower (> 1) or faster than when profiled the machine ran during a decode:
    its verification forwards as timed over their profiled price. Unpriced work is the decode
    time at the profile's pace minus the priced forwards; without this, a calibration decode
    timed while the VM ran slow charges the whole slowdown to tree work (a fixed SpS chain on
    AMD EPYC Zen 5 was charged 23.8 ms a step once and 0 when calibrated again, and its runs'
    summaries predicted 0.55-0.60x where they measured 1.02-1.07x). Bounded by MAX_PACE: past
    it the profile is not of this machine (or is synthetic), and the bound is used."""
    measured, priced = forecast.get("measured_verify_seconds"), forecast.get("predicted_verify_seconds")
    if not measured or not priced:
        return 1.0
    return min(MAX_PACE, max(1 / MAX_PACE, measured / priced))


def tau_needed(profile: CostProfile, context: float, n: int, gain: float, ar_ratio: float = 1.0) -> float:
    """Tokens a step that verifies `n` tokens must accept on average to decode `gain` times
    as fast as AR, with drafting and tree work free: a lower bound for any drafter. A tree
    of n tokens (the pending token and n-1 drafts) accepts at most n, so a bound above n
    means no tree of that size reaches the gain on this machine. `ar_ratio`: AR's step time
    over this profile's one-token step (AR in a faster dtype than the profile's: < 1)."""
    ar = (profile.target_ms(1, context, 1) + profile.step_overhead(1)) * ar_ratio
    step = profile.target_ms(1, context, n) + profile.step_overhead(1) + profile.commit_ms
    return gain * step / ar


def tree_step_ms(line: dict | None, mean_tree_size: float, draft_forwards: float) -> float:
    """A step's tree work on the calibrated plane (records of a size-only line count no work per draft forward)."""
    if not line:
        return 0.0
    return max(0.0, line["ms"] + line["ms_per_node"] * mean_tree_size + line.get("ms_per_draft", 0.0) * draft_forwards)


def ar_turn_ms(rows: list[tuple[int, int]], profile: CostProfile) -> float:
    """AR decoding (prompt length, new tokens) rows as one batch: one-token forwards over
    the rows still decoding, until the longest is done."""
    total = 0.0
    for k in range(max(new for _, new in rows) - 1):
        active = [prompt + k for prompt, new in rows if k < new - 1]
        total += profile.target_ms(len(active), fmean(active), 1) + profile.step_overhead(len(active))
    return total
