"""CAST (inference-cost-aware dynamic draft trees): the sweeps behind Tables 1-5 and
Figures 4 and 5, at paper scale (the paper's targets and EAGLE-3 heads on GPUs; CAST
top_k 12, total 72, depth 13 and threshold 4 / 3 at batch size 1, depth 9 and threshold
2.5 at batch size 8; EAGLE-3 top_k 10, depth 7, 60 tokens; 1024 new tokens) or cpu
scale (the embedded SmolLM2-135M with our EAGLE-3 head on a seeded prompt subset).

    python runners/cast.py                      # cpu scale: run, then tables/figures/report
    python runners/cast.py --scale paper        # print the paper-scale multiruns (no GPU here)

The one "threshold" of Appendix E is used as C1 = C2 = C3 (see specbench/trees/cast.py).
Speedup at batch size B is against AR at the same B on the same prompts. Tables 4 and 5
(H20, 2x RTX 4090) run at paper scale with `hardware.name=h20` / `2x4090` on those GPUs;
at cpu scale their rows point to Table 1, which is the same run on this CPU. Figure 3
(accept length against the tree's cumulative probability) is not reproduced: the engine
does not record per-step tree scores. Depths are written as the paper states them: EAGLE's
convention (layers drafted after the first), which `method.tree.depth` follows. Figure "costs" is the paper's cost model S_T(B) drawn
from the cost profiles the runs were priced with (their decisions.json): target forward time
over n new tokens relative to one token, per batch size.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from specbench.costs.fingerprint import fingerprint_id
from specbench.costs.profile import CostProfile
from specbench.metrics.speed import MIN_GROUPS
from specbench.replicate import Paper, main, results
from specbench.replicate.lookup import base_filters, not_run, one, parse_setting, prompt_values, shared_prompts
from specbench.replicate.report import Claim, save
from specbench.replicate.scales import LOOKAHEAD, by_source, model_params, sweep_size
from specbench.replicate.verdicts import all_hold, every_higher, every_slope, picked_mean, positive, unpaired_difference

NAME = "cast"
TITLE = "CAST: inference-cost-aware dynamic draft trees"
CPU_PROMPTS = 10  # Table 3's batch sweep at batch size 1; the others are reduced (replicate.scales.sweep_size)
HEADLINE = {"table3", "table3-eagle3"}
CPU_MAX_NEW_TOKENS = 64
SETUP = {
    "cpu": "cpu scale: SmolLM2-135M-Instruct (hardware.dtype auto: fp32 on CPUs without native bf16 matmul; 2 threads) with specbench's EAGLE-3 head (shared by CAST and EAGLE-3, as in the paper) and SpS draft in place of the paper's targets; CAST priced with this machine's cost profile; seeded prompt subsets, first turn only; at batch size B > 1 a run decodes five batches (5·B prompts), the fewest an interval over batches is drawn from.",
    "paper": "paper scale: the paper's targets and published EAGLE-3 heads on GPUs (A800 for Tables 1-3; Tables 4-5 on an H20 and on 2x RTX 4090).",
}
DATASETS = ["mt_bench", "humaneval", "gsm8k", "alpaca", "cnn_dm", "nq"]
PACKAGED = ["mt_bench", "humaneval", "gsm8k"]  # what cpu scale runs where time is short
IMPLEMENTED = {"cast", "eagle", "eagle2", "eagle3", "sps", "pld", "lookahead"}
THRESHOLD_4 = ["llama3.3-70b", "vicuna-13b"]  # Appendix E, batch size 1; the 8B models use 3
BATCH1_MODELS = ["vicuna-13b", "llama3.3-70b", "llama3.1-8b", "dsl-8b"]
BATCH8_MODELS = ["vicuna-13b", "vicuna-33b", "llama3.1-8b", "qwen2-7b"]
ABLATIONS = {  # Table 3: the components switched on
    "DR": (True, False, False),
    "DR+DP": (True, True, False),
    "DR+BP": (True, False, True),
    "DR+DP+BP": (True, True, True),
}
BATCHES = {"paper": [1, 2, 4, 8, 16], "cpu": [1, 4, 8]}
FIGURE5_BATCHES = [1, 2, 4, 8, 16, 32]
VERIFIED = {"paper": [8, 16, 32, 48, 64, 96], "cpu": [16, 32, 64, 96]}  # Figure 4's axis: EAGLE-3's total_tokens m
GPUS = {"h20": "table4", "2x4090": "table5"}
SPEEDUP = "speedup"  # the paper does not say how it aggregates per-prompt speeds: ours, the aggregate tok/s ratio
DEFAULTS = {
    "cast": {"config.method.tree.top_k": 12, "config.method.tree.total_tokens": 72},
    "eagle3": {"config.method.tree.depth": 7, "config.method.tree.top_k": 10, "config.method.tree.total_tokens": 60},
    # EAGLE-2 as its release runs it (EaModel.from_pretrained); EAGLE-1 with its whole static tree
    # (specbench's; the published mc_sim_7b_63 needs a local clone: method.tree.choices_file)
    "eagle2": {"config.method.tree.depth": 5, "config.method.tree.top_k": 10, "config.method.tree.total_tokens": 59},
    "eagle": {},
    "sps": {"config.method.tree.gamma": 5},
    "pld": {"config.method.tree.gamma": 10},
    "lookahead": LOOKAHEAD,
}


def appendix_e_depth(batch: int) -> int:
    """Appendix E: depth 13 at batch size 1, 9 from batch size 8."""
    return 9 if batch >= 8 else 13


def appendix_e_overrides(batch: int, threshold: float) -> list[str]:
    """Appendix E's depth and common threshold at a batch size, as config overrides
    (the threshold given for batch size 1; 2.5 from batch size 8)."""
    c = 2.5 if batch >= 8 else threshold
    return [f"method.tree.depth={appendix_e_depth(batch)}", f"method.tree.c1={c}", f"method.tree.c2={c}", f"method.tree.c3={c}"]


def switch_filters(ablation: str) -> dict:
    """Run-config filters for the components an ablation switches on."""
    dr, dp, bp = ABLATIONS[ablation]
    return {"config.method.tree.dynamic_rerank": dr, "config.method.tree.depth_pruning": dp, "config.method.tree.breadth_pruning": bp}


def ablation_switches(ablation: str) -> list[str]:
    return [f"{key.removeprefix('config.')}={value}" for key, value in switch_filters(ablation).items()]


def sweeps(scale: str, prompts: int, max_new_tokens: int, results_dir: Path):
    paper = scale == "paper"

    def at(name, datasets, overrides, models, batch=1):
        count, tokens = sweep_size(scale, name, HEADLINE, prompts, max_new_tokens)
        if batch > 1:  # a batch's rows share one wall time, so its interval resamples batches
            count = batch * min(count, MIN_GROUPS)
        return by_source(name, datasets, [*overrides, f"gen.batch_size={batch}"], scale, list(models), count, tokens)

    # cpu scale runs T=1, the baselines and batch size 8 on the datasets a package ships, and fewer
    # points on the batch and m axes
    wide = DATASETS if paper else PACKAGED
    thresholds = {4.0: THRESHOLD_4, 3.0: [m for m in BATCH1_MODELS if m not in THRESHOLD_4]} if paper else {3.0: BATCH1_MODELS}
    sweeps = []
    for temperature, datasets in ((0, DATASETS), (1, wide)):
        for threshold, models in thresholds.items():
            sweeps += at("table1", datasets, ["method=cast", f"gen.temperature={temperature}", *appendix_e_overrides(1, threshold)], models)
        sweeps += at("table1-eagle3", datasets, ["method=eagle3", f"gen.temperature={temperature}"], BATCH1_MODELS)
    sweeps += at("table1-baselines", wide, ["method=sps,pld,lookahead,eagle2", "gen.temperature=0"], ["vicuna-13b"])
    sweeps += at("table1-baselines", wide, ["method=eagle", "method.tree.size=null", "gen.temperature=0"], ["vicuna-13b"])
    if paper:  # the paper leaves out methods that relax acceptance at T=1 (PLD among them)
        sweeps += at("table1-baselines", wide, ["method=sps", "gen.temperature=1"], ["vicuna-13b"])
    temperatures8 = "0,1" if paper else "0"
    sweeps += at("table2", wide, ["method=cast", f"gen.temperature={temperatures8}", *appendix_e_overrides(8, 2.5)], BATCH8_MODELS, batch=8)
    # cpu scale: HumanEval only (EAGLE-3's 60-node trees are the slowest runs at batch size 8)
    sweeps += at("table2-eagle3", wide if paper else ["humaneval"], ["method=eagle3", f"gen.temperature={temperatures8}"], ["vicuna-13b", "llama3.1-8b"], batch=8)
    # EAGLE-1 heads are published for the Vicuna targets only (conf/model: `eagle`)
    eagle1_models = ["vicuna-13b", "vicuna-33b"]
    sweeps += at("table2-eagle", wide if paper else ["humaneval"], ["method=eagle2", f"gen.temperature={temperatures8}"], eagle1_models, batch=8)
    sweeps += at("table2-eagle", wide if paper else ["humaneval"], ["method=eagle", "method.tree.size=null", f"gen.temperature={temperatures8}"], eagle1_models, batch=8)
    # Table 3 names no model or dataset; Figure 5 (HumanEval) matches Vicuna-13B's Table 1 row at
    # batch size 1, so both run there, and Figure 5 adds batch size 32 at paper scale
    for batch in BATCHES[scale] + ([32] if paper else []):
        name = "table3" if batch in BATCHES[scale] else "figure5"
        sweeps += at(f"{name}-eagle3", ["humaneval"], ["method=eagle3", "gen.temperature=0"], ["vicuna-13b"], batch=batch)
        for ablation in ABLATIONS if name == "table3" else ["DR+DP+BP"]:
            sweeps += at(name, ["humaneval"], ["method=cast", "gen.temperature=0", *appendix_e_overrides(batch, 3.0), *ablation_switches(ablation)], ["vicuna-13b"], batch=batch)
    if paper:
        for gpu, table in GPUS.items():
            for threshold, models in thresholds.items():
                sweeps += at(table, DATASETS, ["method=cast", "gen.temperature=0,1", *appendix_e_overrides(1, threshold), f"hardware.name={gpu}"], models)
            sweeps += at(f"{table}-eagle3", DATASETS, ["method=eagle3", "gen.temperature=0,1", f"hardware.name={gpu}"], BATCH1_MODELS)
    sweeps += at("figure4", ["humaneval"], ["method=eagle3", f"method.tree.total_tokens={','.join(map(str, VERIFIED[scale]))}", "gen.temperature=0"], ["llama3.1-8b"])
    return sweeps


def locate(scale: str):
    def find(row: pd.Series):
        method, setting = row["method"], parse_setting(row["setting"])
        if method not in IMPLEMENTED:
            return not_run(method)
        gpu = setting.get("gpu")
        if gpu and scale == "cpu":
            return f"the paper's {gpu} GPU: at cpu scale this is Table 1's run on this CPU"
        batch = int(setting.get("batch", 1))
        filters = {"config.method.name": method, "config.gen.batch_size": batch, **DEFAULTS[method]}
        if row["table"] == "table3":  # no model, dataset or temperature printed: ours is HumanEval at T=0
            filters.update({"config.model.name": row["model"] or "vicuna-13b", "config.dataset.name": "humaneval", "temperature": 0.0})
        else:
            filters.update(base_filters(row))
        if scale == "paper":
            filters["config.hardware.name"] = gpu or ("multi-gpu" if model_params(filters["config.model.name"]) > 32 else "gpu")
        if method == "cast":
            filters.update({**switch_filters(setting.get("ablation", "DR+DP+BP")), "config.method.tree.depth": appendix_e_depth(batch)})
        return filters, False

    return find


# ---- figures ------------------------------------------------------------------------

def batch_sweep(runs: pd.DataFrame) -> pd.DataFrame:
    """Speedup (with its interval) and throughput of EAGLE-3 and each CAST variant against
    batch size on HumanEval at T=0 (Table 3, Figure 5)."""
    rows = []
    variants = [("eagle3", None)] + [("cast", name) for name in ABLATIONS]
    for method, ablation in variants:
        filters = {**DEFAULTS[method], "config.method.name": method, "config.dataset.name": "humaneval", "temperature": 0.0}
        if ablation:
            filters.update(switch_filters(ablation))
        for _, run in results.select(runs, filters).iterrows():
            batch = int(run["config.gen.batch_size"])
            depth_ok = method != "cast" or run["config.method.tree.depth"] == appendix_e_depth(batch)
            if depth_ok and run.get("speedup") is not None:
                ci = run.get("speedup_ci95")
                rows.append({"variant": "EAGLE-3" if method == "eagle3" else ("CAST" if ablation == "DR+DP+BP" else f"EAGLE-3+{ablation}"),
                             "batch": batch, "speedup": run["speedup"], "ci": ci if isinstance(ci, list) else None,
                             "tok_per_s": run["results.tok_per_s"], "prompts": run["results.samples"], "run": run})
    frame = pd.DataFrame(rows, columns=["variant", "batch", "speedup", "ci", "tok_per_s", "prompts", "run"])
    return frame.sort_values(["variant", "batch", "prompts"]).drop_duplicates(["variant", "batch"], keep="last")


def verified_sweep(runs: pd.DataFrame) -> pd.DataFrame:
    """EAGLE-3's tau and speedup against the number of verified tokens m (Figure 4)."""
    filters = {"config.method.name": "eagle3", "config.dataset.name": "humaneval", "temperature": 0.0, "config.gen.batch_size": 1,
               "config.method.tree.depth": DEFAULTS["eagle3"]["config.method.tree.depth"], "config.method.tree.top_k": DEFAULTS["eagle3"]["config.method.tree.top_k"]}
    chosen = results.select(runs, filters)
    frame = pd.DataFrame({"m": chosen["config.method.tree.total_tokens"].astype(int), "tau": chosen["results.tau"], "speedup": chosen["speedup"],
                          "run": [run for _, run in chosen.iterrows()]}, index=chosen.index)
    return frame[frame["m"].isin(VERIFIED["paper"])].drop_duplicates("m", keep="last").sort_values("m")


