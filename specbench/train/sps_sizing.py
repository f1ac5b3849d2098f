"""Which SpS draft shape pays on this machine: each trained candidate's chain tau per
gamma (held-out greedy target answers), its forward timed here through the engine's
drafter, and the target's cost profile give a predicted speedup over AR per gamma:

    speedup(gamma) = tau(gamma) * (f_T(c, 1) + o) / (f_T(c, gamma + 1) + f_D(c, tau) + (gamma - 1) * f_D(c, 1) + o +
    commit)

A step's first draft forward reads the accepted tokens of the step before (about tau of
them) and proposes one token; the gamma - 1 others read one token each. o is the engine's
per-step overhead, as in specbench.costs.predict. A bigger draft accepts more but costs
more per token: the shape with the best speedup at its best gamma wins, among those whose
file fits `--max-file-mb` (what the package ships; 0 for no limit).

Candidates are fresh LAYERSxHIDDEN Llamas (PCA-seeded embedding, full vocabulary) or cuts
of the target, `cutL1,L2,...[vN]`: those target layers and final norm (the target's
width), under the target's vocabulary or with an own output vocabulary of the N tokens
the target's answers use most (sps_draft --from-target / --draft-vocab).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import torch

SHAPE = re.compile(r"^(\d+)x(\d+)$")
CUT = re.compile(r"^cut(\d+(?:,\d+)*)(?:v(\d+))?$")
SHAPE_FORMS = (
    "LAYERSxHIDDEN with layers >= 1 and hidden a multiple of 8 (e.g. 4x192), or cutL1,L2,...[vN] (e.g. cut0,1v6144)"
)


def parse_shape(shape: str) -> dict:
    """The trainer's arguments for a candidate: {layers, hidden} of "LAYERSxHIDDEN" (hidden
    splits into the draft's 4 heads of even size, for RoPE), or {from_target, draft_vocab}
    of "cutL1,L2,...[vN]" (draft_vocab 0: the target's vocabulary)."""
    fresh, cut = SHAPE.match(shape), CUT.match(shape)
    if fresh and int(fresh[1]) >= 1 and int(fresh[2]) >= 8 and int(fresh[2]) % 8 == 0:
        return {"layers": int(fresh[1]), "hidden": int(fresh[2]), "from_target": None, "draft_vocab": 0}
    if cut and (cut[2] is None or int(cut[2]) > 0):
        return {"from_target": [int(x) for x in cut[1].split(",")], "draft_vocab": int(cut[2] or 0)}
    raise argparse.ArgumentTypeError(f"{shape!r} is not {SHAPE_FORMS}")


def shape_argument(shape: str) -> str:
    """argparse type of --shapes: the shape as given, once it parses."""
    parse_shape(shape)
    return shape


def fits(row: dict, max_file_mb: float) -> bool:
    """Whether a ranked candidate's file fits the limit (0: no limit)."""
    return not max_file_mb or row["file_mb"] <= max_file_mb


def predicted_speedups(taus: list[float], target_ms, draft_ms, overhead_ms: float, commit_ms: float) -> list[float]:
    """Speedup over AR per gamma = 1..len(taus); target_ms(n) and draft_ms(n) are forward
    times over n new tokens at the pricing context."""
    ar = target_ms(1) + overhead_ms
    out = []
    for gamma, tau in enumerate(taus, start=1):
        step = target_ms(gamma + 1) + draft_ms(tau) + (gamma - 1) * draft_ms(1) + overhead_ms + commit_ms
        out.append(tau * ar / step)
    return out


def rank(records: dict[str, dict], root: Path, context: int, max_gamma: int, max_file_mb: float = 0) -> dict:
    """Price every trained shape on this machine; write sizing.json and sizing.md under
    `root` and return the ranking (best first; the chosen one is the best that fits
    `max_file_mb`)."""
    from specbench import costs
    from specbench.costs import dtype as dtype_rule
    from specbench.costs.fingerprint import fingerprint_id
    from specbench.costs.profile import measure_drafter
    from specbench.drafters.small_lm import SmallLMDrafter, load_draft
    from specbench.models import registry
    from specbench.run.config import compose_config

    cfg = compose_config(["method=sps"])
    hardware, model_cfg = dict(cfg["hardware"]), cfg["model"]
    hardware["dtype"], _ = dtype_rule.resolve(hardware, model_cfg)
    if hardware.get("threads"):
        torch.set_num_threads(hardware["threads"])
    model, _ = registry.load(model_cfg, hardware["dtype"], hardware["device"])
    target, _ = costs.target_lm(model, cfg, hardware)
    key = costs.profile_key(
        registry.cache_name(model_cfg, model=model),
        hardware["dtype"],
        hardware["device"],
        hardware.get("threads"),
        target.kind,
    )
    repeats = cfg["costs"]["repeats"]
    profile = costs.ensure_profile(key, target, context + 64, repeats=repeats, max_n=cfg["costs"]["max_n"])
    rows = []
    for shape, record in records.items():
        draft, vocab = load_draft(
            {"name": f"sps-draft-{shape}", "path": str(root / shape)},
            model,
            hardware["dtype"],
            hardware["device"],
            "sizing candidate",
        )
        drafter = SmallLMDrafter(
            draft, model.config.vocab_size, hardware.get("forward", "auto"), target.compiled, vocab
        )
        curve = measure_drafter(drafter, target, [context], max_gamma + 1, repeats)
        taus = record["validation_chain_tau_by_gamma"][:max_gamma]
        speedups = predicted_speedups(
            taus,
            lambda n: profile.target_ms(1, context, n),
            lambda n: curve.at(context, n),
            profile.step_overhead_ms,
            profile.commit_ms,
        )
        best = max(range(len(speedups)), key=speedups.__getitem__)
        rows.append(
            {
                "shape": shape,
                "layers": record["layers"],
                "hidden": record["hidden"],
                "parameters": record["parameters"],
                "draft_vocab": record.get("draft_vocab"),
                "file_mb": round((root / shape / "model.safetensors").stat().st_size / 1e6, 2),
                "steps": record["steps"],
                "answer_tokens_seen": record["answer_tokens_seen"],
                "top1": (record.get("validation") or {}).get("top1", [None])[0],
                "tau_by_gamma": [round(t, 3) for t in taus],
                "draft_ms_1": round(curve.at(context, 1), 3),
                "cost_ratio": round(curve.at(context, 1) / profile.target_ms(1, context, 1), 4),
                "speedup_by_gamma": [round(s, 3) for s in speedups],
                "best_gamma": best + 1,
                "best_speedup": round(speedups[best], 3),
            }
        )
    rows.sort(key=lambda r: -r["best_speedup"])
    chosen = next((r for r in rows if fits(r, max_file_mb)), None)
    result = {
        "machine": key["fingerprint"],
        "dtype": hardware["dtype"],
        "context": context,
        "target_ms_1": round(profile.target_ms(1, context, 1), 3),
        "step_overhead_ms": profile.step_overhead_ms,
        "commit_ms": profile.commit_ms,
        "max_file_mb": max_file_mb,
        "shapes": rows,
        "chosen": chosen["shape"] if chosen else None,
    }
    root.mkdir(parents=True, exist_ok=True)
    (root / "sizing.json").write_text(json.dumps(result, indent=1))
    lines = [
        f"# SpS draft sizing on {fingerprint_id(key['fingerprint'])} ({' '.join(key['fingerprint']['isa'])}, "
        f"{key['fingerprint']['threads']} threads, {hardware['dtype']})",
        "",
        f"Forwards priced at context {context}: target one-token forward {result['target_ms_1']:.2f} ms. "
        "tau from greedy chains on held-out target answers; predicted speedup over AR at each shape's best gamma"
        + (f"; files over {max_file_mb:g} MB are not chosen." if max_file_mb else "."),
        "",
        "| shape | parameters | file MB | steps | top-1 | tau (gamma 1/2/4/8) | draft ms (1 token) | cost ratio "
        "| best gamma | predicted speedup |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        taus = "/".join(f"{r['tau_by_gamma'][g - 1]:.2f}" for g in (1, 2, 4, 8) if g <= len(r["tau_by_gamma"]))
        top1 = f"{r['top1']:.3f}" if r["top1"] is not None else "-"
        size = f"{r['file_mb']:.1f}" + ("" if fits(r, max_file_mb) else " (over)")
        lines.append(
            f"| {r['shape']} | {r['parameters'] / 1e6:.1f} M | {size} | {r['steps']} | {top1} | {taus} | "
            f"{r['draft_ms_1']:.2f} | "
            f"{r['cost_ratio']:.3f} | {r['best_gamma']} | {r['best_speedup']:.2f}x |"
        )
    (root / "sizing.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    if chosen:
        print(f"chosen: {chosen['shape']} (gamma {chosen['best_gamma']}, predicted {chosen['best_speedup']:.2f}x)")
    else:
        print(f"no shape's file fits {max_file_mb:g} MB")
    return result
