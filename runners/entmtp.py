"""EntMTP (task-aware draft trees for multi-token-prediction heads): the offline search
and the sweeps behind Tables 1-2 and Figures 1-2, at paper scale (Vicuna-7B with
ankner/hydra-vicuna-7b-v1.3 and FasterDecoding/medusa-vicuna-7b-v1.3 on a GPU, 100
prompts per task, 256 new tokens, T=0.7) or cpu scale (the embedded SmolLM2-135M with
specbench's Hydra and Medusa heads on seeded prompt subsets).

    python runners/entmtp.py                      # cpu scale: search, Table 1 runs, tables/figures/report
    python runners/entmtp.py --scale paper        # print the paper-scale commands (no GPU here)

First the offline stage: `python -m specbench.search` builds, per task (HumanEval, GSM8K,
ShareGPT), the acceptance frontier of the Hydra heads (Algorithm 1), re-measures every
frontier tree by self-rollout (Appendix B), measures the default tree the same way and
keeps the throughput-Pareto trees, priced with this machine's cost profile, in the bank
results/entmtp/<scale>/bank-<model>.json. Its prompts are drawn from those the Table 1
runs do not decode. Table 2 (biased vs self-rollout accept length) and Figures 1-2 (the
frontier coloured by depth; the frontier re-ranked by predicted throughput) are drawn
from that bank; Table 1 runs AR (paired), Medusa and Hydra with their default trees,
EntMTP (the task's throughput-optimal tree) and EntMTPτ (the hysteretic switch between
the conservative and aggressive trees, τ_on = τ_off = 0.02; the paper picks τ by a sweep
on its calibration set, which cpu scale does not afford) on the bank.

The switch's path value: the text's best_path_value = max(p0, g_1..g_D) always equals p0
(each g_d is p0 times head probabilities), while the public code drives the switch with the
deepest greedy path's value; Table 1's EntMTPτ uses the code's rule (`greedy_depth`, the
default) and the `path-value` sweep runs the text's beside it (tables/path-value.md).

Conventions: the paper's τ counts accepted draft tokens per step ("accept length");
specbench's τ counts tokens per target forward, one more. Table 1's tau cells are
specbench's τ; Table 2's accept lengths are the paper's. The default trees at cpu scale
are specbench's own small ones (Hydra 8 nodes, Medusa 9: the heads shipped for the
embedded model are 3 and 4); at paper scale they are the release's mc_sim_7b_63, read
from a local clone named by the MEDUSA_CHOICES_FILE / HYDRA_CHOICES_FILE variables.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from specbench import ROOT
from specbench.replicate import OUR_MODEL, Paper, main, results
from specbench.replicate.lookup import base_filters, not_run, one, parse_setting
from specbench.replicate.report import Claim, save
from specbench.replicate.scales import by_source
from specbench.replicate.sweep import Sweep
from specbench.replicate.verdicts import every_higher

NAME = "entmtp"
TITLE = "EntMTP: task-aware draft trees for multi-token-prediction heads"
CPU_PROMPTS = 20
CPU_MAX_NEW_TOKENS = 64
SETUP = {
    "cpu": "cpu scale: SmolLM2-135M-Instruct (hardware.dtype auto; 2 threads) with specbench's Hydra (3 heads) and Medusa (4 heads) heads in place of Vicuna-7B's; T=0.7, typical acceptance (epsilon 0.09, alpha 0.3); the bank searched on this machine (budget 12 nodes, depth 3, 4 prompts x 48 tokens per task, disjoint from the evaluated prompts); seeded prompt subsets, first turn only.",
    "paper": "paper scale: Vicuna-7B v1.3 with ankner/hydra-vicuna-7b-v1.3 and FasterDecoding/medusa-vicuna-7b-v1.3 on one GPU; T=0.7; the bank searched on 100 prompts x 256 tokens per task (budget 88 nodes, depth 4).",
}
DATASETS = ["humaneval", "gsm8k", "sharegpt"]
TEMPERATURE = 0.7
SEARCH = {"cpu": ["--budget", "12", "--max-depth", "3", "--prompts", "4", "--tokens", "48"],
          "paper": ["--budget", "88", "--max-depth", "4", "--prompts", "100", "--tokens", "256"]}
MODEL = {"cpu": OUR_MODEL, "paper": "vicuna-7b"}
DEFAULT_TREE = {  # the heads' default trees: all nodes of the configured choice list
    "cpu": {"medusa": ["method.tree.size=9"], "hydra": ["method.tree.size=8"]},
    "paper": {name: ["method.tree.choices=null", f"method.tree.choices_file=${{oc.env:{name.upper()}_CHOICES_FILE}}",
                     "method.tree.choices_name=mc_sim_7b_63", "method.tree.size=null"] for name in ("medusa", "hydra")},
}
SPEEDUP = "speedup"  # unstated: its rho is not tok/s over AR's tok/s in several rows (entmtp.notes.md); ours, the aggregate ratio
DEFAULTS: dict[str, dict] = {}  # every swept shape is set by the sweeps themselves
IMPLEMENTED = {"ar", "medusa", "hydra", "entmtp"}
POLICY_FILTERS = {  # Table 1's EntMTP rows; the switch driven by the public code's path value
    "static": {"config.method.name": "entmtp"},
    "tau": {"config.method.name": "entmtp_tau", "config.method.tree.path_value": "greedy_depth"},
}


def bank_path(scale: str, results_dir: Path) -> Path:
    """Where the offline stage writes the bank: beside the results, relative to the project
    root when inside it (runs run there; the path is part of their config hash)."""
    path = Path(results_dir).resolve() / f"bank-{MODEL[scale]}.json"
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def sweeps(scale: str, prompts: int, max_new_tokens: int, results_dir: Path):
    paper = scale == "paper"
    model = [f"model={MODEL[scale]}"] if paper else []
    seed = "dataset.seed=123" if paper else "dataset.seed=0"  # cpu scale: by_source's seeded subsets
    common = [f"gen.temperature={TEMPERATURE}", *([seed] if paper else [])]
    bank = bank_path(scale, results_dir)
    out = []
    for dataset in DATASETS:
        # the search decodes prompts outside the evaluated subset (the paper: a calibration split)
        options = ["specbench.search", "--bank", str(bank), "--keep-existing", "--exclude-limit", str(100 if paper else prompts), *SEARCH[scale]]
        out.append(Sweep("search", ["method=hydra", *DEFAULT_TREE[scale]["hydra"], f"dataset={dataset}", seed, "dataset.max_turns=1",
                                    f"gen.temperature={TEMPERATURE}", *model], program=options))

    def at(name, overrides):
        if paper:  # §5: 100 prompts per task (seed 123), 256 new tokens, one GPU
            return [Sweep(name, [*model, f"dataset={','.join(DATASETS)}", "dataset.limit=100", "dataset.max_turns=1",
                                 "gen.max_new_tokens=256", "hardware=gpu", *overrides, *common])]
        return by_source(name, DATASETS, [*overrides, *common], scale, [MODEL[scale]], prompts, max_new_tokens)

    for method in ("medusa", "hydra"):
        out += at("table1", [f"method={method}", *DEFAULT_TREE[scale][method]])
    out += at("table1", ["method=entmtp,entmtp_tau", f"method.tree.bank={bank}"])
    # the text's best_path_value (max(p0, g_1..g_D), which always equals p0) beside the code's rule
    out += at("path-value", ["method=entmtp_tau", f"method.tree.bank={bank}", "method.tree.path_value=paper"])
    return out


def locate(scale: str):
    def find(row: pd.Series):
        method, setting = row["method"], parse_setting(row["setting"])
        if method not in IMPLEMENTED:
            return not_run(method)
        if row["table"] == "table2":
            return "from the offline search, not a run: see table2-search"
        filters = base_filters(row)
        if method == "ar":  # the AR baseline that ran beside the method's runs
            return {**filters, "config.method.name": "hydra"}, True
        if method == "entmtp":
            return {**filters, **POLICY_FILTERS[setting.get("policy", "static")]}, False
        size = {"medusa": 9, "hydra": 8}[method] if scale == "cpu" else None
        return {**filters, "config.method.name": method, **({"config.method.tree.size": size} if size else {"config.method.tree.choices_name": "mc_sim_7b_63"})}, False

    return find


# ---- the offline stage: Table 2 and Figures 1-2 ---------------------------------------

def run_searches(runs: pd.DataFrame) -> dict[str, dict]:
    """The search records of the bank the EntMTP runs loaded."""
    column = "config.method.tree.bank"
    banks = runs[column].dropna().unique() if column in runs else []
    return searches(ROOT / banks[0]) if len(banks) else {}


def searches(bank_file: Path) -> dict[str, dict]:
    """task -> its search record (frontier, default tree, prompts) from a bank file."""
    if not bank_file.is_file():
        return {}
    meta = json.loads(bank_file.read_text()).get("meta", {})
    return {key.removeprefix("search_"): value for key, value in meta.items() if key.startswith("search_")}


def spread_pick(entries: list[dict], count: int = 5) -> list[dict]:
    """`count` frontier trees spanning the node-budget range (Table 2's choice)."""
    if len(entries) <= count:
        return entries
    step = (len(entries) - 1) / (count - 1)
    return [entries[round(i * step)] for i in range(count)]


def table2(found: dict[str, dict]) -> pd.DataFrame:
    rows = []
    for task, search in found.items():
        for entry in spread_pick(search["frontier"]):
            biased, unbiased = entry["accept_biased"], entry["accept_unbiased"]
            rows.append({"dataset": task, "nodes": entry["size"], "depth": entry["depth"], "accept_biased": round(biased, 3),
                         "accept_unbiased": round(unbiased, 3), "bias_pct": round(100 * (biased - unbiased) / unbiased, 1) if unbiased else None})
    return pd.DataFrame(rows, columns=["dataset", "nodes", "depth", "accept_biased", "accept_unbiased", "bias_pct"])


def all_bias(found: dict[str, dict]) -> list[float]:
    """(biased - unbiased) / unbiased in % over every frontier tree of every task."""
    return [100 * (e["accept_biased"] - e["accept_unbiased"]) / e["accept_unbiased"]
            for search in found.values() for e in search["frontier"] if e.get("accept_unbiased")]


def write_table2(found: dict[str, dict], tables_dir: Path) -> None:
    """Ours beside the published Table 2 (Vicuna-7B's trees: same role, other sizes)."""
    frame = table2(found)
    if frame.empty:
        return
    reference = pd.read_csv(ROOT / "results" / "reference" / f"{NAME}.csv", dtype={"setting": str}, keep_default_na=False)
    published = reference[reference["table"] == "table2"]
    tables_dir.mkdir(parents=True, exist_ok=True)
    lines = ["# Table 2 (ours): one-step (biased) vs self-rollout (unbiased) accept length per step", "",
             "Accepted draft tokens per step (the paper's accept length), five frontier trees per task spanning the searched budget.", "",
             "| task | nodes | depth | biased | self-rollout | bias % |", "| --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {r.dataset} | {r.nodes} | {r.depth} | {r.accept_biased:.3f} | {r.accept_unbiased:.3f} | {r.bias_pct:+.1f} |" for r in frame.itertuples()]
    bias = all_bias(found)
    lines += ["", f"Over all {len(bias)} searched frontier trees: bias from {min(bias):+.1f}% to {max(bias):+.1f}% (the paper: within ±3.3% over 124 trees).", "",
              "Published (Vicuna-7B, Hydra heads):", "", "| task | tree | metric | value |", "| --- | --- | --- | --- |"]
    lines += [f"| {r.dataset} | {r.setting} | {r.metric} | {r.value} |" for r in published.itertuples()]
    (tables_dir / "table2-search.md").write_text("\n".join(lines) + "\n")
    frame.to_csv(tables_dir / "table2-search.csv", index=False)


def frontier_figures(found: dict[str, dict], out_dir: Path) -> list[Path]:
    paths = []
    if not found:
        return paths
    fig, axes = plt.subplots(1, len(found), figsize=(5 * len(found), 3.8), squeeze=False)
    for ax, (task, search) in zip(axes[0], found.items()):
        frame = pd.DataFrame(search["frontier"])
        for depth, group in frame.groupby("depth"):
            ax.scatter(group["size"], group["accept_biased"], label=f"depth {depth} (one-step)", s=18)
        ax.plot(frame["size"], frame["accept_unbiased"], "k--", linewidth=0.8, label="self-rollout")
        default = search.get("default")
        if default:
            ax.scatter([default["size"]], [default["accept_unbiased"]], marker="X", s=80, c="tab:red", label="default tree")
        ax.set(title=task, xlabel="tree nodes (root included)", ylabel="accepted draft tokens per step")
        ax.legend(fontsize=7)
    fig.suptitle("EntMTP Figure 1 (ours): acceptance frontier of the Hydra heads, coloured by depth")
    paths += save(fig, out_dir, "figure1")
    fig, axes = plt.subplots(1, len(found), figsize=(5 * len(found), 3.8), squeeze=False)
    for ax, (task, search) in zip(axes[0], found.items()):
        frame = pd.DataFrame(search["frontier"])
        if "predicted_speedup" not in frame:
            continue
        ax.plot(frame["size"], frame["predicted_speedup"], "o-", markersize=4, label="frontier trees")
        best = frame.loc[frame["predicted_speedup"].idxmax()]
        ax.scatter([best["size"]], [best["predicted_speedup"]], marker="*", s=160, c="tab:orange", label=f"throughput-optimal ({int(best['size'])} nodes)")
        default = search.get("default")
        if default:
            ax.scatter([default["size"]], [default["predicted_speedup"]], marker="X", s=80, c="tab:red", label="default tree")
        ax.axhline(1.0, color="gray", linestyle="--", linewidth=0.8)
        ax.set(title=task, xlabel="tree nodes (root included)", ylabel="predicted speedup over AR (cost profile)")
        ax.legend(fontsize=7)
    fig.suptitle("EntMTP Figure 2 (ours): the frontier re-ranked by predicted throughput on this machine")
    paths += save(fig, out_dir, "figure2")
    return paths


def path_values(runs: pd.DataFrame) -> pd.DataFrame:
    """EntMTPτ per task with the code's path value (greedy_depth) and the text's (paper)."""
    rows = []
    for rule in ("greedy_depth", "paper"):
        for _, run in results.select(runs, {"config.method.name": "entmtp_tau", "config.method.tree.path_value": rule}).iterrows():
            ci = run.get("speedup_ci95")
            rows.append({"dataset": run["config.dataset.name"], "path_value": rule, "speedup": round(run["speedup"], 3),
                         "ci95": [round(c, 2) for c in ci] if isinstance(ci, list) else None, "tau": round(run["results.tau"], 3)})
    return pd.DataFrame(rows, columns=["dataset", "path_value", "speedup", "ci95", "tau"])


def write_path_values(runs: pd.DataFrame, tables_dir: Path) -> None:
    frame = path_values(runs)
    if frame.empty:
        return
    tables_dir.mkdir(parents=True, exist_ok=True)
    lines = ["# EntMTPτ: the code's path value (greedy_depth, the default) vs the text's (paper: always p0)", "",
             "| task | path value | speedup [95% CI] | tau |", "| --- | --- | --- | --- |"]
    lines += [f"| {r.dataset} | {r.path_value} | {r.speedup:.2f}x {r.ci95 or ''} | {r.tau:.2f} |" for r in frame.sort_values(["dataset", "path_value"]).itertuples()]
    (tables_dir / "path-value.md").write_text("\n".join(lines) + "\n")


def figures(runs: pd.DataFrame, out_dir: Path) -> list[Path]:
    """Figures 1-2 and Table 2 (ours) come from the bank the runs loaded (committed beside
    the results at cpu scale), written beside the other tables."""
    found = run_searches(runs)
    write_table2(found, out_dir.parent / "tables")
    write_path_values(runs, out_dir.parent / "tables")
    return frontier_figures(found, out_dir)


# ---- claims -------------------------------------------------------------------------

def _faster(better: dict, worse: dict, names: tuple[str, str]):
    """`better` faster than `worse` on every task: per-prompt speedups, paired (every_higher)."""
    def check(runs):
        pairs = []
        for dataset in DATASETS:
            try:
                pairs.append((dataset, one(runs, dataset=dataset, temperature=TEMPERATURE, **better), one(runs, dataset=dataset, temperature=TEMPERATURE, **worse)))
            except KeyError:
                continue
        return every_higher(pairs, "speedup", names)
    return check


def _bias(runs):
    found = run_searches(runs)
    bias = all_bias(found)
    if not bias:
        raise KeyError("the offline search's bank")
    worst = max(bias, key=abs)
    return abs(worst) <= 5.0, f"{len(bias)} frontier trees on {len(found)} tasks: bias {min(bias):+.1f}% to {max(bias):+.1f}%"


def _default_dominated(runs):
    found = run_searches(runs)
    rows = [(task, s["default"], max(s["frontier"], key=lambda e: e["predicted_speedup"])) for task, s in found.items() if s.get("default") and s["frontier"] and "predicted_speedup" in s["frontier"][0]]
    if not rows:
        raise KeyError("the offline search's bank with the default tree")
    wins = sum(best["predicted_speedup"] > default["predicted_speedup"] for _, default, best in rows)
    return wins == len(rows), "; ".join(f"{task}: best frontier tree {best['size']} nodes {best['predicted_speedup']:.2f}x vs default {default['size']} nodes {default['predicted_speedup']:.2f}x" for task, default, best in rows)


HYDRA_DEFAULT = {"config.method.name": "hydra", "config.method.tree.size": 8}
MEDUSA_DEFAULT = {"config.method.name": "medusa", "config.method.tree.size": 9}
CLAIMS = [
    Claim("Table 1", "EntMTP's task-optimal static tree is faster than the default Hydra tree on every task",
          _faster({"config.method.name": "entmtp"}, HYDRA_DEFAULT, ("entmtp", "hydra default"))),
    Claim("Table 1", "EntMTPτ (the entropy scheduler) is faster than EntMTP's static tree on every task",
          _faster(POLICY_FILTERS["tau"], POLICY_FILTERS["static"], ("entmtp_tau", "entmtp"))),
    Claim("Table 1", "Hydra heads are faster than Medusa heads with their default trees on every task",
          _faster(HYDRA_DEFAULT, MEDUSA_DEFAULT, ("hydra", "medusa"))),
    Claim("Table 2", "The one-step (batched) accept-length estimate is biased by a few percent at most (paper: within ±3.3%; here: |bias| <= 5%)", _bias),
    Claim("Figures 1-2", "The default tree is dominated: a searched frontier tree has a higher predicted throughput on every task", _default_dominated),
]

# Table 2's published trees are Vicuna-7B's; ours come from the offline search, in table2-search beside it
SEARCHED = "accept lengths of Vicuna-7B's searched trees; ours are this machine's search's own trees, in table2-search.md"
PUBLISHED_ONLY = {"cpu": {"table2": SEARCHED}, "paper": {"table2": SEARCHED}}

PAPER = Paper(
    name=NAME, title=TITLE, description=__doc__, cpu_prompts=CPU_PROMPTS, cpu_max_new_tokens=CPU_MAX_NEW_TOKENS, setup=SETUP,
    sweeps=sweeps, defaults=DEFAULTS, locate=locate, speedup=SPEEDUP, figures=figures, claims=CLAIMS, published_only=PUBLISHED_ONLY,
)

if __name__ == "__main__":
    main(PAPER)
