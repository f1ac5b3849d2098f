"""TALON (budget-driven adaptive draft trees): the sweeps behind Tables 1 and 3 and
Figures 3, 6, 12 and 13, at paper scale (the paper's five targets and EAGLE-3 heads;
TALON N=60, mu=0.03, top-10 first layer; EAGLE-3 K=10, D=8, N=60; 1024 new tokens) or
cpu scale (the embedded SmolLM2-135M with our EAGLE-3 head on a seeded prompt subset).

    python runners/talon.py                      # cpu scale: run, then tables/figures/report
    python runners/talon.py --scale paper        # print the paper-scale multiruns (no GPU here)

Figure 3's static tree is EAGLE-3's K=10, D=8 expansion kept whole (811 nodes, no
reranking); its heat map shows acceptances by depth and by rank within the depth (by
cumulative draft probability), where the paper lays the K x K nodes out by position.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from specbench.replicate import Paper, main, results
from specbench.replicate.lookup import base_filters, not_run, one, one_or_none, per_prompt, prompt_values, shared_prompts, sweep_runs
from specbench.replicate.report import Claim, delta_vs_tau_figure, save
from specbench.replicate.scales import by_source, sweep_size
from specbench.replicate.verdicts import all_hold, every_higher, mostly_higher, picked_mean, positive, slope

NAME = "talon"
TITLE = "TALON: budget-driven adaptive draft trees"
CPU_PROMPTS = 20  # the headline sweeps'; the others are reduced (replicate.scales.sweep_size)
CPU_MAX_NEW_TOKENS = 128
HEADLINE = {"table1", "table1-eagle3"}  # Table 1 at T=0: TALON and EAGLE-3 on six datasets
SETUP = {
    "cpu": "cpu scale: SmolLM2-135M-Instruct (hardware.dtype auto: fp32 on CPUs without native bf16 matmul; 2 threads) with specbench's EAGLE-3 head (shared by TALON and EAGLE-3, as in the paper) in place of the paper's targets; seeded prompt subsets, first turn only.",
    "paper": "paper scale: the paper's targets and published EAGLE-3 heads on one GPU each.",
}
MODELS = ["llama3.1-8b", "vicuna-13b", "qwen3-8b", "qwen3-32b", "dsl-8b"]
DATASETS = ["mt_bench", "humaneval", "gsm8k", "alpaca", "cnn_dm", "nq"]
IMPLEMENTED = {"talon", "eagle3", "sps", "opt_tree"}
EAGLE_DEPTH = 8  # K=10, D=8, N=60 (TALON E.1: "official settings in EAGLE"), D as EAGLE's depth
EAGLE = ["method=eagle3", f"method.tree.depth={EAGLE_DEPTH}"]
SPEEDUP = "speedup"  # the paper does not say how it aggregates per-prompt speeds: ours, the aggregate tok/s ratio
DEFAULTS = {
    "talon": {"config.method.tree.budget": 60, "config.method.tree.mu": 0.03, "config.method.tree.top_k": 10},
    "eagle3": {"config.method.tree.depth": EAGLE_DEPTH, "config.method.tree.total_tokens": 60, "config.method.tree.top_k": 10},
    "sps": {"config.method.tree.gamma": 5},
    # OPT-Tree's release defaults (its README: 60 nodes, threshold 0.5, max depth 10), EAGLE-3's head as the drafter
    "opt_tree": {"config.method.tree.nodes": 60, "config.method.tree.threshold": 0.5, "config.method.tree.max_depth": 10},
}
BUDGETS = [32, 48, 60, 72, 96]
MUS = [0.01, 0.02, 0.03, 0.04, 0.05]
LEVELS = EAGLE_DEPTH + 1  # EAGLE's first forward, then D more
STATIC_TREE = 1 + 10 + EAGLE_DEPTH * 100  # EAGLE-3 K=10, D=8 with nothing pruned


def sweeps(scale: str, prompts: int, max_new_tokens: int, results_dir: Path):
    def at(name, datasets, overrides, models=tuple(MODELS)):
        return by_source(name, datasets, overrides, scale, list(models), *sweep_size(scale, name, HEADLINE, prompts, max_new_tokens))

    sweeps = []
    for table, temperature in (("table1", 0), ("table3", 1)):
        sweeps += at(table, DATASETS, ["method=talon", f"gen.temperature={temperature}"])
        sweeps += at(f"{table}-eagle3", DATASETS, [*EAGLE, f"gen.temperature={temperature}"])
        if scale == "paper":  # the paper's SpS rows are Vicuna-13B's baseline; cpu scale skips them for time
            sweeps += at(f"{table}-sps", DATASETS, ["method=sps", f"gen.temperature={temperature}"], ["vicuna-13b"])
        sweeps += at(f"{table}-opt-tree", DATASETS, ["method=opt_tree", f"gen.temperature={temperature}"], ["vicuna-13b"])
    budgets = ",".join(map(str, BUDGETS))
    sweeps += at("figure12", ["mt_bench"], ["method=talon", f"method.tree.budget={budgets}", "gen.temperature=0"])
    sweeps += at("figure12-eagle3", ["mt_bench"], [*EAGLE, f"method.tree.total_tokens={budgets}", "gen.temperature=0"])
    sweeps += at("figure13", ["mt_bench"], ["method=talon", f"method.tree.mu={','.join(map(str, MUS))}", "gen.temperature=0"], ["qwen3-8b", "llama3.1-8b", "dsl-8b"])
    sweeps += at("figure3", ["mt_bench"], [*EAGLE, f"method.tree.total_tokens={STATIC_TREE}", "gen.temperature=0"], ["qwen3-8b"])
    return sweeps


def locate(scale: str):
    def find(row: pd.Series):
        if row["method"] not in IMPLEMENTED:
            return not_run(row["method"])
        return {**base_filters(row), "config.method.name": row["method"], **DEFAULTS[row["method"]]}, False

    return find


# ---- figures ------------------------------------------------------------------------

def figures(runs: pd.DataFrame, out_dir: Path) -> list[Path]:
    paths = []
    points = delta_vs_tau(runs)
    if not points.empty:
        paths += delta_vs_tau_figure(points, out_dir, "figure6", "TALON Figure 6 (ours): draft cost vs accepted tokens")
    for name, method_key, label in (("figure12", "budget", "node budget N"), ("figure13", "mu", "mu")):
        sweep = ablation(runs, method_key)
        if sweep.empty:
            continue
        fig, ax = plt.subplots(figsize=(5.5, 3.8))
        for method, group in sweep.groupby("method"):
            ax.plot(group["x"], group["tok_per_s"], "o-", label=method)
        ax.set(xlabel=label, ylabel="tok/s (MT-Bench, T=0)", title=f"TALON {name.title()} (ours)")
        ax.legend()
        paths += save(fig, out_dir, name)
    found = acceptance_counts(runs)
    if found is not None:
        counts, steps = found
        fig, ax = plt.subplots(figsize=(10, 3.5))
        image = ax.imshow(counts / steps, aspect="auto", cmap="viridis")
        ax.set(xlabel="rank within the depth (by cumulative draft probability)", ylabel="depth", title="TALON Figure 3 (ours): acceptances in EAGLE-3's static K=10, D=8 tree")
        ax.set_yticks(range(counts.shape[0]), [str(d + 1) for d in range(counts.shape[0])])
        fig.colorbar(image, ax=ax, label="share of steps")
        paths += save(fig, out_dir, "figure3")
    return paths


def delta_vs_tau(runs: pd.DataFrame) -> pd.DataFrame:
    """Per-prompt tau and delta of TALON and EAGLE-3 at their defaults, one run per model,
    dataset and temperature: the one with the most prompts (Figure 12's N=60 run repeats Table 1's
    MT-Bench cell on fewer, shorter answers)."""
    frames = []
    for method in ("talon", "eagle3"):
        chosen = results.select(runs, {"config.method.name": method, **DEFAULTS[method]})
        chosen = chosen.sort_values("results.samples", ascending=False, kind="stable").drop_duplicates(["config.model.name", "config.dataset.name", "temperature"])
        for _, run in chosen.iterrows():
            frame = per_prompt(run)
            frames.append(frame.assign(method=method, temperature=run["temperature"], dataset=run["config.dataset.name"], model=run["config.model.name"]))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def ablation_runs(runs: pd.DataFrame, key: str) -> dict[str, dict]:
    """Figure 12's runs (key "budget": TALON, and EAGLE-3 pruned to the same N) or Figure
    13's ("mu": TALON) on MT-Bench at T=0, by method and value, one run per point of the
    sweep's own size (replicate.lookup.sweep_runs)."""
    values = BUDGETS if key == "budget" else MUS
    found = {}
    for method, column in (("talon", f"config.method.tree.{key}"), ("eagle3", "config.method.tree.total_tokens" if key == "budget" else None)):
        if column is None:
            continue
        fixed = {k: v for k, v in DEFAULTS[method].items() if k != column}
        found[method] = sweep_runs(runs, column, values, method=method, dataset="mt_bench", temperature=0.0, **fixed)
    return found