def run_profiles(runs: pd.DataFrame) -> list[CostProfile]:
    """The cost profiles the runs were priced with (each run's decisions.json), one per
    profile key: the one that had measured the most batch sizes."""
    found: dict[str, CostProfile] = {}
    for _, run in runs.iterrows():
        text = (results.decisions(run) or {}).get("profile")
        if not text:
            continue
        try:
            profile = CostProfile.from_json(text)
        except (ValueError, KeyError, TypeError):  # another version's profile: not drawn
            continue
        key = json.dumps(profile.key, sort_keys=True)
        if key not in found or len(profile.target_batches) > len(found[key].target_batches):
            found[key] = profile
    return [found[key] for key in sorted(found)]


def cost_figure(runs: pd.DataFrame, out_dir: Path) -> list[Path]:
    """S_T(B): target forward ms over n new tokens relative to n = 1, at the shortest
    profiled context, one line per (profile the runs used, batch size)."""
    profiles = run_profiles(runs)
    if not profiles:
        return []
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for profile in profiles:
        label = f"{profile.key['model']} {profile.key['dtype']} on {fingerprint_id(profile.key['fingerprint'])}"
        context = profile.target.contexts[0]
        for batch in [1] + sorted(int(b) for b in profile.target_batches):
            ns = list(range(1, profile.target.max_n + 1))
            base = profile.target_ms(batch, context, 1)
            ax.plot(ns, [profile.target_ms(batch, context, n) / base for n in ns], label=f"{label}, B={batch}")
    ax.set(xlabel="new tokens n per sequence (tree size)", ylabel="forward time / time for n = 1", title="CAST's S_T(B), measured here")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)
    return save(fig, out_dir, "costs")


