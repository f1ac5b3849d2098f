"""Pilot-predicted tree shapes against exhaustive calibration, side by side in one process.

For each calibration set (chat, code, math) the method's `auto` shape is chosen twice on the
same target, drafter and cost profile: from a pilot decode with the other shapes predicted
(costs/pilot.py, what runs do, on costs.calibration_prompts x calibration_tokens), and by
decoding every candidate, none left out for its ceiling (the exhaustive rule, on
`--reference` prompts x tokens: by default the 6 x 96 runs calibrated on before the pilot).
Prints both choices, the exhaustive calibration's predicted speedup of each (so a different
choice reads as the speed it gives up), the shapes decoded and the seconds each took.

    .venv/bin/python scripts/bench_pilot.py --method sps
    .venv/bin/python scripts/bench_pilot.py --method medusa --kinds chat --reference 4x64
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path

import torch

from specbench.costs import autotune, pilot, pool
from specbench.costs import dtype as dtype_rule
from specbench.costs.fingerprint import cpu_info
from specbench.engine import methods
from specbench.run import plan
from specbench.run.config import compose_config


def choose(tree_cfg, drafter, verifier, target, profile, setup, exhaustive: bool):
    nested, ceiling, margin = pilot.nested, autotune.ceiling, autotune.RACE_MARGIN
    if exhaustive:  # every shape on every prompt: no pilot, no ceiling, no race
        pilot.nested, autotune.ceiling = (lambda trees: False), (lambda *_: float("inf"))
        autotune.RACE_MARGIN = 1.0
    try:
        start = time.perf_counter()
        chosen, record = autotune.tune(tree_cfg, drafter, verifier, target.lm, profile, setup)
        return chosen, record, time.perf_counter() - start
    finally:
        pilot.nested, autotune.ceiling, autotune.RACE_MARGIN = nested, ceiling, margin


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--method", default="sps")
    parser.add_argument("--kinds", nargs="+", default=["chat", "code", "math"])
    parser.add_argument("--dtype", default="auto", help="hardware.dtype (auto: decided as a run decides it)")
    parser.add_argument("--reference", default="6x96", help="prompts x tokens of the exhaustive calibration")
    args = parser.parse_args()
    ref_prompts, ref_tokens = (int(v) for v in args.reference.split("x"))
    cfg = compose_config([f"method={args.method}", f"hardware.dtype={args.dtype}"])
    dtype, _ = dtype_rule.resolve(
        dict(cfg["hardware"]), cfg["model"], method_cfg=cfg["method"], engine=cfg.get("engine")
    )
    model, tokenizer = pool.target(cfg["model"], dtype, "cpu")
    info = cpu_info()
    print(
        f"# {args.method}: {info['cpu_model']} ({info['cpu_family_model']}; {', '.join(info['isa'])}), "
        f"{torch.get_num_threads()} threads, {dtype}"
    )
    rows = []
    for kind in args.kinds:
        # hardware.dtype as given (auto: the forward decided as a run decides it, fp16 weights included)
        kind_cfg = compose_config(
            [f"method={args.method}", f"hardware.dtype={args.dtype}", f"dataset.calibration={kind}"]
        )
        setting = plan.setting_for(kind_cfg, [], model, tokenizer)
        target = plan.forward_of(kind_cfg, model, dtype)
        drafter = methods.load_drafter(kind_cfg["method"], model, target.hardware, target.lm.compiled)
        verifier = methods.instantiate_part(kind_cfg["method"]["verifier"], "method.verifier")
        profile = plan.cost_profile(setting, target, drafter)
        reference_cfg = compose_config(
            [
                f"method={args.method}",
                f"hardware.dtype={args.dtype}",
                f"dataset.calibration={kind}",
                f"costs.calibration_prompts={ref_prompts}",
                f"costs.calibration_tokens={ref_tokens}",
            ]
        )
        settings = {"pilot": setting, "exhaustive": plan.setting_for(reference_cfg, [], model, tokenizer)}
        results = {}
        with tempfile.TemporaryDirectory() as scratch:
            for name, exhaustive in (("pilot", False), ("exhaustive", True)):
                setup = dataclasses.replace(plan.calibration(settings[name]), cache=Path(scratch) / name)
                results[name] = choose(
                    kind_cfg["method"]["tree"], drafter, verifier, target, profile, setup, exhaustive
                )
        (p_chosen, p_record, p_s), (e_chosen, e_record, e_s) = results["pilot"], results["exhaustive"]
        keys = list(e_record["candidates"][0]["tree"])
        speed = {str(c["tree"]): c["predicted_speedup"] for c in e_record["candidates"]}

        def shape(chosen: dict) -> str:
            return str({k: chosen[k] for k in keys}) if all(k in chosen for k in keys) else "drafting off"

        p_speed, e_speed = speed.get(shape(p_chosen), 1.0), speed.get(shape(e_chosen), 1.0)
        decoded = sum(c.get("measured", True) for c in p_record["candidates"])
        rows.append(
            f"| {kind} | {shape(p_chosen)} | {shape(e_chosen)} | {p_speed:.2f}x | {e_speed:.2f}x | "
            f"{p_speed / e_speed:.3f} | {decoded} / {len(e_record['candidates'])} | {p_s:.0f} / {e_s:.0f} |"
        )
        print(rows[-1], flush=True)
    print(
        f"\npilot on {cfg['costs']['calibration_prompts']} x {cfg['costs']['calibration_tokens']}, "
        f"exhaustive on {args.reference}"
    )
    print(
        "\n| calibration set | pilot's shape | exhaustive's shape | exhaustive's prediction of the pilot's | "
        "of its own | ratio | shapes decoded (pilot / exhaustive) | seconds (pilot / exhaustive) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
