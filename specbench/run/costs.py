"""`python -m specbench.run.costs [model=...] [hardware=...] [method=...]`: measure (or show
the cached) cost profile of a target and the method's drafter on this machine.

    python -m specbench.run.costs method=eagle3            # the embedded model + its EAGLE-3 head
    python -m specbench.run.costs method=sps costs.refresh=true   # time the dtype probe and the curves again
"""

from __future__ import annotations

import sys

from specbench import costs
from specbench.costs import dtype as dtype_rule
from specbench.costs.fingerprint import fingerprint_id
from specbench.costs.predict import tau_needed
from specbench.engine import methods
from specbench.errors import run_command
from specbench.models import registry
from specbench.run.config import compose_config


def main(argv: list[str]) -> None:
    if {"-h", "--help"} & set(argv):
        print(__doc__.strip())
        return
    refresh = "costs.refresh=true" in argv
    cfg = compose_config([a for a in argv if not a.startswith("costs.refresh=")])
    hardware, model_cfg = dict(cfg["hardware"]), cfg["model"]
    hardware["dtype"], dtype_choice = dtype_rule.resolve(
        hardware, model_cfg, refresh=refresh, method_cfg=cfg["method"], engine=cfg.get("engine")
    )
    if hardware.get("threads"):
        import torch

        torch.set_num_threads(hardware["threads"])
    model, _ = registry.load(model_cfg, hardware["dtype"], hardware["device"])
    target, _ = costs.target_lm(
        model, cfg, hardware, refresh=refresh, drafter_layers=methods.drafter_layers(cfg["method"])
    )
    drafter = methods.load_drafter(cfg["method"], model, hardware, target.compiled)
    name = costs.drafter_id(cfg["method"].get("drafter"))
    key = costs.profile_key(
        registry.cache_name(model_cfg, model=model),
        hardware["dtype"],
        hardware["device"],
        hardware.get("threads"),
        target.kind,
    )
    longest = min(model_cfg.get("context_length") or model.config.max_position_embeddings, 2048)
    profile = costs.ensure_profile(
        key,
        target,
        longest,
        {name: drafter} if drafter else None,
        repeats=cfg["costs"]["repeats"],
        max_n=cfg["costs"]["max_n"],
        refresh=refresh,
    )
    curve = profile.target
    print(
        f"{model_cfg['name']} {hardware['dtype']} on {fingerprint_id(key['fingerprint'])} "
        f"({' '.join(key['fingerprint']['isa'])}, {key['fingerprint']['threads']} threads)"
    )
    for context in curve.contexts:
        print(
            f"  target c={context}: "
            + "  ".join(f"n={n} {curve.at(context, n):.1f}" for n in (1, 2, 4, 8, 16, 32, 64) if n <= curve.max_n)
            + " ms"
        )
    for drafter_name, draft in profile.drafters.items():
        print(
            f"  drafter {drafter_name} c={draft.contexts[0]}: "
            + "  ".join(f"n={n} {draft.at(draft.contexts[0], n):.2f}" for n in (1, 4, 16, 64) if n <= draft.max_n)
            + " ms"
        )
    print(
        f"  step overhead {profile.step_overhead_ms:.2f} ms, commit {profile.commit_ms:.2f} ms -> "
        f"{costs.profile_path(key)} (+ .png)"
    )
    print_break_even(profile, hardware["dtype"], dtype_choice)


def print_break_even(profile, dtype: str, dtype_choice: dict | None) -> None:
    """What any drafter must reach here: the tokens per step (tau) a tree of n tokens needs
    for 1.0x and 1.3x over AR, with drafting free, against AR in its own (faster) dtype."""
    ar_ratio, against = 1.0, f"AR in {dtype}"
    ar_dtype = (dtype_choice or {}).get("ar_dtype", dtype)
    if ar_dtype != dtype:
        probe = dtype_choice["probe"]
        ar_ratio = probe[ar_dtype]["1"] / probe[dtype]["1"]
        against = f"AR in {ar_dtype} (its one-token forward {ar_ratio:.2f}x this profile's)"
    context = min(profile.target.contexts, key=lambda c: abs(c - 512))
    sizes = [n for n in (2, 4, 8, 16, 32, 64) if n <= profile.target.max_n]
    print(f"  tau a step must reach against {against}, drafting free (c={context}; '>n': no tree of n tokens can):")
    for gain in (1.0, 1.3):
        needed = {n: tau_needed(profile, context, n, gain, ar_ratio) for n in sizes}
        print(f"    {gain:.1f}x: " + "  ".join(f"n={n} {t:.2f}{' >n' if t > n else ''}" for n, t in needed.items()))


if __name__ == "__main__":
    run_command(main, sys.argv[1:])