def figures(runs: pd.DataFrame, out_dir: Path) -> list[Path]:
    paths = []
    sweep = batch_sweep(runs)
    if not sweep.empty:
        fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
        for variant, group in sweep.groupby("variant"):
            errors = [[s - c[0] if c else 0 for s, c in zip(group["speedup"], group["ci"])], [c[1] - s if c else 0 for s, c in zip(group["speedup"], group["ci"])]]
            left.errorbar(group["batch"], group["speedup"], yerr=errors, marker="o", capsize=3, label=variant)
            right.plot(group["batch"], group["tok_per_s"], "o-", label=variant)
        left.axhline(1.0, color="gray", linestyle="--", linewidth=0.8)
        left.set(xlabel="batch size", ylabel="speedup over AR at the same batch size", title="CAST Figure 5 / Table 3 (ours), HumanEval T=0")
        right.set(xlabel="batch size", ylabel="tok/s over the batch", title="throughput")
        batches = sorted(sweep["batch"].unique())
        for ax in (left, right):
            ax.set_xscale("log", base=2)
            ax.set_xticks(batches, [str(b) for b in batches])
        left.legend(fontsize=7)
        paths += save(fig, out_dir, "figure5")
    verified = verified_sweep(runs)
    if not verified.empty:
        fig, left = plt.subplots(figsize=(5.5, 3.8))
        left.plot(verified["m"], verified["tau"], "o-", color="tab:blue")
        left.set(xlabel="verified tokens m (EAGLE-3 total_tokens)", ylabel="tau (accept length + 1)")
        right = left.twinx()
        right.plot(verified["m"], verified["speedup"], "s--", color="tab:red")
        right.set_ylabel("speedup", color="tab:red")
        left.set_title("CAST Figure 4 (ours): HumanEval T=0, batch size 1")
        paths += save(fig, out_dir, "figure4")
    return paths + cost_figure(runs, out_dir)


