"""The speedup a run's own counters imply under a cost profile.

For each verification step s, with c_s cached context rows, n_s tree rows verified and
d_s draft forwards over about (n_s - 1) / d_s nodes each:

    method ms = sum_s f_T(c_s, n_s) + d_s * f_D(c_s, (n_s - 1) / d_s) + overhead + commit
    AR ms     = sum over the same tokens of f_T(c, 1) + overhead

so predicted speedup = AR ms / method ms; with constant context this is TALON's
tau * f_T(1) / (mean f_T(n) + delta * f_D + overhead). Prefill is left out of both
(it is the same forward for both). What the measured decode time holds beyond the
predicted forwards is the engine's own overhead (tree building, Python bookkeeping).
"""

from __future__ import annotations

from specbench.costs.profile import CostProfile


def steps(run: dict):
    """(context, tree rows, draft forwards) of every verification of a sample (all turns)."""
    step = 0
    for prompt_len, ids in zip(run["prompt_tokens"], run["turn_ids"]):
        produced = 1  # the prefill picks the first token
        while produced < len(ids) and step < len(run["accept_lengths"]):
            n = 1 + sum(run["tree_widths"][step])
            yield prompt_len + produced - 1, n, run["step_draft_forwards"][step]
            produced += run["accept_lengths"][step]
            step += 1


def predict(runs: list[dict], profile: CostProfile, drafter: str | None) -> dict:
    """Predicted speedup over AR for the samples `runs` (as run.py writes them), and the
    share of the measured decode time that the profile does not explain. At batch size 1
    only: a batched step's cost depends on every row's tree at once, which per-sample
    counters do not record."""
    if any(r.get("batch_size", 1) > 1 for r in runs):
        return {"note": "predicted speedup is computed at batch size 1 only"}
    draft_curve = profile.drafters.get(drafter) if drafter else None
    per_step_extra = profile.step_overhead_ms
    method_ms = ar_ms = forward_ms = 0.0
    drafted = False
    for run in runs:
        for context, n, drafts in steps(run):
            verify = profile.target.at(context, n)
            draft = 0.0
            drafted = drafted or drafts > 0
            if drafts and draft_curve is not None:
                draft = drafts * draft_curve.at(context, max(1.0, (n - 1) / drafts))
            forward_ms += verify + draft
            method_ms += verify + draft + per_step_extra + (profile.commit_ms if n > 1 else 0.0)
        for prompt_len, ids in zip(run["prompt_tokens"], run["turn_ids"]):
            mid = prompt_len + len(ids) / 2
            ar_ms += (len(ids) - 1) * (profile.target.at(mid, 1) + per_step_extra)
    if not method_ms:
        return {}
    decode_ms = sum((r["seconds"] - r.get("prefill_seconds", 0.0)) * 1000 for r in runs)
    result = {
        "predicted_speedup": ar_ms / method_ms,
        "predicted_decode_seconds": method_ms / 1000,
        "engine_overhead_share": max(0.0, 1 - forward_ms / decode_ms) if decode_ms else None,
        "profile": {"model": profile.key["model"], "dtype": profile.key["dtype"]},
    }
    if drafted and draft_curve is None:
        result["note"] = f"no cost curve for drafter {drafter}: draft forwards left out of the prediction"
    return result
