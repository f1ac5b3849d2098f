"""CAST (inference-cost-aware dynamic draft trees): the sweeps behind Tables 1-5 and
Figures 3-5, at paper scale (the paper's targets and EAGLE-3 heads on GPUs; CAST top_k 12,
total 72, depth 13 and threshold 4 / 3 at batch size 1, depth 9 and threshold 2.5 at batch
size 8; EAGLE-3 top_k 10, depth 7 and its total_tokens per model; 1024 new tokens) or cpu
scale (the embedded SmolLM2-135M with our EAGLE-3 head on a seeded prompt subset).

    python runners/cast.py                      # cpu scale: run, then tables/figures/report
    python runners/cast.py --scale paper        # print the paper-scale multiruns (no GPU here)

The one "threshold" of Appendix E is used as C1 = C2 = C3 (see specbench/trees/cast.py), and
every run is looked up at its model's threshold, so runs at another threshold never fill a
cell. Table 3's rows are EAGLE-3's dynamic tree (its shape) with the named CAST components
added ("EAGLE3+DR", "EAGLE3+DR+DP", "EAGLE3+DR+BP") and the full CAST in its own shape; the
paper names no model for it, so it runs where Figure 5 does (HumanEval, T=0, Vicuna-13B at
paper scale). Speedup at batch size B is against AR at the same B on the same prompts.
Tables 4 and 5 (H20, 2x RTX 4090) run at paper scale with `hardware.name=h20` / `2x4090` on
those GPUs; at cpu scale their rows point to Table 1, which is the same run on this CPU.
Figure 3 plots the draft tokens accepted per verification against the verified tree's summed
confidence, from Table 1's batch-size-1 runs at T=0. Depths are written as the paper states
them: EAGLE's convention (layers drafted after the first), which `method.tree.depth`
follows. Figure "costs" is the paper's cost model S_T(B) drawn from the cost profiles the runs were
priced with (their decisions.json): target forward time over n new tokens relative to one
token, per batch size.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
from scipy import stats

from specbench import ROOT
from specbench.costs.fingerprint import fingerprint_id
from specbench.costs.profile import CostProfile
from specbench.replicate import OUR_MODEL, Paper, main, results, tables
from specbench.replicate.lookup import base_filters, not_run, one_or_none, parse_setting, prompt_values, shared_prompts
from specbench.replicate.report import Claim, Headline, save
from specbench.replicate.scales import LOOKAHEAD, by_source, model_params, sweep_size
from specbench.replicate.verdicts import (
    NOT_TESTABLE,
    OUT_OF_REGIME,
    all_hold,
    every_higher,
    every_slope,
    faster_than_ar,
    mostly_higher,
    picked_mean,
    positive,
    regime_reason,
    speed_sides,
    unpaired_difference,
)

NAME = "cast"
TITLE = "CAST: inference-cost-aware dynamic draft trees"
# cpu scale: Table 1 at T=0 (the headline: CAST against EAGLE-3 on six datasets) decodes --prompts
# prompts per dataset; every other point at batch size 1 decodes POINT_PROMPTS, and a point at
# B > 1 that a claim reads decodes CLAIM_BATCHES batches: each interval is drawn from at least
# 10 groups (prompts at B = 1, batches at B > 1). Points no claim reads (Lookahead and EAGLE-1/2
# at B = 1, EAGLE-1/2 at B = 8) decode TABLE_PROMPTS prompts or TABLE_BATCHES batches. Table 1 at
# T=1 and Figure 4 compare runs of their own sweep only, so they answer SHORT_TOKENS; the
# SpS/PLD rows (paired with the headline's prompts) and Table 3 (whose batch size 1 is the
# headline's runs) answer the headline's length. The sizes aim `make replicate-cast` at 90 minutes on 2 cores.
CPU_PROMPTS = 20
POINT_PROMPTS = 10
CLAIM_BATCHES = 10
TABLE_PROMPTS = 5
TABLE_BATCHES = 5
CPU_MAX_NEW_TOKENS = 64
SHORT_TOKENS = 40
SETUP = {
    "cpu": "cpu scale: SmolLM2-135M-Instruct (hardware.dtype auto: fp32 on CPUs without native bf16 matmul; 2 threads) "
    "with specbench's EAGLE-3 head (shared by CAST and EAGLE-3, as in the paper) and SpS draft in place of the "
    "paper's targets; CAST priced with this machine's cost profile; seeded prompt subsets, first turn only; "
    f"Table 1 at T=0 on {CPU_PROMPTS} prompts per dataset, every other batch-size-1 point on {POINT_PROMPTS} "
    f"(Lookahead and EAGLE-1/2, which no claim reads, on {TABLE_PROMPTS}); at batch size B > 1 a point a claim reads "
    f"decodes {CLAIM_BATCHES} batches ({CLAIM_BATCHES}·B prompts), EAGLE-1/2 at B=8 {TABLE_BATCHES}; Table 1 at T=1 "
    f"and Figure 4 answer {SHORT_TOKENS} new tokens, every other point {CPU_MAX_NEW_TOKENS}; T=1, the "
    "SpS/PLD/Lookahead/EAGLE-1/2 baselines on MT-bench, HumanEval and GSM8K, batch size 8 on HumanEval alone, "
    "and each claim is checked on the datasets this scale runs for it (named in its row).",
    "paper": "paper scale: the paper's targets and published EAGLE-3 heads on GPUs (A800 for Tables 1-3; "
    "Tables 4-5 on an H20 and on 2x RTX 4090).",
}
DATASETS = ["mt_bench", "humaneval", "gsm8k", "alpaca", "cnn_dm", "nq"]
PACKAGED = ["mt_bench", "humaneval", "gsm8k"]  # what cpu scale runs where time is short
IMPLEMENTED = {"cast", "eagle", "eagle2", "eagle3", "sps", "pld", "lookahead"}
THRESHOLD_4 = ["llama3.3-70b", "vicuna-13b"]  # Appendix E, batch size 1; the 8B models use 3
BATCH1_MODELS = ["vicuna-13b", "llama3.3-70b", "llama3.1-8b", "dsl-8b"]
BATCH8_MODELS = ["vicuna-13b", "vicuna-33b", "llama3.1-8b", "qwen2-7b"]
TABLE3_MODEL = "vicuna-13b"  # Table 3 names no model: Figure 5's HumanEval B=1 CAST matches Vicuna-13B's Table 1 row
ABLATIONS = {  # Table 3: the CAST components added to EAGLE-3 (dynamic reranking, depth pruning, breadth pruning)
    "DR": (True, False, False),
    "DR+DP": (True, True, False),
    "DR+BP": (True, False, True),
    "DR+DP+BP": (True, True, True),  # the full CAST, in CAST's own shape
}
FULL = "DR+DP+BP"
BATCHES = {"paper": [1, 2, 4, 8, 16], "cpu": [1, 4, 8]}
FIGURE5_BATCHES = [1, 2, 4, 8, 16, 32]
VERIFIED = {"paper": [8, 16, 32, 48, 64, 96], "cpu": [16, 32, 64, 96]}  # Figure 4's axis: EAGLE-3's total_tokens m
GPUS = {"h20": "table4", "2x4090": "table5"}
SPEEDUP = "speedup"  # the paper does not say how it aggregates per-prompt speeds: ours, the aggregate tok/s ratio
# Appendix E: EAGLE-3 "employed its default parameters, namely depth=7 and top_k=10, with total_token
# configured according to the specific model (refer to the appendix of the EAGLE-3 paper)". That
# appendix is not among this project's sources; these are the release's per-target evaluation
# scripts' total_token (gen_ea_answer_vicuna / _llama3chat / _ds: 60), and 60 for our model too
# (results/reference/cast.notes.md).
EAGLE3_SHAPE = {"config.method.tree.depth": 7, "config.method.tree.top_k": 10}
EAGLE3_TOTAL_TOKENS = {"vicuna-13b": 60, "llama3.3-70b": 60, "llama3.1-8b": 60, "dsl-8b": 60, OUR_MODEL: 60}
CAST_SHAPE = {"config.method.tree.top_k": 12, "config.method.tree.total_tokens": 72}  # Appendix E; depth by batch size
DEFAULTS = {
    "cast": CAST_SHAPE,
    "eagle3": EAGLE3_SHAPE,  # total_tokens per model: every EAGLE-3 sweep sets it (eagle3_total)
    # EAGLE-2 as its release runs it (EaModel.from_pretrained); EAGLE-1 with its whole static tree
    # (specbench's; the published mc_sim_7b_63 needs a local clone: method.tree.choices_file)
    "eagle2": {"config.method.tree.depth": 5, "config.method.tree.top_k": 10, "config.method.tree.total_tokens": 59},
    "eagle": {},
    "sps": {"config.method.tree.gamma": 5},
    "pld": {"config.method.tree.gamma": 10},
    "lookahead": LOOKAHEAD,
}
# the datasets each dataset-wide claim covers: every dataset at paper scale; at cpu scale the ones
# its sweeps run there (a case in this list without a run is a missing case, not skipped)
CLAIM_DATASETS = {
    "table1-t0": {"paper": DATASETS, "cpu": DATASETS},
    "table1-t1": {"paper": DATASETS, "cpu": PACKAGED},
    "baselines": {"paper": DATASETS, "cpu": PACKAGED},
    "table2": {"paper": DATASETS, "cpu": ["humaneval"]},
}


def appendix_e_depth(batch: int) -> int:
    """Appendix E: depth 13 at batch size 1, 9 from batch size 8."""
    return 9 if batch >= 8 else 13


def appendix_e_threshold(model: str, batch: int) -> float:
    """Appendix E's one threshold (C1 = C2 = C3): 4 for Llama-3.3-70B and Vicuna-13B, 3 for the
    8B models (and ours) at batch size 1; 2.5 from batch size 8 (sizes between read as 1)."""
    return 2.5 if batch >= 8 else 4.0 if model in THRESHOLD_4 else 3.0


def eagle3_total(model: str) -> int:
    return EAGLE3_TOTAL_TOKENS[model]


def eagle3_filters(model: str) -> dict:
    """EAGLE-3's shape for `model`, as run-config filters."""
    return {**EAGLE3_SHAPE, "config.method.tree.total_tokens": eagle3_total(model)}