# ---- claims -------------------------------------------------------------------------

def full_cast(batch: int) -> dict:
    """Filters for the full CAST (all three components) at a batch size, in its paper shape."""
    return {"config.gen.batch_size": batch, "config.method.tree.depth": appendix_e_depth(batch), **DEFAULTS["cast"], **switch_filters("DR+DP+BP")}


def _cast_vs_eagle(temperature: float, batch: int):
    def check(runs):
        pairs = []
        for dataset in DATASETS:
            try:
                cast = one(runs, method="cast", dataset=dataset, temperature=temperature, **full_cast(batch))
                eagle = one(runs, method="eagle3", dataset=dataset, temperature=temperature, **{"config.gen.batch_size": batch}, **DEFAULTS["eagle3"])
            except KeyError:
                continue
            pairs.append((dataset, cast, eagle))
        return every_higher(pairs, "speedup", ("cast", "eagle3"))
    return check


def _baselines(runs):
    pairs = []
    for dataset in DATASETS:
        try:
            cast = one(runs, method="cast", dataset=dataset, temperature=0.0, **full_cast(1))
        except KeyError:
            continue
        for method in ("sps", "pld"):
            try:
                pairs.append((f"{dataset} vs {method}", cast, one(runs, method=method, dataset=dataset, temperature=0.0, **DEFAULTS[method])))
            except KeyError:
                continue
    return every_higher(pairs, "speedup", ("cast", "sps or pld"))


