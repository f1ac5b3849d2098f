"""Methods against AR on the same prompts, side by side, with the cost model beside.

Per prompt, AR and every method run back to back (the order rotates from prompt to
prompt), so drift on the machine hits all alike. Reported per dataset, temperature and
method: τ, δ, tok/s, speedup over AR (ratio of total tok/s and median of per-prompt
ratios), c = draft forward time / target forward time (both measured in this run,
target forwards = verification forwards), the cost-model prediction R = τ / (1 + c·δ)
(TALON Appendix D), and since verifying a wide tree costs more than one AR step on a
CPU, also v = verification forward time / AR forward time and R_v = τ / (v + c_AR·δ)
with c_AR = draft forward time / AR forward time; then agreement with AR's ids and the
dataset's quality metric for every method and AR.

    python scripts/bench_methods.py --methods sps pld eagle3 --datasets mt_bench humaneval gsm8k \\
        --prompts 20 --max-new-tokens 256 --temperatures 0 1 --out results/bench/issue3.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from statistics import median

import torch
from tqdm import tqdm

from specbench import costs, methods
from specbench.data import questions
from specbench.engine.loop import Limits, generate
from specbench.engine.sampling import Sampling
from specbench.metrics import quality, speed
from specbench.models import registry
from specbench.run import chat_prompt, read_records, stop_token_ids

from bench_vs_transformers import config


class Stopwatch:
    """Wraps a bound method; accumulates its wall time and call count."""

    def __init__(self, owner, name: str):
        self.owner, self.name, self.inner, self.times = owner, name, getattr(owner, name), []
        setattr(owner, name, self)

    def __call__(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return self.inner(*args, **kwargs)
        finally:
            self.times.append(time.perf_counter() - start)

    def remove(self) -> None:
        delattr(self.owner, self.name)


DRAFT_CALLS = ("logits", "commit")  # the calls whose forwards N_q counts
# the fixed shapes this benchmark has always measured (the MARS/TALON setups); the method
# configs' `auto` shapes are chosen per machine by a run (python -m specbench, make bench)
PAPER_SHAPES = {
    "eagle3": ["method.tree.top_k=10", "method.tree.depth=6", "method.tree.total_tokens=60"],
    "mars": ["method.tree.top_k=10", "method.tree.depth=6", "method.tree.total_tokens=60"],
    "talon": ["method.tree.budget=60", "method.tree.top_k=10"],
    "sps": ["method.tree.gamma=5"],
    "pld": ["method.tree.gamma=10"],
    "sps_tree": ["method.tree.top_k=4", "method.tree.depth=4", "method.tree.total_tokens=24"],
}


def run_dataset(name, temperature, args, model, tokenizer, hardware, target, built, eos, out_file, finished) -> dict:
    cfg = config(f"dataset={name}", f"dataset.limit={args.prompts}", f"dataset.seed={args.seed}", "dataset.max_turns=1")
    samples = questions.load(cfg["dataset"])
    sampling = Sampling(temperature)
    limits = Limits(args.max_new_tokens, frozenset(eos))
    names = ["ar", *args.methods]
    records = {n: [] for n in names}
    bar = tqdm(samples, desc=f"{name} T={temperature}", unit="prompt")
    for index, sample in enumerate(bar):
        prompt = chat_prompt(tokenizer, [{"role": "user", "content": sample.turns[0]}])
        order = names[index % len(names):] + names[: index % len(names)]
        for method_name in order:
            done = finished.get((name, temperature, method_name, sample.id))
            if done:
                records[method_name].append(done)
                continue
            method = built[method_name]
            forward = Stopwatch(target, "forward")
            drafter_watches = [Stopwatch(method.drafter, n) for n in DRAFT_CALLS] if method.drafter else []
            generator = torch.Generator(device=target.device).manual_seed(args.seed * 1_000_003 + index)
            out = generate(target, method, prompt, sampling, limits, generator)
            for watch in (forward, *drafter_watches):
                watch.remove()
            record = {
                "dataset": name, "temperature": temperature, "method": method_name, "id": sample.id,
                "tokens": len(out.ids), "seconds": out.seconds, "target_forwards": out.target_forwards,
                "draft_forwards": out.draft_forwards, "nll": out.nll, "ids": out.ids, "text": tokenizer.decode(out.ids, skip_special_tokens=True),
                # per-forward times leave out both prompt passes: the target's prefill (its first
                # forward) and the drafter's (inside its first `logits` call, counted as one forward)
                "verify_seconds": sum(forward.times[1:]),
                "draft_seconds": sum(sum(w.times[1:] if w.name == "logits" else w.times) for w in drafter_watches),
                "draft_forwards_timed": max(out.draft_forwards - 1, 0),
                "verifier_notes": {k: v for k, v in out.verifier_notes.items() if not isinstance(v, list)},
            }
            records[method_name].append(record)
            out_file.write(json.dumps(record) + "\n")
            out_file.flush()
        ar = records["ar"]
        shown = {m: f"{sum(r['tokens'] for r in records[m]) / sum(r['seconds'] for r in records[m]) / (sum(r['tokens'] for r in ar) / sum(r['seconds'] for r in ar)):.2f}x" for m in args.methods}
        bar.set_postfix(shown)
    return summarize(name, temperature, samples, records, cfg["dataset"].get("metrics") or [])


def summarize(name, temperature, samples, records, metric_names) -> dict:
    ar = records["ar"]
    ar_tps = sum(r["tokens"] for r in ar) / sum(r["seconds"] for r in ar)
    ar_forward = sum(r["verify_seconds"] for r in ar) / sum(r["target_forwards"] for r in ar)
    rows = {}
    for method_name, runs in records.items():
        tokens, n_p, n_q = (sum(r[k] for r in runs) for k in ("tokens", "target_forwards", "draft_forwards"))
        tps = tokens / sum(r["seconds"] for r in runs)
        tau, delta = tokens / n_p, n_q / n_p
        timed = sum(r["draft_forwards_timed"] for r in runs)
        draft_forward = sum(r["draft_seconds"] for r in runs) / timed if timed else 0.0
        verify_forward = sum(r["verify_seconds"] for r in runs) / n_p
        c, v = draft_forward / verify_forward, verify_forward / ar_forward
        agreement = speed.agreement([{"turn_ids": [r["ids"]]} for r in runs], [{"turn_ids": [a["ids"]]} for a in ar])
        rows[method_name] = {
            "tok_per_s": tps, "tau": tau, "delta": delta, "c": c, "predicted_R": tau / (1 + c * delta),
            "v": v, "predicted_R_v": tau / (v + draft_forward / ar_forward * delta),
            "draft_forward_ms": 1000 * draft_forward, "verify_forward_ms": 1000 * verify_forward,
            "speedup": tps / ar_tps,
            "speedup_median_per_prompt": median((r["tokens"] / r["seconds"]) / (a["tokens"] / a["seconds"]) for r, a in zip(runs, ar)),
            "identical_to_ar": agreement["exact_match_rate"],
            "common_prefix_with_ar": agreement["mean_common_prefix_fraction"],
            # records made before the NLL was saved have none
            "target_nll_per_token": sum(r["nll"] for r in runs) / tokens if all("nll" in r for r in runs) else None,
            "quality": quality.score(metric_names, samples, [[r["text"]] for r in runs]) if metric_names else {},
            "verifier": {k: sum(r["verifier_notes"].get(k, 0) for r in runs) for k in {k for r in runs for k in r["verifier_notes"]}},
        }
    return {"dataset": name, "temperature": temperature, "prompts": len(samples), "methods": rows}


def load_finished(samples_path: Path, settings_path: Path, settings: dict) -> dict:
    """Records of an interrupted run with the same settings, keyed by (dataset, T, method, id).

    A run made with other settings is refused rather than mixed in: its speeds and ids
    would not be comparable."""
    if not samples_path.exists():
        return {}
    saved = json.loads(settings_path.read_text()) if settings_path.exists() else None
    if saved != settings:
        differing = sorted(k for k in settings.keys() | (saved or {}).keys() if (saved or {}).get(k) != settings.get(k))
        raise SystemExit(f"error: {samples_path} was made with other settings ({', '.join(differing) or 'unknown'}); pass --fresh or another --out")
    return {(r["dataset"], r["temperature"], r["method"], r["id"]): r for r in read_records(samples_path)}


def print_table(results: list[dict], header: str) -> None:
    print(f"\n{header}")
    print("| dataset | T | method | τ | δ | c | R = τ/(1+cδ) | v | R_v | speedup (median) | tok/s | same ids as AR | common prefix | NLL/token | quality |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for result in results:
        for method_name, row in result["methods"].items():
            score = ", ".join(f"{k} {v:.3f}" for k, v in row["quality"].items() if isinstance(v, float))
            nll = "" if row["target_nll_per_token"] is None else f"{row['target_nll_per_token']:.3f}"
            print(
                f"| {result['dataset']} | {result['temperature']:g} | {method_name} | {row['tau']:.2f} | {row['delta']:.2f} | {row['c']:.3f} | "
                f"{row['predicted_R']:.2f} | {row['v']:.2f} | {row['predicted_R_v']:.2f} | {row['speedup']:.2f}x ({row['speedup_median_per_prompt']:.2f}x) | {row['tok_per_s']:.1f} | "
                f"{row['identical_to_ar']:.2f} | {row['common_prefix_with_ar']:.2f} | {nll} | {score} |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", nargs="+", default=["sps", "pld", "eagle3"], help="method names; LABEL=METHOD runs a method under another label")
    parser.add_argument("--datasets", nargs="+", default=["mt_bench", "humaneval", "gsm8k"])
    parser.add_argument("--temperatures", nargs="+", type=float, default=[0.0, 1.0])
    parser.add_argument("--prompts", type=int, default=20)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0, help="seeded prompt subset and sampling")
    parser.add_argument("--out", type=Path, default=Path("results/bench/methods.json"))
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for the model and hardware, e.g. hardware=cpu-fp32")
    parser.add_argument("--set", nargs="*", default=[], metavar="METHOD:KEY=VALUE", help="per-method override, e.g. eagle3:method.tree.top_k=4")
    parser.add_argument("--fresh", action="store_true", help="discard the finished samples of an earlier run with this --out instead of resuming it")
    args = parser.parse_args()
    samples_path, settings_path = args.out.with_suffix(".samples.jsonl"), args.out.with_suffix(".settings.json")
    settings = {k: v for k, v in vars(args).items() if k not in ("out", "fresh")}
    if args.fresh:
        samples_path.unlink(missing_ok=True)
    finished = load_finished(samples_path, settings_path, settings)
    cfg = config(*args.overrides)
    hardware = dict(cfg["hardware"])
    hardware["dtype"], _ = costs.resolve_dtype(hardware, cfg["model"])
    torch.set_num_threads(hardware["threads"])
    model, tokenizer = registry.load(cfg["model"], hardware["dtype"], hardware["device"])
    eos = stop_token_ids(model, tokenizer, cfg["model"])
    target, _ = costs.target_lm(model, cfg, hardware)
    built = {"ar": methods.assemble(cfg["baseline"]["method"], model, hardware)}
    for spec in args.methods:
        label, _, base = spec.partition("=")  # "label=method" runs a method under another name
        overrides = [s.split(":", 1)[1] for s in args.set if s.split(":", 1)[0] == (label or spec)]
        shape = PAPER_SHAPES.get(base or label, [])
        built[label] = methods.assemble(config(f"method={base or label}", *args.overrides, *shape, *overrides)["method"], model, hardware)
    args.methods = [s.partition("=")[0] for s in args.methods]
    warm = chat_prompt(tokenizer, [{"role": "user", "content": "Hello"}])
    for method in built.values():
        generate(target, method, warm, Sampling(), Limits(16, frozenset(eos)))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    settings_path.write_text(json.dumps(settings, indent=2))
    results = []
    with open(samples_path, "a", encoding="utf-8") as out_file:
        for temperature in args.temperatures:
            for name in args.datasets:
                results.append(run_dataset(name, temperature, args, model, tokenizer, hardware, target, built, eos, out_file, finished))
                args.out.write_text(json.dumps({"settings": vars(args) | {"out": str(args.out)}, "results": results}, indent=2, default=str))
    print_table(results, f"{cfg['model']['name']} {hardware['dtype']} threads={torch.get_num_threads()} prompts={args.prompts} max_new_tokens={args.max_new_tokens}")


if __name__ == "__main__":
    main()