def cast_filters(model: str, batch: int, ablation: str = FULL) -> dict:
    """Run-config filters of a CAST run: the components switched on, Appendix E's threshold for
    the model and batch size, and the tree shape: CAST's (Appendix E) for the full system,
    EAGLE-3's for an ablation row, which the paper reads "EAGLE3+DR", "EAGLE3+DR+DP", ...:
    EAGLE-3's dynamic tree with those components added."""
    dr, dp, bp = ABLATIONS[ablation]
    c = appendix_e_threshold(model, batch)
    shape = (
        {**CAST_SHAPE, "config.method.tree.depth": appendix_e_depth(batch)}
        if ablation == FULL
        else eagle3_filters(model)
    )
    return {
        **shape,
        "config.gen.batch_size": batch,
        "config.method.tree.dynamic_rerank": dr,
        "config.method.tree.depth_pruning": dp,
        "config.method.tree.breadth_pruning": bp,
        **{f"config.method.tree.c{i}": c for i in (1, 2, 3)},
    }


def tree_overrides(filters: dict) -> list[str]:
    """The method.tree filters ("config.method.tree.<key>": value) as the overrides that set them."""
    return [
        f"{key.removeprefix('config.')}={value}"
        for key, value in filters.items()
        if key.startswith("config.method.tree.")
    ]