def ablation(runs: pd.DataFrame, key: str) -> pd.DataFrame:
    """tok/s, speedup and tau at each point of Figure 12's or 13's sweep (ablation_runs)."""
    return pd.DataFrame([
        {"method": method, "x": value, "tok_per_s": run["results.tok_per_s"], "speedup": run.get("speedup"), "tau": run["results.tau"]}
        for method, points in ablation_runs(runs, key).items() for value, run in points.items()
    ])


def prompt_acceptances(runs: pd.DataFrame) -> list[tuple[np.ndarray, int]]:
    """Per prompt of the static-tree run: acceptances by depth (rows 1-9) and rank within the
    depth (ranks past 99 pooled), and its number of verification steps."""
    chosen = results.select(runs, {"config.method.name": "eagle3", "config.method.tree.total_tokens": STATIC_TREE})
    found = []
    for _, run in chosen.iterrows():
        for record in results.samples(run):
            counts = np.zeros((LEVELS, 100))
            for ranks in record["method"]["accepted_ranks"]:
                for depth, rank in enumerate(ranks[:LEVELS]):
                    counts[depth, min(rank, 99)] += 1
            found.append((counts, len(record["method"]["accepted_ranks"])))
    return found


def acceptance_counts(runs: pd.DataFrame) -> tuple[np.ndarray, int] | None:
    """prompt_acceptances summed over the prompts (None without the static-tree run)."""
    found = prompt_acceptances(runs)
    if not found:
        return None
    return sum(c for c, _ in found), sum(n for _, n in found)


