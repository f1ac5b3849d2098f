"""Tree shapes chosen from measured costs: a tree parameter set to `auto` takes the
candidate with the highest predicted speedup over AR.

The candidate shapes (the policy class lists them in AUTO_CANDIDATES, from small to
large) are judged on a few calibration prompts that are in no evaluation set: where the
shapes nest, from one pilot decode of the widest (costs/pilot.py) and a confirming decode
of the best; elsewhere each is decoded on the first prompt and only those near the best
there on the rest (`raced`). A shape's τ, δ and tree sizes per step, priced with the cost
profile, plus the per-step engine overhead measured in the same decodes, give its predicted
speedup, at the run's batch size (calibration decodes batches of that many prompts).
Results are cached per profile key, drafter, policy, verifier, temperature and batch
size, so later runs reuse them. When no shape is predicted faster than AR, the method
decodes without drafting (AR's empty tree, no drafter forwards) and the record says so:
the smallest tree is not a safe fallback, since a verification over 2 tokens can cost
twice one over 1 (AVX2 CPUs: GEMV vs GEMM).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from itertools import combinations
from pathlib import Path

import numpy as np
from scipy.stats import theilslopes
from tqdm import tqdm

from specbench.costs import cache, contention, pilot
from specbench.costs.predict import pace, predict, tree_step_ms
from specbench.costs.profile import CostProfile, ProfileCosts
from specbench.engine.candidates import DRAFTING_OFF, auto_keys, candidates
from specbench.engine.loop import Limits, Method, generate_batch
from specbench.engine.methods import instantiate_part
from specbench.engine.sampling import seeded
from specbench.metrics.records import method_run

# in the cache key: a choice recorded under another rule is made again (what each version changed: docs/speed.md)
VERSION = 16


def describe(record: dict) -> str:
    """The chosen shape in a few words: its auto keys, or why drafting is off."""
    best = max(record["candidates"], key=lambda c: c["predicted_speedup"])
    in_dtype = f" in {record['dtype']}" if "dtype" in record else ""  # chosen with the dtype (plan.weigh_dtype)
    over = f" over AR in {record['calibrated_in']}" if "calibrated_in" in record else ""
    if record["chosen"] == DRAFTING_OFF:
        # at a fixed shape a step costs the same whatever it accepts, so speed scales with tau
        even = best["tau"] / best["predicted_speedup"]
        return (
            f"drafting off{in_dtype} (best shape {best['tree']} predicted {best['predicted_speedup']:.2f}x{over}: "
            f"tau {best['tau']:.2f} where {even:.2f} breaks even)"
        )
    return str({k: record["chosen"][k] for k in best["tree"]}) + in_dtype


def price(
    measured: list[tuple[dict, list[dict], dict]],
    keys: list[str],
    profile: CostProfile,
    drafter: str | None,
    anchored: bool = False,
) -> list[dict]:
    """Predicted speedup per candidate: the profile prices the forwards; the rest of a
    step (tree building, bookkeeping), measured in the calibration decodes, is smoothed
    by a robust plane in tree size and draft forwards (overhead_line), since single
    timings here are noisy, and charged step by step as `reprice` charges it. `ar_ms` and
    `method_ms` are the predicted decode times of the calibration prompts by AR and by
    the candidate. `anchored`: the line also goes through AR_STEP (the pilot's few decodes)."""
    stats = []
    for cfg, runs, forecast in measured:
        # verification steps of the batches
        steps, decode_ms = (forecast["steps"], forecast["measured_decode_seconds"] * 1000)
        machine_pace = pace(forecast)
        stats.append(
            shape_stats(cfg, keys, runs)
            | {
                "unpriced_ms_per_step": round(
                    max(0.0, decode_ms / machine_pace - forecast["predicted_decode_seconds"] * 1000) / max(steps, 1), 3
                ),
                "pace": round(machine_pace, 3),
            }
        )
    line = overhead_line([AR_STEP, *stats] if anchored else stats)
    return [
        s
        | {"unpriced_fit_ms": round(tree_step_ms(line, s["mean_tree_size"], s["delta"]), 3)}
        | priced(runs, profile, drafter, line)
        for s, (_, runs, _) in zip(stats, measured)
    ]


def shape_stats(cfg: dict, keys: list[str], runs: list[dict]) -> dict:
    """A candidate's tau, delta and mean tree size per row step over its calibration runs."""
    row_steps = sum(len(r["accept_lengths"]) for r in runs)  # per-row steps: tau and delta are per row
    return {
        "tree": {k: cfg[k] for k in keys},
        "tau": sum(len(r["turn_ids"][0]) for r in runs) / max(row_steps, 1),
        "delta": sum(sum(r["step_draft_forwards"]) for r in runs) / max(row_steps, 1),
        "mean_tree_size": sum(1 + sum(w) for r in runs for w in r["tree_widths"]) / max(row_steps, 1),
    }


def reprice(record: dict, profile: CostProfile, drafter: str | None) -> list[dict]:
    """The candidates of a calibration `record` priced under another `profile` (the same
    model in another dtype): τ, δ and tree sizes are the drafter's and the target's, not the
    dtype's, so the recorded calibration decodes are priced again instead of decoded again;
    the tree work per step (Python, the same in either dtype) is the recorded line's."""
    line = record["tree_work"]
    return [
        (row | {"predicted_speedup": ceiling(row["tau"] - 1, row["mean_tree_size"], profile)})
        if row.get("ceiling")
        else {k: row[k] for k in ("tree", "tau", "delta", "mean_tree_size")} | priced(runs, profile, drafter, line)
        for row, runs in zip(record["candidates"], record["runs"])
    ]


def priced(runs: list[dict], profile: CostProfile, drafter: str | None, line: dict) -> dict:
    """AR's and the method's predicted decode times of calibration `runs` under `profile`,
    the tree work of each step on `line`, and their ratio (prefill left out: it is the same
    for every shape, and its share depends on the run's answer length, not the calibration's)."""
    forecast = predict(runs, profile, drafter, line)
    method_ms = forecast["predicted_decode_seconds"] * 1000
    ar_ms = forecast["predicted_ar_decode_seconds"] * 1000
    return {
        "predicted_speedup": round(ar_ms / method_ms, 3),
        "ar_ms": round(ar_ms, 2),
        "method_ms": round(method_ms, 2),
    }


def choose_dtype(priced: dict[str, list[dict]], options: list[dict], min_gain: float) -> dict:
    """Dtype and shape together, by predicted throughput: `priced` maps each dtype to its
    candidate rows (the same candidates, `options[i]` the config of row i). A candidate's gain
    is the fastest AR's time (over the dtypes) over its own, so drafting in one dtype is
    weighed against plain decoding in the other (on an AVX2-only CPU a one-token bf16 forward
    can cost half an fp32 one while a 16-token one costs twice). Only decoded shapes count
    (not pilot guesses, not shapes left undecoded for their ceiling). Drafting stays off, in
    AR's fastest dtype, unless the best gain clears `min_gain`."""
    dtypes = list(priced)
    decoded = [i for i, row in enumerate(priced[dtypes[0]]) if row.get("measured", True)]  # no guesses, no ceilings
    gains = {
        (d, i): min(priced[o][i]["ar_ms"] for o in dtypes) / priced[d][i]["method_ms"] for d in dtypes for i in decoded
    }
    dtype, best = max(gains, key=gains.get)
    ar_ms = {d: sum(priced[d][i]["ar_ms"] for i in decoded) / len(decoded) for d in dtypes}
    ar_dtype = min(ar_ms, key=ar_ms.get)
    decided = {
        "rule": f"dtype and shape together: the highest predicted throughput over {' and '.join(dtypes)}, each priced "
        "with its own cost profile",
        "best_gain": {d: round(max(g for (o, _), g in gains.items() if o == d), 3) for d in dtypes},
        "ar_ms": {d: round(ms, 2) for d, ms in ar_ms.items()},
    }
    gain = round(gains[dtype, best], 3)  # the rule compares the number the record shows
    if gain <= 1.0 + min_gain:
        return decided | {
            "dtype": ar_dtype,
            "chosen": DRAFTING_OFF,
            "predicted_gain": 1.0,
            "note": f"no shape in any dtype is predicted more than {min_gain:.0%} faster than AR in {ar_dtype} "
            f"(best {gain:.2f}x: {priced[dtype][best]['tree']} in {dtype}); decoding without drafting in {ar_dtype}",
        }
    return decided | {"dtype": dtype, "chosen": options[best], "predicted_gain": gain}


def overhead_line(candidates: list[dict]) -> dict:
    """Per-step work the profile does not price (tree building, the engine's work per draft
    layer, verifier bookkeeping beyond AR's step), as a plane in tree size and draft forwards
    per step over the calibrated shapes. Both terms are needed: CAST's thresholds change the
    verified size at a fixed depth, and on a CPU a draft layer costs the engine more than the
    head forward the profile prices (AMD EPYC Zen 5, bf16, batch size 1, head forward 1 ms:
    0.7 ms more a layer for EAGLE's dynamic tree, 3.2 ms for CAST's). Single timings here
    are noisy, and one shape timed while another job ran must not tilt every prediction, so
    the fit is Theil-Sen's: the median slope over pairs (size alone) or over the exact planes
    through triples of shapes. Where delta is a line in size (a chain, whose delta is its
    length) only size is fitted; one shape gives a constant."""
    sizes = np.array([c["mean_tree_size"] for c in candidates], dtype=float)
    drafts = np.array([c.get("delta", 0.0) for c in candidates], dtype=float)
    extra = np.array([c["unpriced_ms_per_step"] for c in candidates], dtype=float)
    if len(candidates) < 2 or np.ptp(sizes) == 0:
        return {"ms": round(float(np.median(extra)), 3), "ms_per_node": 0.0, "ms_per_draft": 0.0}
    if len(candidates) >= 4 and not _affine(sizes, drafts):
        planes = []
        for i, j, k in combinations(range(len(candidates)), 3):
            design = np.array([[1.0, sizes[m], drafts[m]] for m in (i, j, k)])
            if abs(np.linalg.det(design)) > 1e-6:
                planes.append(np.linalg.solve(design, extra[[i, j, k]])[1:])
        if planes:
            per_node, per_draft = np.median(np.array(planes), axis=0)
            intercept = np.median(extra - per_node * sizes - per_draft * drafts)
            return {
                "ms": round(float(intercept), 3),
                "ms_per_node": round(float(per_node), 4),
                "ms_per_draft": round(float(per_draft), 4),
            }
    slope, intercept = theilslopes(extra, sizes, method="joint")[:2]
    return {"ms": round(float(intercept), 3), "ms_per_node": round(float(slope), 4), "ms_per_draft": 0.0}


def _affine(x: np.ndarray, y: np.ndarray, tolerance: float = 0.05) -> bool:
    """Whether y is (within `tolerance`) a + b x over these points, so the two cannot be told apart."""
    if np.ptp(y) == 0:
        return True
    slope, intercept = np.polyfit(x, y, 1)
    return bool(np.max(np.abs(y - (intercept + slope * x))) <= tolerance)


def verifier_id(verifier) -> str:
    """The verifier's class and settings: a lossy verifier (MARS, typical acceptance)
    accepts more than the standard one, so it gets its own choice."""
    settings = json.dumps(vars(verifier), sort_keys=True, default=str)
    return f"{type(verifier).__module__}.{type(verifier).__qualname__}:{settings}"


def cache_file(
    cache: Path,
    profile: CostProfile,
    drafter: str | None,
    tree_cfg: dict,
    sampling,
    calibration,
    verifier: str,
    weights: str = "",
) -> Path:
    blob = json.dumps(
        [VERSION, profile.key, drafter, weights, tree_cfg, asdict(sampling), calibration, verifier],
        sort_keys=True,
        default=str,
    )
    return cache / f"autotune-{hashlib.sha256(blob.encode()).hexdigest()[:16]}.json"


@dataclass(frozen=True)
class Calibration:
    """What the calibration decodes of one run share. `make_prompts()` gives the prompts,
    read only when the cache has no record yet; records are keyed by `prompts_id`, the token
    budget, the batch size and `weights`."""

    make_prompts: Callable[[], list[list[int]]]
    prompts_id: str
    sampling: object
    stop_token_ids: frozenset[int]
    cache: Path
    drafter_name: str | None
    weights: str  # the drafter's weights_id
    max_new_tokens: int  # costs.calibration_tokens
    batch_size: int
    min_gain: float  # costs.min_gain
    log: Callable[[str], None] = field(default=print, compare=False)

    def cache_file(self, profile: CostProfile, tree_cfg: dict, verifier, *purpose: str) -> Path:
        key = [self.prompts_id, self.max_new_tokens, *purpose] + (
            [f"batch={self.batch_size}"] if self.batch_size > 1 else []
        )
        return cache_file(
            self.cache, profile, self.drafter_name, tree_cfg, self.sampling, key, verifier_id(verifier), self.weights
        )

    def decode(
        self, methods: list[Method], target, profile: CostProfile, warm_up: bool = True, batches: slice = slice(None)
    ) -> tuple[list[tuple[list[dict], dict]], list[list[int]], float]:
        """(per method: the calibration samples as a run records them and their forecast; all
        the prompts; the most cores other processes used while these decodes or the profile
        pricing them were timed). `warm_up`: decode the first batch once untimed first (not
        needed right after other calibration decodes in the same process). `batches`: which
        batches of prompts to decode (each seeded by its place among all of them)."""
        prompts, size = self.make_prompts(), self.batch_size
        limits = Limits(max_new_tokens=self.max_new_tokens, stop_token_ids=self.stop_token_ids)
        batch0 = prompts[:size]
        # warm-up over the full token budget: after a shorter one the first shape calibrated
        # paid one-time costs the others did not (7.4 ms a step against 2.3 ms timed alone)
        if warm_up:
            generate_batch(
                target, methods[0], batch0, self.sampling, limits, [seeded(0, target.device) for _ in batch0]
            )
        measured = []
        with contention.watch() as usage:
            for method in tqdm(methods, desc="calibrating tree shapes", unit="shape"):
                runs = []
                for start in range(0, len(prompts), size)[batches]:
                    batch = prompts[start : start + size]
                    generators = [seeded(start + i, target.device) for i in range(len(batch))]
                    for prompt, out in zip(
                        batch, generate_batch(target, method, batch, self.sampling, limits, generators)
                    ):
                        runs.append(
                            asdict(
                                method_run(
                                    [(len(prompt), out, "")],
                                    out.batch_size,
                                    out.batch_seconds,
                                    str(start),
                                    out.verify_seconds,
                                )
                            )
                        )
                measured.append((runs, predict(runs, profile, self.drafter_name)))
        return measured, prompts, round(max(profile.contended_for(self.drafter_name, size), usage.others or 0.0), 2)

    def record(self, prompts: list[list[int]]) -> dict:
        return {
            "prompts": len(prompts),
            "max_new_tokens": self.max_new_tokens,
            "temperature": self.sampling.temperature,
            "batch_size": self.batch_size,
        }


def tune(tree_cfg: dict, drafter, verifier, target, profile: CostProfile, setup: Calibration) -> tuple[dict, dict]:
    """(concrete tree config, record of the choice) for a tree config with auto keys, at
    the run's batch size: calibration decodes batches of `setup.batch_size` prompts, priced at
    that batch size (a shape that pays alone can be too wide for a batch)."""
    options = candidates(tree_cfg)
    # a new grid re-measures
    path = setup.cache_file(profile, tree_cfg, verifier, *(json.dumps(o, sort_keys=True) for o in options))
    log = setup.log
    if (cached := reusable(path, log)) is not None:
        record = decide(cached, options, setup.min_gain)
        return record["chosen"], record
    trees = [instantiate_part(cfg, "method.tree") for cfg in options]  # bad values fail here, before any decoding
    log(
        f"method.tree: choosing {', '.join(auto_keys(tree_cfg))} from {len(options)} shapes"
        f"{f' in batches of {setup.batch_size}' if setup.batch_size > 1 else ''} (once; cached in {path})"
    )
    step_costs = ProfileCosts(profile, setup.drafter_name)  # for policies that price their trees (CAST)

    def method(tree) -> Method:
        return Method(tree=tree, verifier=verifier, drafter=drafter, costs=step_costs)

    keys = auto_keys(tree_cfg)
    sized = width_bounded(setup.batch_size, drafter)
    bound = {i: ceiling(t.deepest(), t.widest(), profile) for i, t in enumerate(trees) if sized and t.deepest()}
    live = [i for i in range(len(trees)) if bound.get(i, np.inf) > 1.0 + setup.min_gain]
    rows, runs, prompts, others, line = calibrated(
        [options[i] for i in live], [trees[i] for i in live], keys, method, target, profile, setup
    )
    rows, runs = dict(zip(live, rows)), dict(zip(live, runs))
    for i in set(range(len(trees))) - set(live):
        rows[i], runs[i] = ceiling_row(options[i], keys, trees[i], bound[i]), []
    rows, runs = [rows[i] for i in range(len(trees))], [runs[i] for i in range(len(trees))]
    for row in rows:
        log(f"  {row['tree']}: " + shown_row(row))
    record = decide(
        {
            "candidates": rows,
            "tree_work": line,
            "calibration": setup.record(prompts),
            "runs": runs,
            "contended_cores": others,
        },
        options,
        setup.min_gain,
    )
    log(
        f"  {record['note']}"
        if "note" in record
        else f"  chosen {describe(record)} (predicted {record['predicted_speedup']:.2f}x)"
    )
    keep(record, path, log)
    return record["chosen"], record


def calibrated(options, trees, keys, method, target, profile: CostProfile, setup: Calibration):
    """(candidate rows, their runs, the prompts, contended cores, the tree-work line that
    priced them) of the shapes worth decoding: predicted from a pilot where the policy's
    shapes nest (`predicted`), else raced (`raced`)."""
    if not trees:
        return [], [], [], 0.0, overhead_line([AR_STEP])
    if setup.batch_size == 1 and pilot.nested(trees):
        return predicted(options, trees, keys, method, target, profile, setup)
    return raced(options, trees, keys, method, target, profile, setup)


# a shape predicted more than this below the best on the first calibration batch is decoded no
# further: that batch's best was the exhaustive choice in every calibration measured (docs/speed.md)
RACE_MARGIN = 0.15


def raced(options, trees, keys, method, target, profile: CostProfile, setup: Calibration):
    """(candidate rows, their runs, the prompts, contended cores, the tree-work line) of
    shapes that do not nest: every one decoded on the first batch of calibration prompts,
    and on the rest only those within RACE_MARGIN of the best predicted there. A shape
    left behind keeps its first batch's row, not `measured`, so it cannot be chosen."""
    first, prompts, others = setup.decode([method(tree) for tree in trees], target, profile, batches=slice(0, 1))
    rows = price([(cfg, *m) for cfg, m in zip(options, first)], keys, profile, setup.drafter_name)
    best = max(row["predicted_speedup"] for row in rows)
    ahead = [i for i, row in enumerate(rows) if row["predicted_speedup"] >= best * (1 - RACE_MARGIN)]
    measured = list(first)
    if len(prompts) > setup.batch_size:
        rest, _, busy = setup.decode([method(trees[i]) for i in ahead], target, profile, False, slice(1, None))
        others = max(others, busy)
        for i, (runs, _) in zip(ahead, rest):
            whole = first[i][0] + runs
            measured[i] = (whole, predict(whole, profile, setup.drafter_name))
        rows = price([(cfg, *m) for cfg, m in zip(options, measured)], keys, profile, setup.drafter_name)
        for i in set(range(len(trees))) - set(ahead):
            rows[i] |= {"measured": False, "raced_out": True}
    return rows, [m[0] for m in measured], prompts, others, overhead_line(rows)


def width_bounded(batch_size: int, drafter) -> bool:
    """Whether every step verifies a shape's widest tree, so its ceiling bounds it: at batch
    size 1 with a drafter that always proposes."""
    return batch_size == 1 and drafter is not None and drafter.always_proposes


def ceiling(deepest: int, widest: float, profile: CostProfile) -> float:
    """The most a shape can gain over AR at batch size 1: `deepest` drafts accepted every
    step, drafting and tree work free, its step a verification over `widest` tokens plus
    AR's per-step engine work, at the profile's context where that ratio is kindest. On an
    AVX2 CPU a 60-token forward costs about 9x a one-token one (AMD EPYC Zen 3, fp32 on fp16
    weights), so EAGLE's widest shape (8 tokens a step at most) cannot pay there and is not
    decoded, where its pilot decode took 72 s of a first run's 143 s of calibration."""
    overhead = profile.step_overhead(1)
    return max(
        (deepest + 1) * (profile.target_ms(1, c, 1) + overhead) / (profile.target_ms(1, c, widest) + overhead)
        for c in profile.target.contexts
    )


# how far below the bar a shape's ceiling at the forward probe must fall to be left out of the
# profile: the probe is one context without engine work, so the profile's kindest context reads
# a ceiling kinder than the probe's (EAGLE-3, fp32 on fp16 weights: its 32-token shape 1.02x at
# the probe and 1.08x at the profile on AMD EPYC Zen 4 capped to AVX2; its 60-token shape 0.89x
# and 0.96x on Zen 3), and a slack of about twice that kindness keeps such a shape timed
WIDTH_SLACK = 1.15


def live_width(trees: list, probed: dict[int, float], min_gain: float) -> int | None:
    """The widest forward among `trees` (a sized calibration's candidates, as `tune` bounds
    them) whose ceiling at the forward stage's probed times (`probed`: ms per forward size,
    interpolated between sizes; engine work per step left out) is within WIDTH_SLACK of
    beating AR by `min_gain`, so the cost profile is timed no wider: EAGLE-3's 60-token
    shape, at most 0.7x on an AVX2 CPU, cost its profile 40% of every timing pass. None
    where a live tree's width follows the draft or lies past the probe."""
    sizes = sorted(probed)

    def at(n: float) -> float:
        return float(np.interp(n, sizes, [probed[k] for k in sizes]))

    widths = []
    for tree in trees:
        widest, deepest = tree.widest(), tree.deepest()
        if widest is None or widest > sizes[-1]:
            return None
        if not deepest or (deepest + 1) * at(1) / at(widest) * WIDTH_SLACK > 1.0 + min_gain:
            widths.append(int(math.ceil(widest)))
    return max(widths, default=None)


def ceiling_row(cfg: dict, keys: list[str], tree, bound: float) -> dict:
    """A shape left undecoded for its ceiling, as a candidate row: the tokens a step would
    give and its width, `predicted_speedup` the ceiling (reprice recomputes it)."""
    return {
        "tree": {k: cfg[k] for k in keys},
        "tau": float(tree.deepest() + 1),
        "delta": float(tree.deepest()),
        "mean_tree_size": float(tree.widest()),
        "predicted_speedup": round(bound, 3),
        "measured": False,
        "ceiling": True,
    }


def shown_row(row: dict) -> str:
    """A candidate row for the console."""
    if row.get("ceiling"):
        return (
            f"at most {row['predicted_speedup']:.2f}x even accepting all {row['tau'] - 1:.0f} drafts every step "
            f"({row['mean_tree_size']:.0f} tokens verified a step): not decoded"
        )
    if row.get("raced_out"):
        source = f" (first batch only: more than {RACE_MARGIN:.0%} below the best there, not decoded further)"
    else:
        source = "" if row.get("measured", True) else " (from the pilot)"
    return (
        f"tau {row['tau']:.2f}, delta {row['delta']:.2f}, tree {row['mean_tree_size']:.1f} -> predicted "
        f"{row['predicted_speedup']:.2f}x{source}"
    )


# a runner-up predicted at most this much faster than every decoded shape is not decoded too: a
# choice within 5% of the best shape's speed is the bar the pilot benchmark holds prediction to
CONFIRM_MARGIN = 0.05
# AR's step as a point of the tree-work line: a profile prices AR's engine work per step
# into both sides (predict.py), so a step of one token and no drafts has no tree work left
AR_STEP = {"mean_tree_size": 1.0, "delta": 0.0, "unpriced_ms_per_step": 0.0}


def predicted(options, trees, keys, method, target, profile: CostProfile, setup: Calibration):
    """(candidate rows, their runs, the prompts, contended cores, the tree-work line) from a
    pilot decode of the widest shape, every other shape rebuilt from the pilot's steps
    (costs/pilot.py) and priced with the tree-work line through AR_STEP and the pilot; the
    best of those is decoded to confirm it, and the runner-up too where, with that decode in
    the line, it is still predicted more than CONFIRM_MARGIN faster than every decoded shape.
    Rows carry `measured`, and only measured ones can be chosen."""
    widest = pilot.pilot_index(trees)
    recorder = pilot.Recorder(trees[widest])
    setup.log(
        f"  pilot: decoding {options[widest]} (the widest); the other {len(options) - 1} shapes are predicted "
        f"from its steps, the best decoded to confirm (the runner-up too where it is predicted more than "
        f"{CONFIRM_MARGIN:.0%} faster than every decoded shape)"
    )
    first, prompts, others = setup.decode([method(recorder)], target, profile)
    measured = {widest: first[0]}
    decodes = recorder.decodes[-len(first[0][0]) :]  # one per calibration prompt, after the warm-up's
    costs, rebuilt = ProfileCosts(profile, setup.drafter_name), {}
    for i, tree in enumerate(trees):
        if i not in measured:
            rebuilt[i] = [pilot.rebuilt_run(r, s, tree, costs) for r, s in zip(first[0][0], decodes)]
    unknown = [i for i, runs in rebuilt.items() if any(r is None for r in runs)]
    guessed = [i for i in rebuilt if i not in unknown]
    line = overhead_line([AR_STEP, *price([(options[widest], *measured[widest])], keys, profile, setup.drafter_name)])
    best = _ranked(guessed, rebuilt, profile, setup.drafter_name, line)[:1]
    others = max(others, _decode_into(measured, [i for i, _ in best] + unknown, method, trees, target, profile, setup))
    rows, line = _measured_rows(measured, options, keys, profile, setup.drafter_name)
    runner = _ranked([i for i in guessed if i not in measured], rebuilt, profile, setup.drafter_name, line)[:1]
    if runner and runner[0][1] > max(row["predicted_speedup"] for row in rows.values()) * (1 + CONFIRM_MARGIN):
        others = max(others, _decode_into(measured, [runner[0][0]], method, trees, target, profile, setup))
        rows, line = _measured_rows(measured, options, keys, profile, setup.drafter_name)
    for i in set(rebuilt) - set(measured):
        stats = shape_stats(options[i], keys, rebuilt[i])
        fit = round(tree_step_ms(line, stats["mean_tree_size"], stats["delta"]), 3)
        rows[i] = stats | {"unpriced_ms_per_step": fit, "unpriced_fit_ms": fit, "measured": False}
        rows[i] |= priced(rebuilt[i], profile, setup.drafter_name, line)
    runs = {i: m[0] for i, m in measured.items()} | {i: r for i, r in rebuilt.items() if i not in measured}
    return [rows[i] for i in range(len(options))], [runs[i] for i in range(len(options))], prompts, others, line


def _ranked(indices, rebuilt, profile: CostProfile, drafter: str | None, line: dict) -> list[tuple[int, float]]:
    """(candidate, predicted speedup) of the rebuilt `indices` priced on `line`, fastest first."""
    speed = {i: priced(rebuilt[i], profile, drafter, line)["predicted_speedup"] for i in indices}
    return sorted(speed.items(), key=lambda item: -item[1])


def _decode_into(measured: dict, indices: list[int], method, trees, target, profile, setup: Calibration) -> float:
    """Decode the candidates `indices` (none: nothing) into `measured`; the most cores other
    processes used meanwhile."""
    if not indices:
        return 0.0
    more, _, busy = setup.decode([method(trees[i]) for i in indices], target, profile, warm_up=False)
    measured |= dict(zip(indices, more))
    return busy


def _measured_rows(measured: dict, options, keys, profile: CostProfile, drafter: str | None) -> tuple[dict, dict]:
    """(the decoded candidates' rows, priced on a line through AR_STEP and them; that line)."""
    order = sorted(measured)
    rows = dict(zip(order, price([(options[i], *measured[i]) for i in order], keys, profile, drafter, anchored=True)))
    return rows, overhead_line([AR_STEP, *rows.values()])


def decide(record: dict, options: list[dict], min_gain: float) -> dict:
    """The record with its choice made (cached records are decided again, so `min_gain`
    applies to them too): the candidate predicted fastest, or drafting off when even it is
    not predicted more than `min_gain` faster than AR. `options[i]` is the config of
    `record["candidates"][i]`."""
    decoded = [i for i in range(len(options)) if record["candidates"][i].get("measured", True)]  # not pilot guesses
    if not decoded:  # every shape's ceiling is below AR's speed
        best = max(range(len(options)), key=lambda i: record["candidates"][i]["predicted_speedup"])
        return {k: v for k, v in record.items() if k != "note"} | {
            "chosen": DRAFTING_OFF,
            "predicted_speedup": record["candidates"][best]["predicted_speedup"],
            "note": f"no shape could be more than {min_gain:.0%} faster than AR on this hardware even accepting "
            f"every draft (best ceiling {record['candidates'][best]['predicted_speedup']:.2f}x at "
            f"{record['candidates'][best]['tree']}); decoding without drafting. Set the tree keys to force a shape",
        }
    best = max(decoded, key=lambda i: record["candidates"][i]["predicted_speedup"])
    predicted = record["candidates"][best]["predicted_speedup"]
    decided = {k: v for k, v in record.items() if k != "note"} | {
        "chosen": options[best],
        "predicted_speedup": predicted,
    }
    if predicted <= 1.0 + min_gain:
        decided["chosen"] = DRAFTING_OFF
        decided["note"] = (
            f"no shape is predicted more than {min_gain:.0%} faster than AR on this hardware (best {predicted:.2f}x at "
            f"{record['candidates'][best]['tree']}); decoding without drafting. Set the tree keys to force a shape"
        )
    return decided


def tree_overhead(tree_cfg: dict, method: Method, target, profile: CostProfile, setup: Calibration) -> dict:
    """The per-step cost of building and checking a fixed-shape tree beyond the priced
    forwards ({"ms", "ms_per_node", "ms_per_draft"}), from a calibration decode like `tune`'s (cached the same
    way), so a run's summary predicts its speedup with the tree work included."""
    path = setup.cache_file(profile, tree_cfg, method.verifier, "tree-overhead")
    if (cached := reusable(path, setup.log)) is not None:
        return cached["tree_work"]
    setup.log(f"costs: timing tree building on calibration prompts (once; cached in {path})")
    measured, prompts, others = setup.decode([method], target, profile)
    keys = [k for k in tree_cfg if k != "_target_"]
    candidates = price([(tree_cfg, *measured[0])], keys, profile, setup.drafter_name)
    record = {
        "candidates": candidates,
        "tree_work": overhead_line(candidates),
        "calibration": setup.record(prompts),
        "contended_cores": others,
    }
    keep(record, path, setup.log)
    return record["tree_work"]


def reusable(path: Path, log) -> dict | None:
    """The calibration record cached at `path`, unless it was timed beside another job and
    the machine is idle now (then it is calibrated again: refined)."""
    record = cache.read(path)
    if record is None or cache.refine_now(f"the shape calibration {path.name}", record.get("contended_cores"), log):
        return None
    return record


def keep(record: dict, path: Path, log) -> None:
    """Cache a calibration record; one timed beside another job goes with that note, is
    reused while the machine stays busy and calibrated again on an idle one (`reusable`)."""
    cache.keep(path, json.dumps(record, indent=1), "calibration", record["contended_cores"], log)