def by_value(models: list[str], scale: str, value) -> dict:
    """value(model) -> the models that share it; at cpu scale every sweep runs our model, so
    its value alone."""
    if scale == "cpu":
        return {value(OUR_MODEL): models}
    grouped: dict = {}
    for model in models:
        grouped.setdefault(value(model), []).append(model)
    return grouped


def sweeps(scale: str, prompts: int, max_new_tokens: int, results_dir: Path):
    paper = scale == "paper"

    def at(
        name,
        datasets,
        overrides,
        models,
        batch=1,
        headline=False,
        batches=CLAIM_BATCHES,
        point_prompts=POINT_PROMPTS,
        short=False,
    ):
        count, tokens = sweep_size(
            scale,
            name,
            {name} if headline else set(),
            prompts,
            max_new_tokens,
            reduced_prompts=point_prompts,
            reduced_tokens=SHORT_TOKENS if short else max_new_tokens,
        )
        if batch > 1:  # a batch's rows share one wall time, so its interval resamples batches
            count = batch * min(prompts, batches)
        return by_source(name, datasets, [*overrides, f"gen.batch_size={batch}"], scale, list(models), count, tokens)

    def cast(name, datasets, overrides, models, batch=1, ablation=FULL, **size):
        """CAST at Appendix E's threshold of each model (or EAGLE-3's shape with `ablation`'s components)."""
        found = []
        for filters, group in by_value(
            models, scale, lambda m: tuple(cast_filters(m, batch, ablation).items())
        ).items():
            found += at(
                name, datasets, ["method=cast", *overrides, *tree_overrides(dict(filters))], group, batch, **size
            )
        return found

    def eagle3(name, datasets, overrides, models, batch=1, **size):
        """EAGLE-3 at its total_tokens for each model."""
        found = []
        for total, group in by_value(models, scale, eagle3_total).items():
            found += at(
                name, datasets, ["method=eagle3", f"method.tree.total_tokens={total}", *overrides], group, batch, **size
            )
        return found

    # cpu scale runs T=1, the baselines and batch size 8 on the datasets a package ships (batch
    # size 8 on HumanEval alone), and fewer points on the batch and m axes
    wide = DATASETS if paper else PACKAGED
    sweeps = []
    for temperature, datasets in ((0, DATASETS), (1, wide)):
        headline = temperature == 0
        sweeps += cast(
            "table1", datasets, [f"gen.temperature={temperature}"], BATCH1_MODELS, headline=headline, short=not headline
        )
        sweeps += eagle3(
            "table1-eagle3",
            datasets,
            [f"gen.temperature={temperature}"],
            BATCH1_MODELS,
            headline=headline,
            short=not headline,
        )
    sweeps += at("table1-baselines", wide, ["method=sps,pld", "gen.temperature=0"], ["vicuna-13b"])
    sweeps += at(
        "table1-baselines",
        wide,
        ["method=lookahead,eagle2", "gen.temperature=0"],
        ["vicuna-13b"],
        point_prompts=TABLE_PROMPTS,
    )
    sweeps += at(
        "table1-baselines",
        wide,
        ["method=eagle", "method.tree.size=null", "gen.temperature=0"],
        ["vicuna-13b"],
        point_prompts=TABLE_PROMPTS,
    )
    if paper:  # the paper leaves out methods that relax acceptance at T=1 (PLD among them)
        sweeps += at("table1-baselines", wide, ["method=sps", "gen.temperature=1"], ["vicuna-13b"])
    temperatures8 = "0,1" if paper else "0"
    batch8 = DATASETS if paper else ["humaneval"]
    sweeps += cast("table2", batch8, [f"gen.temperature={temperatures8}"], BATCH8_MODELS, batch=8)
    sweeps += eagle3(
        "table2-eagle3", batch8, [f"gen.temperature={temperatures8}"], ["vicuna-13b", "llama3.1-8b"], batch=8
    )
    # EAGLE-1 heads are published for the Vicuna targets only (conf/model: `eagle`); no claim reads these
    eagle1_models = ["vicuna-13b", "vicuna-33b"]
    sweeps += at(
        "table2-eagle",
        batch8,
        ["method=eagle2", f"gen.temperature={temperatures8}"],
        eagle1_models,
        batch=8,
        batches=TABLE_BATCHES,
    )
    sweeps += at(
        "table2-eagle",
        batch8,
        ["method=eagle", "method.tree.size=null", f"gen.temperature={temperatures8}"],
        eagle1_models,
        batch=8,
        batches=TABLE_BATCHES,
    )
    # Table 3 and Figure 5 (batch size 32 at paper scale) on HumanEval at T=0: EAGLE-3, EAGLE-3 with
    # the CAST components, and CAST; at batch size 1 EAGLE-3 and CAST are Table 1's runs
    for batch in BATCHES[scale] + ([32] if paper else []):
        name = "table3" if batch in BATCHES[scale] else "figure5"
        shared = batch == 1  # the headline's runs: same size, so the same run directories
        sweeps += eagle3(
            f"{name}-eagle3", ["humaneval"], ["gen.temperature=0"], [TABLE3_MODEL], batch=batch, headline=shared
        )
        for ablation in ABLATIONS if name == "table3" else [FULL]:
            sweeps += cast(
                name,
                ["humaneval"],
                ["gen.temperature=0"],
                [TABLE3_MODEL],
                batch=batch,
                ablation=ablation,
                headline=shared and ablation == FULL,
            )
    if paper:
        for gpu, table in GPUS.items():
            sweeps += cast(table, DATASETS, ["gen.temperature=0,1", f"hardware.name={gpu}"], BATCH1_MODELS)
            sweeps += eagle3(
                f"{table}-eagle3", DATASETS, ["gen.temperature=0,1", f"hardware.name={gpu}"], BATCH1_MODELS
            )
    sweeps += at(
        "figure4",
        ["humaneval"],
        ["method=eagle3", f"method.tree.total_tokens={','.join(map(str, VERIFIED[scale]))}", "gen.temperature=0"],
        ["llama3.1-8b"],
        short=True,
    )
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
            filters.update(
                {
                    "config.model.name": row["model"] or TABLE3_MODEL,
                    "config.dataset.name": "humaneval",
                    "temperature": 0.0,
                }
            )
        else:
            filters.update(base_filters(row))
        model = filters["config.model.name"]
        if scale == "paper":
            filters["config.hardware.name"] = gpu or ("multi-gpu" if model_params(model) > 32 else "gpu")
        if method == "cast":
            filters.update(cast_filters(model, batch, setting.get("ablation", FULL)))
        elif method == "eagle3":
            filters.update(eagle3_filters(model))
        return filters, False

    return find