def by_batch(runs) -> dict[int, dict[str, pd.Series]]:
    """Table 3's runs: batch size -> variant (EAGLE-3, CAST, EAGLE-3+<parts>) -> run."""
    sweep = batch_sweep(runs)
    if sweep.empty:
        raise KeyError("batch sweep (table3)")
    found: dict[int, dict[str, pd.Series]] = {}
    for row in sweep.itertuples():
        found.setdefault(int(row.batch), {})[row.variant] = row.run
    return dict(sorted(found.items()))


def _never_behind(runs):
    pairs = [(f"B={b}", v["CAST"], v["EAGLE-3"]) for b, v in by_batch(runs).items() if "CAST" in v and "EAGLE-3" in v]
    return every_higher(pairs, "speedup", ("cast", "eagle3"))


def _advantage_grows(runs):
    """CAST's speedup minus EAGLE-3's per prompt (per batch at B > 1), at the largest batch
    size against batch size 1: different prompts and groups, so resampled apart."""
    both = {b: v for b, v in by_batch(runs).items() if "CAST" in v and "EAGLE-3" in v}
    if len(both) < 2:
        raise KeyError("two batch sizes")

    def advantage(variants):
        cast, eagle = prompt_values(variants["CAST"], "speedup"), prompt_values(variants["EAGLE-3"], "speedup")
        return [cast[k] - eagle[k] for k in cast if k in eagle]

    advantages = {b: advantage(v) for b, v in both.items()}
    small, large = min(both), max(both)
    verdict, text = unpaired_difference(advantages[large], advantages[small])
    means = ", ".join(f"B={b}: {sum(a) / len(a):+.2f}" for b, a in advantages.items())
    return verdict, f"CAST - EAGLE-3 speedup per prompt (per batch at B > 1): {means}; B={large} minus B={small} {text}"


