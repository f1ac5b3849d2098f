"""`make bench`: what speed this machine gets, written to results/bench/speed-<fingerprint>.md.

1. The machine: CPU model and ISA flags (or GPU), torch, threads, the dtype `auto` chose.
2. Our AR, PLD and SpS against transformers' generate, prompt lookup and assisted
   generation (same model, same draft, same draft length), side by side per prompt, and
   our AR against the memory-bandwidth floor (weights read per token / measured read speed);
   our AR in bf16 against fp32, side by side (auto may choose them differently for AR and
   for drafting methods: specbench/costs/dtype.py).
3. Every method's default (auto dtype and auto tree shape) through the runner itself
   (python -m specbench's Runner, the same summary a user gets; a dataset's runs share one
   AR decode per prompt, specbench.run.group), with the speedup the cost profile predicts
   beside the measured one.

    python scripts/bench_speed.py --prompts 10 --max-new-tokens 128
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from bench_dtype import compare_dtypes  # noqa: E402
from bench_vs_transformers import compare, config, floor_line  # noqa: E402

from specbench.costs import autotune, cache  # noqa: E402
from specbench.costs import dtype as dtype_rule  # noqa: E402
from specbench.costs.fingerprint import device_fingerprint, fingerprint_id  # noqa: E402
from specbench.engine.candidates import DRAFTING_OFF  # noqa: E402
from specbench.errors import require, run_command  # noqa: E402
from specbench.run.config import run_name  # noqa: E402
from specbench.run.group import groups, run_group  # noqa: E402
from specbench.run.runner import Runner  # noqa: E402


def add_run_arguments(parser: argparse.ArgumentParser, prompts: int) -> None:
    """The arguments run_method reads (and where results go)."""
    parser.add_argument("--prompts", type=int, default=prompts)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--runs", default="outputs/bench", help="where the runs go (resumable by config hash)")
    parser.add_argument("--out", type=Path, default=Path("results/bench"))
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every run, e.g. hardware=cpu-bf16")


def forwards(ar_by_dtype: dict) -> str:
    """' (float32: fp32 activations on fp16 weights, LeanTreeLM-fp16-weights; ...)': what each
    AR computed in and its forward, where the comparison recorded them (an fp32 AR on fp16
    weights is not plain fp32; comparisons cached before precisions were recorded name forwards only)."""
    kinds, precisions = ar_by_dtype.get("forwards"), ar_by_dtype.get("precisions", {})
    return f" ({'; '.join(f'{d}: {precisions.get(d, d)}, {k}' for d, k in kinds.items())})" if kinds else ""


def method_runner(method: str, dataset: str, args) -> Runner:
    """The Runner of `method`'s default on `dataset` with the bench's settings."""
    cfg = config(
        f"method={method}",
        f"dataset={dataset}",
        f"dataset.limit={args.prompts}",
        "dataset.seed=0",
        "dataset.max_turns=1",
        f"gen.max_new_tokens={args.max_new_tokens}",
        f"output_root={args.runs}",
        *args.overrides,
    )
    out_dir = Path(args.runs) / method / run_name(cfg)
    out_dir.mkdir(parents=True, exist_ok=True)
    return Runner(cfg, out_dir)


def run_method(method: str, dataset: str, args) -> dict:
    return method_runner(method, dataset, args).run()


def run_dataset(methods: list[str], dataset: str, args) -> list[dict]:
    """Each method's summary on `dataset`, in `methods`' order, the runs decoded as one group
    (specbench.run.group): per prompt, AR once and every method back to back, the order
    rotating, each run writing the records and summary `python -m specbench` would."""
    runners = [method_runner(method, dataset, args) for method in methods]
    summaries = [None] * len(runners)
    for indexes in groups([r.cfg for r in runners]):
        members = [runners[i] for i in indexes]
        for i, summary in zip(indexes, run_group(members) if len(members) > 1 else [members[0].run()]):
            summaries[i] = summary
    return summaries


def method_row(method: str, dataset: str, summary: dict) -> dict:
    """A method default's row: its run's speeds, shape, and the dtype it loaded (`dtype`,
    what the AR comparison is keyed by) beside what it computed in (`precision`)."""
    choice, model = summary.get("tree_choice") or {}, summary.get("cost_model") or {}
    return {
        "method": method,
        "dataset": dataset,
        "tau": summary["results"]["tau"],
        "delta": summary["results"]["delta"],
        "tok_s": summary["results"]["tok_per_s"],
        "ar_tok_s": summary["baseline"]["tok_per_s"],
        "speedup": summary.get("speedup"),
        "median": summary.get("speedup_median_per_sample"),
        "ci95": summary.get("speedup_ci95"),
        "predicted": model.get("predicted_speedup"),
        "overhead": model.get("engine_overhead_share"),
        "shape": autotune.describe(choice) if choice else None,
        "drafting_off": bool(choice) and choice["chosen"] == DRAFTING_OFF,
        "identical": summary.get("agreement_with_baseline", {}).get("exact_match_rate"),
        "dtype": summary["environment"]["dtype"],
        "precision": summary["environment"]["precision"],
        "forward": summary["environment"].get("forward"),
    }


def method_line(r: dict, plain: dict, ar_dtype: str) -> str:
    """`r`'s line of the method table; its speedup also scaled to AR in `ar_dtype` by the
    side-by-side AR speeds `plain` (tok/s per dtype), kept in r["vs_fastest_ar"]."""
    r["vs_fastest_ar"] = r["speedup"] * plain[r["dtype"]] / plain[ar_dtype] if r["dtype"] in plain else None
    vs_fastest = f"{r['vs_fastest_ar']:.2f}x" if r["vs_fastest_ar"] else "-"
    return (
        f"| {r['method']} | {r['dataset']} | {r['precision']} ({r['forward'] or '-'}) | {r['shape'] or '-'} | "
        f"{r['tau']:.2f} | {r['delta']:.2f} | "
        f"{r['tok_s']:.1f} | {r['ar_tok_s']:.1f} | {r['speedup']:.2f}x {interval(r['ci95'])}({r['median']:.2f}x) "
        f"| {r['predicted']:.2f}x | "
        f"{vs_fastest} | {100 * (r['overhead'] or 0):.0f}% | {r['identical']:.2f} |"
    )


def null_line(rows: list[dict]) -> str | None:
    """What this protocol reads where there is no speedup: a row that chose drafting off decodes
    exactly as AR does, so its distance from 1.0x is the bias and noise every row carries."""
    off = [r["speedup"] for r in rows if r.get("drafting_off")]
    if not off:
        return None
    return (
        f"{len(off)} rows chose drafting off and decode exactly as AR does: their speedups, "
        f"{min(off):.2f}-{max(off):.2f}x (mean {sum(off) / len(off):.2f}x), are what this protocol reads where "
        "there is no speedup, the bias and noise every row above carries too."
    )


def figure(rows: list[dict], path: Path) -> None:
    labels = [f"{r['method']}\n{r['dataset']}" for r in rows]
    x = range(len(rows))
    fig, ax = plt.subplots(figsize=(max(6, 0.7 * len(rows)), 3.8))
    ax.bar([i - 0.2 for i in x], [r["speedup"] or 0 for r in rows], width=0.4, label="measured")
    ax.bar([i + 0.2 for i in x], [r["predicted"] or 0 for r in rows], width=0.4, label="predicted (cost profile)")
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks(list(x), labels, fontsize=7)
    ax.set_ylabel("speedup over AR")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def interval(ci95) -> str:
    """'[low-high] ' of a summary's speedup_ci95, or nothing when it has none (too few prompts)."""
    return f"[{ci95[0]:.2f}-{ci95[1]:.2f}] " if ci95 and None not in ci95 else ""


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--methods",
        nargs="+",
        default=[
            "pld",
            "lookahead",
            "sps",
            "sps_tree",
            "eagle",
            "eagle2",
            "eagle3",
            "opt_tree",
            "talon",
            "mars",
            "cast",
        ],
    )
    parser.add_argument("--datasets", nargs="+", default=["mt_bench", "humaneval", "gsm8k"])
    parser.add_argument(
        "--hf-prompts",
        type=int,
        default=5,
        help="prompts of the side-by-side comparisons (kept under --runs, so a re-run resumes)",
    )
    add_run_arguments(parser, prompts=10)
    args = parser.parse_args(argv)
    require(
        args.hf_prompts >= 1 and args.prompts >= 1,
        "--hf-prompts/--prompts",
        f"must be at least 1 (got {args.hf_prompts} and {args.prompts})",
    )
    base = config(*args.overrides)
    fingerprint = device_fingerprint(base["hardware"]["device"], base["hardware"]["threads"])
    settings_id = hashlib.sha256(
        json.dumps([args.hf_prompts, args.max_new_tokens, args.overrides]).encode()
    ).hexdigest()[:8]
    side_by_side = Path(args.runs) / f"side-by-side-{fingerprint_id(fingerprint)}-{settings_id}.json"
    if side_by_side.is_file():  # measured by an earlier, interrupted call with these settings
        hf, plain = json.loads(side_by_side.read_text()).values()
    else:
        compare_cfg = config(f"dataset.limit={args.hf_prompts}", "dataset.max_turns=1", *args.overrides)
        hf, plain = compare(compare_cfg, args.max_new_tokens), compare_dtypes(compare_cfg, args.max_new_tokens)
        side_by_side.parent.mkdir(parents=True, exist_ok=True)
        side_by_side.write_text(json.dumps({"transformers": hf, "ar_by_dtype": plain}))
    settings = hf.pop("settings")
    ar_dtype, ar_dtype_choice = dtype_rule.resolve(
        dict(base["hardware"]), base["model"], method_cfg=config("method=ar")["method"]
    )
    # of tree-sized forwards
    tree_dtype, _ = dtype_rule.resolve(dict(base["hardware"]), base["model"], engine=base.get("engine"))
    rows = []
    for dataset in args.datasets:
        summaries = run_dataset(args.methods, dataset, args)
        rows += [method_row(method, dataset, summary) for method, summary in zip(args.methods, summaries)]
    name = fingerprint_id(fingerprint)
    args.out.mkdir(parents=True, exist_ok=True)
    figure(rows, args.out / f"speed-{name}.png")
    # each dtype's: auto may decode in either
    profiles = sorted(cache.root().glob(f"{base['model']['name']}-*-{name}.json"))
    for profile in profiles:  # the measured curves go beside the results
        for path in (profile, profile.with_suffix(".png")):
            if path.is_file():
                shutil.copy(path, args.out / f"profile-{path.name}")
    lines = [
        f"# Speed on {fingerprint.get('gpu') or fingerprint['cpu_model']} ({name})",
        "",
        f"- machine: {json.dumps(fingerprint)}",
        f"- dtype (auto): {tree_dtype}, the methods' rows ran in "
        f"{' / '.join(sorted({r['precision'] for r in rows}))}; {settings['threads']} threads; "
        f"{base['model']['name']} weights {settings['weights_mb']:.0f} MB",
        f"- cost profiles: {', '.join(map(str, profiles))} (copied beside this file as profile-*.json / .png)",
        "",
        f"## Ours vs transformers ({args.hf_prompts} MT-Bench first turns, {args.max_new_tokens} tokens, T=0, "
        "side by side per prompt; "
        f"both in {settings['dtype']} on the model's own weights)",
        "",
        "| | ours tok/s | transformers tok/s | ratio | identical ids |",
        "| --- | --- | --- | --- | --- |",
    ]
    for method, r in hf.items():
        lines.append(
            f"| {method} | {r['ours']:.1f} | {r['hf']:.1f} | {r['ratio']:.2f} | {r['identical']}/{r['prompts']} |"
        )
    lines += ["", floor_line(hf["ar"]["ours"], settings) + "."]
    lines += [
        "",
        f"## Our AR in bf16 and fp32 ({plain['prompts']} MT-Bench first turns, {args.max_new_tokens} tokens, "
        "T=0, side by side per prompt)",
        "",
        f"bf16 {plain['bfloat16']:.1f} tok/s, fp32 {plain['float32']:.1f} tok/s{forwards(plain)}: bf16/fp32 "
        f"{plain['bfloat16'] / plain['float32']:.2f}x "
        f"(identical ids {plain['identical']}/{plain['prompts']}). hardware.dtype=auto decodes AR in {ar_dtype}"
        + (
            "; a drafting method with an auto tree chooses its dtype with its shape (the precision column), a "
            "fixed tree decodes in "
            f"{tree_dtype} (its tree-sized forwards are cheaper in it). A row's speedup is over AR in the row's "
            "dtype; 'vs AR in "
            f"{ar_dtype}' scales it by the two ARs' measured ratio above (AR in {ar_dtype} runs "
            f"{plain[ar_dtype] / plain[tree_dtype]:.2f}x "
            f"AR in {tree_dtype})"
            if ar_dtype != tree_dtype
            else ""
        )
        + ".",
    ]
    lines += [
        "",
        f"## Method defaults vs AR ({args.prompts} seeded prompts per dataset, first turn, {args.max_new_tokens} "
        "tokens, T=0)",
        "",
        "Each row is the summary `python -m specbench method=M dataset=D` writes; a dataset's runs are decoded "
        "as one group (specbench.run.group): per prompt, AR once and every method back to back, the order "
        "rotating from prompt to prompt.",
        "",
        "| method | dataset | precision (forward) | shape (auto) | tau | delta | tok/s | AR tok/s | speedup "
        f"[95% CI] (median) | predicted | vs AR in {ar_dtype} | engine overhead | identical ids |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    lines += [method_line(r, plain, ar_dtype) for r in rows]
    if null := null_line(rows):
        lines += ["", null]
    if any(r["identical"] < 1 and r["dtype"] == "bfloat16" for r in rows):
        lines += [
            "",
            "identical ids below 1.00 in a bf16 row is rounding, not a lossy method: one-token and n-token bf16 "
            "forwards round differently, so greedy paths can part. Losslessness is checked in fp32 (and on fp16 "
            "weights), "
            "where every method reproduces AR's ids (tests/invariants/test_1_lossless_greedy.py, "
            "tests/engine/test_lean.py).",
        ]
    (args.out / f"speed-{name}.md").write_text("\n".join(lines) + "\n")
    (args.out / f"speed-{name}.json").write_text(
        json.dumps(
            {
                "fingerprint": fingerprint,
                "transformers": hf,
                "settings": settings,
                "ar_by_dtype": plain,
                "ar_dtype": ar_dtype,
                "methods": rows,
            },
            indent=1,
        )
    )
    print("\n".join(lines))


if __name__ == "__main__":
    run_command(main, sys.argv[1:])