# ---- figures ------------------------------------------------------------------------

# Table 3's rows
VARIANTS = {"EAGLE-3": None, "EAGLE-3+DR": "DR", "EAGLE-3+DR+DP": "DR+DP", "EAGLE-3+DR+BP": "DR+BP", "CAST": FULL}


def at_cpu_scale(runs: pd.DataFrame) -> bool:
    return "config.model.name" in runs and bool((runs["config.model.name"] == OUR_MODEL).any())


def variant_filters(variant: str, model: str, batch: int) -> dict:
    """Run-config filters of a Table 3 row (VARIANTS) for `model` at a batch size."""
    ablation = VARIANTS[variant]
    if ablation is None:
        return {"config.method.name": "eagle3", "config.gen.batch_size": batch, **eagle3_filters(model)}
    return {"config.method.name": "cast", **cast_filters(model, batch, ablation)}


def batch_sweep(runs: pd.DataFrame) -> pd.DataFrame:
    """Speedup (with its interval) and throughput of each Table 3 row against batch size on
    HumanEval at T=0 (Table 3, Figure 5), for ours at cpu scale and Vicuna-13B at paper scale."""
    model = OUR_MODEL if at_cpu_scale(runs) else TABLE3_MODEL
    base = {"config.model.name": model, "config.dataset.name": "humaneval", "temperature": 0.0}
    here = results.select(runs, base)
    batches = sorted({int(b) for b in here["config.gen.batch_size"]}) if not here.empty else []
    rows = []
    for variant in VARIANTS:
        for batch in batches:
            found = results.select(here, variant_filters(variant, model, batch))
            if found.empty:
                continue
            run = found.sort_values("results.samples").iloc[-1]
            if run.get("speedup") is not None:
                ci = run.get("speedup_ci95")
                rows.append(
                    {
                        "variant": variant,
                        "batch": batch,
                        "speedup": run["speedup"],
                        "ci": ci if isinstance(ci, list) else None,
                        "tok_per_s": run["results.tok_per_s"],
                        "prompts": run["results.samples"],
                        "run": run,
                    }
                )
    return pd.DataFrame(rows, columns=["variant", "batch", "speedup", "ci", "tok_per_s", "prompts", "run"])