# ---- claims -------------------------------------------------------------------------

def _faster(temperature, other="eagle3", rule=every_higher):
    """TALON against `other` per dataset, by `rule` (every_higher, or mostly_higher)."""
    def check(runs):
        pairs = [(dataset, one_or_none(runs, method="talon", dataset=dataset, temperature=temperature, **DEFAULTS["talon"]),
                  one_or_none(runs, method=other, dataset=dataset, temperature=temperature, **DEFAULTS[other])) for dataset in DATASETS]
        return rule(pairs, "speedup", ("talon", other))
    return check


def paired_points(runs) -> pd.DataFrame:
    """Per-prompt tau and delta of TALON and of EAGLE-3 (columns (metric, method)), one row
    per (model, dataset, temperature, prompt) both decoded: what the Figure 6 claims resample."""
    points = delta_vs_tau(runs)
    if points.empty or set(points["method"]) != {"talon", "eagle3"}:
        raise KeyError("talon and eagle3 runs")
    paired = points.pivot(index=["model", "dataset", "temperature", "id"], columns="method", values=["tau", "delta"]).dropna()
    if paired.empty:
        raise KeyError("prompts decoded by both talon and eagle3")
    return paired


def _oracle(runs):
    paired = paired_points(runs)
    gap = (paired["delta"] - paired["tau"]).abs()
    closer = gap["eagle3"] - gap["talon"]  # per prompt: EAGLE-3's |delta - tau| minus TALON's
    verdict, text = positive(list(closer), lambda picked: sum(picked) / len(picked))
    return verdict, f"EAGLE-3's mean |delta - tau| per prompt minus TALON's: {text}"


def _adaptive_cost(runs):
    paired = paired_points(runs)

    def fitted(rows: pd.DataFrame, method: str) -> float:
        return slope(list(rows[("tau", method)]), list(rows[("delta", method)]))

    def steeper(picked):  # slope of delta on tau, TALON's minus EAGLE-3's
        rows = paired.iloc[picked]
        return fitted(rows, "talon") - fitted(rows, "eagle3")

    verdict, text = positive(list(range(len(paired))), steeper)
    return verdict, f"slope of delta on tau: TALON {fitted(paired, 'talon'):+.2f}, EAGLE-3 {fitted(paired, 'eagle3'):+.2f} (static: 0); TALON's minus EAGLE-3's {text}"


def budget_pairs(runs) -> list[tuple[int, pd.Series, pd.Series]]:
    """(N, TALON's run, EAGLE-3's run pruned to N) at each budget of Figure 12's sweep."""
    found = ablation_runs(runs, "budget")
    return [(n, found["talon"][n], found["eagle3"][n]) for n in BUDGETS if n in found["talon"] and n in found["eagle3"]]


def _budget(runs):
    """Speedups (each over its own AR, prompt by prompt), not tok/s across runs, which drift."""
    found = ablation_runs(runs, "budget")
    return every_higher([(f"N={n}", found["talon"].get(n), found["eagle3"].get(n)) for n in BUDGETS], "speedup", ("talon", "eagle3"))