def _components(runs):
    pairs = [(f"B={b} vs {name}", v["CAST"], v[name]) for b, v in by_batch(runs).items() if "CAST" in v for name in v if name.startswith("EAGLE-3+")]
    if not pairs:
        raise KeyError("ablation runs")
    return every_higher(pairs, "speedup", ("full cast", "a partial variant"))


def _verified(runs):
    """tau rises along m, and the best speedup at a smaller m beats the largest m's (per prompt)."""
    sweep = verified_sweep(runs)
    if len(sweep) < 3:
        raise KeyError("figure4 sweep")
    rises, rise_text = every_slope([("humaneval", list(zip(sweep["m"], sweep["run"])))], "tau", rising=True, axis="m")
    speedups = {m: prompt_values(run, "speedup") for m, run in zip(sweep["m"], sweep["run"])}
    prompts = shared_prompts(list(speedups.values()), "every m run decoded")
    largest = max(speedups)

    peaks, peak_text = positive(prompts, lambda picked: max(picked_mean(speedups[m], picked) for m in speedups if m < largest) - picked_mean(speedups[largest], picked))
    points = ", ".join(f"{r.m}: {r.tau:.2f} / {r.speedup:.2f}x" for r in sweep.itertuples())
    return all_hold([rises, peaks]), f"m: tau / speedup {points}; {rise_text}; best smaller m minus m={largest}: {peak_text}"


CLAIMS = [
    Claim("Table 1", "At batch size 1 and T=0 CAST is faster than EAGLE-3 on every dataset", _cast_vs_eagle(0.0, 1)),
    Claim("Table 1", "At batch size 1 and T=1 CAST is faster than EAGLE-3 on every dataset", _cast_vs_eagle(1.0, 1)),
    Claim("Table 1", "CAST is faster than SpS and PLD on every dataset (T=0)", _baselines),
    Claim("Table 2", "At batch size 8 CAST is faster than EAGLE-3 on every dataset", _cast_vs_eagle(0.0, 8)),
    Claim("Table 3 / Figure 5", "CAST is faster than EAGLE-3 at every batch size", _never_behind),
    Claim("Table 3 / Figure 5", "CAST's advantage over EAGLE-3 grows with the batch size", _advantage_grows),
    Claim("Table 3", "Each component helps: full CAST (DR+DP+BP) is the fastest variant at every batch size", _components),
    Claim("Figure 4", "More verified tokens raise the accept length, but the speedup peaks below the largest m", _verified),
]

# Tables 4-5 repeat Table 1 on other GPUs (an H20, two RTX 4090s): at cpu scale that is Table 1's run on this CPU
PUBLISHED_ONLY = {"cpu": {"table4": "measured on the paper's H20 GPU; at cpu scale the same cells are Table 1's runs on this CPU",
                          "table5": "measured on the paper's two RTX 4090 GPUs; at cpu scale the same cells are Table 1's runs on this CPU"}}

PAPER = Paper(
    name=NAME, title=TITLE, description=__doc__, cpu_prompts=CPU_PROMPTS, cpu_max_new_tokens=CPU_MAX_NEW_TOKENS, setup=SETUP,
    sweeps=sweeps, defaults=DEFAULTS, locate=locate, speedup=SPEEDUP, figures=figures, claims=CLAIMS, published_only=PUBLISHED_ONLY,
)

if __name__ == "__main__":
    main(PAPER)