def published_batch_sweep() -> pd.DataFrame:
    """Table 3's published speedups per row and batch size (Vicuna-13B, HumanEval, T=0), the curves Figure 5 draws."""
    reference = tables.read_reference(ROOT / "results" / "reference" / f"{NAME}.csv")
    rows = []
    for _, row in reference[(reference["table"] == "table3") & (reference["metric"] == "speedup")].iterrows():
        setting = parse_setting(row["setting"])
        ablation = setting.get("ablation")
        variant = next(
            (v for v, a in VARIANTS.items() if a == ablation and (a is None) == (row["method"] == "eagle3")), None
        )
        if variant is not None:
            rows.append({"variant": variant, "batch": int(setting["batch"]), "speedup": row["published"]})
    return pd.DataFrame(rows, columns=["variant", "batch", "speedup"])


def normalised_panel(ax, sweep: pd.DataFrame, published: pd.DataFrame) -> None:
    """Each Table 3 row's speedup over its own batch-size-1 value, ours solid and the
    paper's dashed in the same colour: the trend with B, which carries across scales where
    the absolute speedups do not."""
    for i, (variant, group) in enumerate(sweep.groupby("variant", sort=False)):
        color = f"C{i}"
        for frame, style, who in ((group, "o-", "ours"), (published[published["variant"] == variant], "s--", "paper")):
            first = frame.loc[frame["batch"] == 1, "speedup"]
            if not first.empty:
                ax.plot(
                    frame["batch"],
                    frame["speedup"] / first.iloc[0],
                    style,
                    color=color,
                    label=f"{variant} ({who})",
                    markersize=4,
                )
    ax.set(
        xlabel="batch size",
        ylabel="speedup / its value at batch size 1",
        title="normalised: ours (solid), paper's Table 3 (dashed)",
    )


def verified_sweep(runs: pd.DataFrame) -> pd.DataFrame:
    """EAGLE-3's tau and speedup against the number of verified tokens m (Figure 4)."""
    filters = {
        "config.method.name": "eagle3",
        "config.dataset.name": "humaneval",
        "temperature": 0.0,
        "config.gen.batch_size": 1,
        "config.method.tree.depth": DEFAULTS["eagle3"]["config.method.tree.depth"],
        "config.method.tree.top_k": DEFAULTS["eagle3"]["config.method.tree.top_k"],
    }
    chosen = results.select(runs, filters)
    if chosen.empty:
        return pd.DataFrame(columns=["m", "tau", "speedup", "run"])
    frame = pd.DataFrame(
        {
            "m": chosen["config.method.tree.total_tokens"].astype(int),
            "tau": chosen["results.tau"],
            "speedup": chosen["speedup"],
            "run": [run for _, run in chosen.iterrows()],
        },
        index=chosen.index,
    )
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
    ax.set(
        xlabel="new tokens n per sequence (tree size)",
        ylabel="forward time / time for n = 1",
        title="CAST's S_T(B), measured here",
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)
    return save(fig, out_dir, "costs")