def _budget_gap(runs):
    """TALON's advantage (per-prompt speedup minus EAGLE-3's at the same N) at the smallest
    budget against each larger one, on the prompts every run of the sweep decoded."""
    values = {n: (prompt_values(talon, "speedup"), prompt_values(eagle, "speedup")) for n, talon, eagle in budget_pairs(runs)}
    if len(values) < 2:
        raise KeyError("budget sweep")
    prompts = shared_prompts([v for pair in values.values() for v in pair], "every budget's runs decoded")
    smallest = min(values)

    def advantage(n, picked):
        talon, eagle = values[n]
        return sum(talon[p] - eagle[p] for p in picked) / len(picked)

    verdicts, parts = [], []
    for n in sorted(values)[1:]:
        verdict, text = positive(prompts, lambda picked, n=n: advantage(smallest, picked) - advantage(n, picked))
        verdicts.append(verdict)
        parts.append(f"N={smallest} minus N={n} {text}")
    advantages = ", ".join(f"{advantage(n, prompts):+.2f} at N={n}" for n in sorted(values))
    return all_hold(verdicts), f"TALON - EAGLE-3 speedup per prompt: {advantages}; " + "; ".join(parts)


def _mu(runs):
    """The fastest mu <= 0.02 against the fastest above it, by per-prompt speedups (each over
    its own AR), with the interval over the prompts every mu run decoded."""
    speedups = {mu: prompt_values(run, "speedup") for mu, run in ablation_runs(runs, "mu")["talon"].items()}
    low, high = [m for m in speedups if m <= 0.02], [m for m in speedups if m > 0.02]
    if not low or not high:
        raise KeyError("mu sweep on both sides of 0.02")
    prompts = shared_prompts(list(speedups.values()), "every mu run decoded")

    verdict, text = positive(prompts, lambda picked: max(picked_mean(speedups[m], picked) for m in low) - max(picked_mean(speedups[m], picked) for m in high))
    tau = one(runs, method="talon", dataset="mt_bench", temperature=0.0, **DEFAULTS["talon"])["results.tau"]
    points = ", ".join(f"{m:g}: {picked_mean(speedups[m], prompts):.2f}x" for m in sorted(speedups))
    return verdict, f"best speedup at mu <= 0.02 minus best above, per-prompt means: {text} (tau at mu 0.03: {tau:.2f}, low alignment); {points}"


def _funnel(runs):
    """The share of acceptances at ranks 0-1, mean over the depths past the first minus at
    the first, resampled over prompts (depths with an acceptance in the whole run)."""
    found = prompt_acceptances(runs)
    if not found:
        raise KeyError("static-tree run")
    counts = sum(c for c, _ in found)
    depths = [d for d in range(counts.shape[0]) if counts[d].sum() > 0]
    evidence = "share of acceptances at ranks 0-1 by depth: " + ", ".join(f"{d + 1}: {counts[d, :2].sum() / counts[d].sum():.2f} of {counts[d].sum():.0f}" for d in depths)
    if len(depths) < 2:
        return None, evidence

    def concentration(picked):
        total = sum(found[i][0] for i in picked)
        shares = [total[d, :2].sum() / total[d].sum() for d in depths if total[d].sum() > 0]
        return float(np.mean(shares[1:])) - shares[0] if len(shares) > 1 and total[depths[0]].sum() > 0 else None

    verdict, text = positive(list(range(len(found))), concentration)
    return verdict, f"{evidence}; deeper minus first: {text}"


CLAIMS = [
    Claim("Table 1", "At T=0 TALON is faster than EAGLE-3 (same N=60) on every dataset", _faster(0.0)),
    Claim("Table 1", "At T=0 TALON is faster than OPT-Tree on every dataset", _faster(0.0, "opt_tree")),
    Claim("Table 3", "At T=1 TALON is faster than EAGLE-3 on most datasets (Table 3 ties on Vicuna-13B CNN/DM)", _faster(1.0, rule=mostly_higher)),
    Claim("Figure 6", "TALON's draft cost tracks the oracle delta = tau more closely than EAGLE-3's", _oracle),
    Claim("Figure 6", "TALON's draft cost grows with tau; EAGLE-3's is fixed", _adaptive_cost),
    Claim("Figure 12", "TALON is faster than EAGLE-3 at every node budget N (32-96)", _budget),
    Claim("Figure 12", "TALON's advantage is largest at the smallest budget", _budget_gap),
    Claim("Figure 13", "With a weakly aligned drafter (low MAT) a low mu (<= 0.02) is best", _mu),
    Claim("Figure 3", "Beyond the first layer acceptances concentrate on the top-ranked nodes (the funnel)", _funnel),
]

PAPER = Paper(
    name=NAME, title=TITLE, description=__doc__, cpu_prompts=CPU_PROMPTS, cpu_max_new_tokens=CPU_MAX_NEW_TOKENS, setup=SETUP,
    sweeps=sweeps, defaults=DEFAULTS, locate=locate, speedup=SPEEDUP, figures=figures, claims=CLAIMS,
)

if __name__ == "__main__":
    main(PAPER)