def confidence_steps(runs: pd.DataFrame, method: str) -> pd.DataFrame:
    """Every verification of `method`'s batch-size-1 Table 1 runs at T=0 (full CAST in its
    Appendix E shape; EAGLE-3 in its own): the verified tree's summed draft confidence
    (sum of v(u)) and the draft tokens it accepted (Figure 3's axes). Runs from before the
    engine recorded tree scores add nothing."""
    model = OUR_MODEL if at_cpu_scale(runs) else TABLE3_MODEL
    filters = cast_filters(model, 1) if method == "cast" else {"config.gen.batch_size": 1, **eagle3_filters(model)}
    found = results.select(
        runs, {"config.method.name": method, "config.model.name": model, "temperature": 0.0, **filters}
    )
    rows = []
    for _, run in found.iterrows():
        for record in results.samples(run):
            scores, lengths = record["method"].get("tree_scores", []), record["method"]["accept_lengths"]
            if len(scores) == len(lengths):
                rows += [
                    {"dataset": run["config.dataset.name"], "score": v, "accepted": n - 1}
                    for v, n in zip(scores, lengths)
                ]
    return pd.DataFrame(rows, columns=["dataset", "score", "accepted"])


def confidence_figure(runs: pd.DataFrame, out_dir: Path) -> list[Path]:
    """Figure 3: draft tokens accepted per verification against the verified tree's summed
    confidence, as the mean (and its 95% interval) per bin of confidence, with the least-squares
    line over every verification; the paper reads a linear trend from it."""
    steps = {"CAST": confidence_steps(runs, "cast"), "EAGLE-3": confidence_steps(runs, "eagle3")}
    steps = {name: found for name, found in steps.items() if len(found) >= 2 and found["score"].nunique() > 1}
    if not steps:
        return []
    fig, ax = plt.subplots(figsize=(6, 4.2))
    for (name, found), color in zip(steps.items(), ("tab:red", "tab:blue")):
        fit = stats.linregress(found["score"], found["accepted"])
        bins = pd.cut(found["score"], bins=min(12, found["score"].nunique()))
        grouped = found.groupby(bins, observed=True)
        means, counts, spread = (
            grouped["accepted"].mean(),
            grouped["accepted"].count(),
            grouped["accepted"].sem().fillna(0),
        )
        centers = grouped["score"].mean()
        ax.errorbar(
            centers,
            means,
            yerr=1.96 * spread,
            fmt="o",
            color=color,
            capsize=3,
            label=f"{name}: {len(found)} verifications, slope {fit.slope:.2f}, r = {fit.rvalue:.2f}",
        )
        line = pd.Series([found["score"].min(), found["score"].max()])
        ax.plot(line, fit.intercept + fit.slope * line, color=color, linewidth=0.8)
        for x, y, n in zip(centers, means, counts):
            ax.annotate(str(n), (x, y), textcoords="offset points", xytext=(4, -10), fontsize=6, color=color)
    ax.set(
        xlabel="tree confidence: sum of v(u) over the verified draft nodes",
        ylabel="draft tokens accepted per verification",
        title="CAST Figure 3 (ours): batch size 1, T=0, every dataset",
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return save(fig, out_dir, "figure3")


def figures(runs: pd.DataFrame, out_dir: Path) -> list[Path]:
    paths = []
    sweep = batch_sweep(runs)
    if not sweep.empty:
        fig, (left, right, trend) = plt.subplots(1, 3, figsize=(16, 4))
        for variant, group in sweep.groupby("variant", sort=False):
            errors = [
                [s - c[0] if c else 0 for s, c in zip(group["speedup"], group["ci"])],
                [c[1] - s if c else 0 for s, c in zip(group["speedup"], group["ci"])],
            ]
            left.errorbar(group["batch"], group["speedup"], yerr=errors, marker="o", capsize=3, label=variant)
            right.plot(group["batch"], group["tok_per_s"], "o-", label=variant)
        left.axhline(1.0, color="gray", linestyle="--", linewidth=0.8)
        left.set(
            xlabel="batch size",
            ylabel="speedup over AR at the same batch size",
            title="CAST Figure 5 / Table 3 (ours), HumanEval T=0",
        )
        right.set(xlabel="batch size", ylabel="tok/s over the batch", title="throughput")
        published = published_batch_sweep()
        normalised_panel(trend, sweep, published)
        batches = sorted(sweep["batch"].unique())
        for ax, shown in ((left, batches), (right, batches), (trend, sorted(set(batches) | set(published["batch"])))):
            ax.set_xscale("log", base=2)
            ax.set_xticks(shown, [str(b) for b in shown])
        left.legend(fontsize=7)
        trend.legend(fontsize=6, ncol=2)
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
    return paths + confidence_figure(runs, out_dir) + cost_figure(runs, out_dir)


# ---- claims -------------------------------------------------------------------------


def claim_datasets(runs: pd.DataFrame, claim: str) -> list[str]:
    return CLAIM_DATASETS[claim]["cpu" if at_cpu_scale(runs) else "paper"]


def claim_models(runs: pd.DataFrame, models: list[str]) -> list[str]:
    """Ours at cpu scale; the paper's models for the table at paper scale."""
    return [OUR_MODEL] if at_cpu_scale(runs) else models


def case(model: str, what: str) -> str:
    return what if model == OUR_MODEL else f"{model} {what}"


def _cast_vs_eagle(temperature: float, batch: int, claim: str, models: list[str], rule=every_higher):
    """CAST against EAGLE-3 per model and dataset in the claim's scope, by `rule`: every_higher,
    or mostly_higher where the paper says "usually" (Table 1 has datasets where EAGLE-3 is
    faster); a case without runs is named, not skipped."""

    def check(runs):
        pairs = []
        for model in claim_models(runs, models):
            for dataset in claim_datasets(runs, claim):
                where = {"config.model.name": model, "dataset": dataset, "temperature": temperature}
                pairs.append(
                    (
                        case(model, dataset),
                        one_or_none(runs, method="cast", **where, **cast_filters(model, batch)),
                        one_or_none(
                            runs, method="eagle3", **where, **{"config.gen.batch_size": batch}, **eagle3_filters(model)
                        ),
                    )
                )
        return rule(pairs, "speedup", ("cast", "eagle3"))

    return check


def _baselines(runs):
    pairs = []
    model = claim_models(runs, ["vicuna-13b"])[0]
    for dataset in claim_datasets(runs, "baselines"):
        where = {"config.model.name": model, "dataset": dataset, "temperature": 0.0}
        cast = one_or_none(runs, method="cast", **where, **cast_filters(model, 1))
        for method in ("sps", "pld"):
            pairs.append(
                (f"{dataset} vs {method}", cast, one_or_none(runs, method=method, **where, **DEFAULTS[method]))
            )
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


def every_batch(runs) -> dict[int, dict[str, pd.Series]]:
    """by_batch with every batch size of Table 3's sweep at the runs' scale (cpu: our model
    only), a batch size without runs empty, so a claim "at every batch size" names it."""
    found = by_batch(runs)
    return {b: found.get(b, {}) for b in sorted(set(BATCHES["cpu" if at_cpu_scale(runs) else "paper"]) | set(found))}


def _never_behind(runs):
    pairs = [(f"B={b}", v.get("CAST"), v.get("EAGLE-3")) for b, v in every_batch(runs).items()]
    return every_higher(pairs, "speedup", ("cast", "eagle3"))


def _ahead_of_ar(runs):
    """Figure 5 plots CAST's speedup over AR at the same batch size above 1 at every size."""
    pairs = [(f"B={b}", v.get("CAST"), None) for b, v in every_batch(runs).items()]
    return faster_than_ar(pairs, "speedup", ("cast", "ar"))


def _advantage_grows(runs):
    """CAST's speedup over EAGLE-3's as the paper measures it (Appendix E: EAGLE-3 "degrades
    significantly as batch size increases" while CAST holds: the ratio of the two), per
    prompt (per batch at B > 1), at the largest batch size against batch size 1: different
    prompts and groups, so resampled apart. Gated like every speed comparison: on a CPU no
    memory-bound to compute-bound transition comes with the batch size."""
    both = {b: v for b, v in by_batch(runs).items() if "CAST" in v and "EAGLE-3" in v}
    if len(both) < 2:
        raise KeyError("two batch sizes")

    def ratios(variants):
        cast, eagle = prompt_values(variants["CAST"], "speedup"), prompt_values(variants["EAGLE-3"], "speedup")
        return [cast[k] / eagle[k] for k in cast if k in eagle]

    per_batch = {b: ratios(v) for b, v in both.items()}
    small, large = min(both), max(both)
    verdict, text = unpaired_difference(per_batch[large], per_batch[small])
    means = ", ".join(f"B={b}: {sum(r) / len(r):.2f}" for b, r in per_batch.items())
    gated = []
    for b in (small, large):
        sides, reason = speed_sides(both[b]["CAST"], both[b]["EAGLE-3"], ("cast", "eagle3"))
        text += f"; B={b}: {sides}"
        if reason:
            gated.append(f"B={b}: {reason}")
    evidence = f"CAST / EAGLE-3 speedup per prompt (per batch at B > 1): {means}; B={large} minus B={small} {text}"
    if gated:
        return OUT_OF_REGIME, f"{NOT_TESTABLE} ({'; '.join(gated)}): measured {evidence}"
    return verdict, evidence


def _components(runs):
    partial = [f"EAGLE-3+{name}" for name in ABLATIONS if name != "DR+DP+BP"]
    pairs = [(f"B={b} vs {name}", v.get("CAST"), v.get(name)) for b, v in every_batch(runs).items() for name in partial]
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

    smallest = min(speedups)
    interior = [m for m in speedups if smallest < m < largest]
    # a peak below the largest m is an interior one: speed that only falls from the smallest m peaks at an end
    peaks, peak_text = positive(
        prompts,
        lambda picked: (
            max(picked_mean(speedups[m], picked) for m in interior)
            - max(picked_mean(speedups[m], picked) for m in (smallest, largest))
        ),
    )
    points = ", ".join(f"{r.m}: {r.tau:.2f} / {r.speedup:.2f}x" for r in sweep.itertuples())
    by_m = dict(zip(sweep["m"], sweep["run"]))
    reason = regime_reason([by_m[smallest], by_m[largest]])
    if reason:
        peaks, peak_text = (
            OUT_OF_REGIME,
            f"{NOT_TESTABLE} (where the speedup peaks is the hardware's: {reason}): measured {peak_text}",
        )
    return (
        all_hold([rises, peaks]),
        f"m: tau / speedup {points}; {rise_text}; best interior m minus the better end (m={smallest} or "
        f"{largest}): {peak_text}",
    )


CLAIMS = [
    Claim(
        "Table 1",
        "At batch size 1 and T=0 CAST is faster than EAGLE-3 on most datasets",
        _cast_vs_eagle(0.0, 1, "table1-t0", BATCH1_MODELS, mostly_higher),
    ),
    Claim(
        "Table 1",
        "At batch size 1 and T=1 CAST is faster than EAGLE-3 on most datasets",
        _cast_vs_eagle(1.0, 1, "table1-t1", BATCH1_MODELS, mostly_higher),
    ),
    Claim(
        "Table 1",
        "At batch size 1 and T=0 CAST is faster than AR on every dataset",
        _cast_vs_eagle(0.0, 1, "table1-t0", BATCH1_MODELS, faster_than_ar),
    ),
    Claim("Table 1", "CAST is faster than SpS and PLD on every dataset (T=0)", _baselines),
    Claim(
        "Table 2",
        "At batch size 8 CAST is faster than EAGLE-3 on every dataset (at cpu scale: "
        f"{', '.join(CLAIM_DATASETS['table2']['cpu'])}, the datasets run)",
        _cast_vs_eagle(0.0, 8, "table2", ["vicuna-13b", "llama3.1-8b"]),
    ),
    Claim("Table 3 / Figure 5", "CAST is faster than EAGLE-3 at every batch size", _never_behind),
    Claim("Table 3 / Figure 5", "CAST is faster than AR at every batch size", _ahead_of_ar),
    Claim(
        "Table 3 / Figure 5",
        "CAST's advantage over EAGLE-3 is larger at the largest batch size than at batch size 1",
        _advantage_grows,
    ),
    Claim("Table 3", "Full CAST (DR+DP+BP) is the fastest of the ablation variants at every batch size", _components),
    Claim(
        "Figure 4", "More verified tokens raise the accept length, but the speedup peaks below the largest m", _verified
    ),
]

# Tables 4-5 repeat Table 1 on other GPUs (an H20, two RTX 4090s): at cpu scale that is Table 1's run on this CPU
PUBLISHED_ONLY = {
    "cpu": {
        "table4": "measured on the paper's H20 GPU; at cpu scale the same cells are Table 1's runs on this CPU",
        "table5": "measured on the paper's two RTX 4090 GPUs; "
        "at cpu scale the same cells are Table 1's runs on this CPU",
    }
}

PAPER = Paper(
    name=NAME,
    title=TITLE,
    description=__doc__,
    cpu_prompts=CPU_PROMPTS,
    cpu_max_new_tokens=CPU_MAX_NEW_TOKENS,
    setup=SETUP,
    sweeps=sweeps,
    defaults=DEFAULTS,
    locate=locate,
    speedup=SPEEDUP,
    figures=figures,
    claims=CLAIMS,
    headlines=[
        Headline(
            "Abstract",
            "CAST is generally 5-20% faster than state-of-the-art methods (EAGLE-3 in its tables)",
            (
                "At batch size 1 and T=0 CAST is faster than EAGLE-3 on most datasets",
                "At batch size 1 and T=1 CAST is faster than EAGLE-3 on most datasets",
                "CAST is faster than EAGLE-3 at every batch size",
            ),
        ),
        Headline(
            "Abstract",
            "up to 5.2x faster than conventional (autoregressive) decoding",
            ("At batch size 1 and T=0 CAST is faster than AR on every dataset",),
        ),
    ],
    published_only=PUBLISHED_ONLY,
)

if __name__ == "__main__":
    main(PAPER)
