"""Cost profiles: measured forward times f(B, c, n) of a target and its drafters.

f(B, c, n) is the wall time of one forward that feeds n new tree rows to each of B
sequences after c cached rows, measured on a grid of n (`grid`: every n to 8, where a
kernel's step from one row to several lies, then about 1.5x apart, the sizes `auto`'s tree
shapes verify among them) and interpolated between: a forward over n rows costs about n
times one over a row's worth of work past a few rows, so every n to 60 cost EAGLE-3's first
run 155 s of 228 s before calibration (AMD EPYC Zen 3, fp32, 2 threads). Each point is the
median of repeated timings after a warm-up, taken in shuffled passes over the points
(see `interleaved`), with the spread beside it. A profile is
keyed by model, dtype and the device fingerprint, cached as versioned JSON, and reused
until the key changes; a run that needs more (longer contexts, another drafter, another
batch size) times only that and adds it to the same file.
"""

from __future__ import annotations

import json
import random
import time
from bisect import bisect_left
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import median

import numpy as np
import torch
from tqdm import tqdm

from specbench.costs.cache import write_whole
from specbench.costs.contention import contended
from specbench.engine.lm import TreeLM
from specbench.engine.tree import DraftTree

# a curve recorded under another version is timed again (what each version changed: docs/speed.md)
VERSION = 9
# rows of context before a probe's forwards (the dtype and compile probes)
PROBE_CONTEXT = 256
NOISY_SPREAD = 0.15  # (max - min) / median of a point's repeats past which it is timed more
SEPARATED_P = 0.05  # the level at which `compared` takes two points' timings to differ
FIRST_PASSES = 4  # the fewest timings at which that test can separate two points (4 against 4: p = 0.029)


@dataclass
class Curve:
    """Forward milliseconds per (context, n): ms[i][j] at contexts[i] and n = ns[j]
    (ns None: every n from 1 to max_n)."""

    contexts: list[int]
    max_n: int
    ms: list[list[float]]
    spread: list[list[float]]  # (max - min) / median of the repeats, per point
    ns: list[int] | None = None
    contended_cores: float = 0.0  # the most cores other processes used while it was timed (costs.contention)

    def at(self, context: float, n: int) -> float:
        """Linear in context between grid points (clamped to the grid); n is clamped to
        [1, max_n] and extrapolated linearly past max_n along the secant over the upper half
        of the measured n (flat if it falls): prefills reach hundreds of tokens, and the last
        two points alone are noise (AMD EPYC Zen 5, bf16: n 63 cost more than n 64). Tree
        policies call this a hundred times a step (CAST), so it reads only the two
        bracketing rows."""
        n = max(int(round(n)), 1)
        i = bisect_left(self.contexts, context)
        if i == 0 or len(self.contexts) == 1:
            return self._at_n(self.ms[0], n)
        if i == len(self.contexts):
            return self._at_n(self.ms[-1], n)
        (c0, c1), (r0, r1) = self.contexts[i - 1 : i + 1], (self._at_n(self.ms[i - 1], n), self._at_n(self.ms[i], n))
        return r0 + (r1 - r0) * (context - c0) / (c1 - c0)

    def _at_n(self, row: list[float], n: int) -> float:
        ns = self.ns or range(1, self.max_n + 1)
        if n <= ns[0]:
            return row[0]
        j = bisect_left(ns, n)
        if j < len(ns):
            (n0, n1), (r0, r1) = (ns[j - 1], ns[j]), (row[j - 1], row[j])
            return r0 + (r1 - r0) * (n - n0) / (n1 - n0)
        if len(ns) < 2:
            return row[-1]
        half = min(bisect_left(ns, ns[-1] / 2), len(ns) - 2)
        slope = max((row[-1] - row[half]) / (ns[-1] - ns[half]), 0.0)  # never cheaper past the data
        return row[-1] + slope * (n - ns[-1])


def grid(max_n: int) -> list[int]:
    """The n a curve is timed at: every n to 8, then about 1.5x apart, and max_n."""
    points = [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48, 64, 96, 128]
    return [n for n in points if n < max_n] + [max_n]


@dataclass
class CostProfile:
    key: dict  # model, dtype, fingerprint (device, cpu/gpu, ISA flags, torch, threads)
    target: Curve
    drafters: dict[str, Curve] = field(default_factory=dict)  # drafter id -> draft forward curve
    step_overhead_ms: float = 0.0  # engine work per AR step beyond the target forward
    # batch size (a string) -> that work per AR step of the whole batch, for B > 1
    step_overhead_batches: dict[str, float] = field(default_factory=dict)
    commit_ms: float = 0.0  # keeping an accepted path's KV rows, per step
    # batch size (as a string: JSON keys) -> target curve at that batch size, for B > 1
    target_batches: dict[str, Curve] = field(default_factory=dict)
    # drafter id -> batch size -> draft forward curve, for B > 1
    drafter_batches: dict[str, dict[str, Curve]] = field(default_factory=dict)
    version: int = VERSION

    def curves(self) -> list[Curve]:
        return [
            self.target,
            *self.drafters.values(),
            *self.target_batches.values(),
            *(c for per in self.drafter_batches.values() for c in per.values()),
        ]

    @property
    def contended_cores(self) -> float:
        """The most cores other processes used while any of its curves was timed."""
        return max(curve.contended_cores for curve in self.curves())

    def contended_for(self, drafter: str | None, batch: int = 1) -> float:
        """The same over the curves that price `drafter` at batch size `batch` alone: another
        drafter's curve timed beside a job says nothing about these."""
        curves = [
            self.target,
            self.target_batches.get(str(batch)),
            self.drafters.get(drafter),
            self.drafter_batches.get(drafter, {}).get(str(batch)),
        ]
        return max(curve.contended_cores for curve in curves if curve is not None)

    @property
    def trusted(self) -> bool:
        """Every curve timed on a machine otherwise idle; else it is refined by the first run
        that finds the machine idle (costs.ensure_profile)."""
        return not contended(self.contended_cores)

    def target_ms(self, batch: int, context: float, n: int) -> float:
        return by_batch({1: self.target} | {int(b): c for b, c in self.target_batches.items()}, batch, context, n)

    def step_overhead(self, batch: int) -> float:
        """Engine work per decoding step over `batch` rows beyond the forwards: linear in the
        batch size between measured ones (per-row sampling and bookkeeping grow with the rows;
        AMD EPYC Zen 5, bf16: 1.3 ms alone, several times that at 8 rows), the nearest
        measured value outside them."""
        known = sorted(
            ({1: self.step_overhead_ms} | {int(b): ms for b, ms in self.step_overhead_batches.items()}).items()
        )
        return float(np.interp(batch, [b for b, _ in known], [ms for _, ms in known]))

    def draft_ms(self, drafter: str, batch: int, context: float, n: int) -> float | None:
        """None when this drafter was never profiled."""
        curves = {int(b): c for b, c in self.drafter_batches.get(drafter, {}).items()}
        if drafter in self.drafters:
            curves[1] = self.drafters[drafter]
        return by_batch(curves, batch, context, n) if curves else None

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> "CostProfile":
        raw = json.loads(text)
        return cls(
            key=raw["key"],
            target=Curve(**raw["target"]),
            drafters={k: Curve(**v) for k, v in raw.get("drafters", {}).items()},
            step_overhead_ms=raw.get("step_overhead_ms", 0.0),
            commit_ms=raw.get("commit_ms", 0.0),
            step_overhead_batches=raw.get("step_overhead_batches", {}),
            target_batches={b: Curve(**v) for b, v in raw.get("target_batches", {}).items()},
            drafter_batches={
                d: {b: Curve(**v) for b, v in per.items()} for d, per in raw.get("drafter_batches", {}).items()
            },
            version=raw.get("version", 0),
        )


@dataclass
class ProfileCosts:
    """A profile as the StepCosts a tree policy prices with (one drafter's curves)."""

    profile: CostProfile
    drafter: str | None

    def target_ms(self, batch: int, context: float, n: int) -> float:
        return self.profile.target_ms(batch, context, n)

    def draft_ms(self, batch: int, context: float, n: int) -> float:
        """0 for a drafter without forwards (or never profiled: the prediction says so)."""
        ms = self.profile.draft_ms(self.drafter, batch, context, n) if self.drafter else None
        return ms if ms is not None else 0.0


def by_batch(curves: dict[int, Curve], batch: int, context: float, n: int) -> float:
    """Linear in batch size between the measured ones (clamped to the largest below or
    smallest above when outside)."""
    sizes = sorted(curves)
    if batch <= sizes[0]:
        return curves[sizes[0]].at(context, n)
    for b0, b1 in zip(sizes, sizes[1:]):
        if batch <= b1:
            f0, f1 = curves[b0].at(context, n), curves[b1].at(context, n)
            return f0 + (f1 - f0) * (batch - b0) / (b1 - b0)
    return curves[sizes[-1]].at(context, n) * batch / sizes[-1]  # past the data: rows scale linearly


def save(profile: CostProfile, path: Path) -> None:
    write_whole(path, profile.to_json())


def load(path: Path, key: dict) -> CostProfile | None:
    """The cached profile at `path` when its version and key match, else None (contended
    curves included: they carry their note, and costs.ensure_profile refines them)."""
    if not path.is_file():
        return None
    try:
        profile = CostProfile.from_json(path.read_text())
    except (ValueError, KeyError, TypeError):
        return None
    if profile.version != VERSION or profile.key != key:
        return None
    return profile


GRID = (128, 512, 2048, 8192, 32768)


def context_grid(longest: int, points: tuple[int, ...] = GRID) -> list[int]:
    """Grid points up to the first one that covers the run's longest context (fixed
    points, so runs of similar length share one cached profile)."""
    grid = [c for c in points if c < longest]
    cover = next((c for c in points if c >= longest), longest)
    return grid + [cover]


def wide_tree(n: int) -> DraftTree:
    """A tree of n nodes (root included) that needs a real tree mask: node i hangs
    under node (i-1)//2, the shape of a top-2 expansion."""
    tree = DraftTree.root(1)
    for i in range(1, n):
        tree.add((i - 1) // 2, 1 + i % 50)
    return tree


def timed(fn, repeats: int, setup=None) -> tuple[float, float]:
    """(median ms, spread) of `repeats` calls after one warm-up call; `setup()`, when
    given, runs untimed before every call."""
    return interleaved({0: (fn, setup)}, repeats)[0]


def interleaved(points: dict, repeats: int, seed: int = 0) -> dict:
    """(median ms, spread) of each point of `points` ({key: (fn, setup or None)}): one
    warm-up call of each, then `repeats` passes that time every point once, each pass in a
    new shuffled order. A slow spell of the machine (a VM here slows for seconds at a
    time) then lands on scattered points of different passes, where the median drops it;
    timed back to back, a point's repeats all fell in it (a profile on AMD EPYC Zen 5
    priced a one-token forward after 512 rows at 21.6 ms, beside 18.5 ms for two tokens,
    where decoding took ~15 ms a token). Same CPU, bf16, n = 1..16 at 128 and 512 rows, 6
    profiles each way alternated in one process: a point's medians spread 11.8% (worst
    22.6%) back to back, 6.3% (worst 13.1%) in shuffled passes.
    A point whose repeats spread more than NOISY_SPREAD is timed 2 x `repeats` times more
    (in passes over the noisy points alone): three timings can all land in a fast spell (AMD
    EPYC Zen 3, bf16: two tokens after 128 rows priced 42.0 ms, spread 30%, where 8 shuffled
    timings ran 46-56 ms and decoding took 52 ms a step; drafting was switched on for a
    predicted 1.15x and ran at 0.90x)."""
    times, passes = _shuffled_timer(points, seed)
    passes(list(points), repeats)
    noisy = [key for key, point in times.items() if spread(point) > NOISY_SPREAD]
    if noisy:
        passes(noisy, 2 * repeats)
    return {key: (median(point), spread(point)) for key, point in times.items()}


def compared(points: dict, pairs: list[tuple], most: int, seed: int = 0) -> tuple[dict, list[tuple]]:
    """((median ms, spread) of each point of `points`, as `interleaved` gives them; the pairs
    of `pairs` left tied) for a probe that only compares: after FIRST_PASSES shuffled passes,
    only the points of pairs whose timings a two-sided Mann-Whitney test cannot yet tell apart
    (p >= SEPARATED_P) are timed again, a pass at a time, up to `most` timings; a pair still
    not told apart then is a tie, within this machine's noise. On a VM whose shuffled timings
    scatter 20-30% (AMD EPYC Zen 3, fp32: a one-token forward 58-88 ms over 8 passes), retiming
    every point past a 15% spread took EAGLE-3's compile probe 36 s; most pairs here differ
    by 1.5-2x and separate in the first passes."""
    times, passes = _shuffled_timer(points, seed)
    passes(list(points), FIRST_PASSES)
    open_pairs = [pair for pair in pairs if not separated(times[pair[0]], times[pair[1]])]
    while open_pairs and min(len(times[key]) for pair in open_pairs for key in pair) < most:
        passes(list(dict.fromkeys(key for pair in open_pairs for key in pair)), 1)
        open_pairs = [pair for pair in open_pairs if not separated(times[pair[0]], times[pair[1]])]
    return {key: (median(point), spread(point)) for key, point in times.items()}, open_pairs


def separated(a: list[float], b: list[float]) -> bool:
    """Whether two points' timings differ beyond their noise (two-sided Mann-Whitney)."""
    from scipy.stats import mannwhitneyu  # here: the engine path (scripts/device_check.py) runs without scipy

    return bool(mannwhitneyu(a, b, alternative="two-sided").pvalue < SEPARATED_P)


def _shuffled_timer(points: dict, seed: int):
    """(timings per key, passes(keys, count)) for `points` ({key: (fn, setup or None)}), each
    point called once untimed first; a pass times each of `keys` once in a new shuffled order."""
    times = {key: [] for key in points}
    shuffle = random.Random(seed).shuffle

    def call(key) -> float:
        fn, setup = points[key]
        if setup is not None:
            setup()
        finish_gpu_work()
        start = time.perf_counter()
        fn()
        finish_gpu_work()
        return (time.perf_counter() - start) * 1000

    def passes(keys: list, count: int) -> None:
        order = list(keys)
        for _ in range(count):
            shuffle(order)
            for key in order:
                times[key].append(call(key))

    for key in points:  # the warm-up pass, untimed
        call(key)
    return times, passes


def finish_gpu_work() -> None:
    """Wait for the GPU work queued so far (none without CUDA): a CUDA forward returns once
    its kernels are queued, so a timing that does not wait measures the launches."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def spread(timings: list[float]) -> float:
    """(max - min) / median of a point's timings (0 for a zero median)."""
    mid = median(timings)
    return (max(timings) - min(timings)) / mid if mid else 0.0


def tree_forward(lm: TreeLM, n: int):
    """One forward over a wide_tree(n) in every row, cut back to the same context after."""
    trees = [wide_tree(n)] * lm.batch_size

    def forward():
        lm.forward(trees=trees, nodes=[range(n)] * len(trees))
        lm.commit([[]] * len(trees))

    return forward


def measure_target(
    lm: TreeLM, contexts: list[int], max_n: int, repeats: int, batch: int = 1, every_n: bool = False
) -> Curve:
    """Target forward over n tree rows per sequence after c context rows, B sequences, at
    the n of `grid` (every n to max_n where `every_n`); the cache is cut back to the
    context after each timing, so every point sees exactly c rows."""
    vocab = lm.vocab_size
    ns = list(range(1, max_n + 1)) if every_n else grid(max_n)
    ms, spread = [], []
    bar = tqdm(total=len(contexts) * len(ns), desc=f"profiling target forwards (B={batch})", unit="point")
    with torch.inference_mode():
        for context in contexts:
            lm.reset(batch)
            lm.reserve(context + max_n)
            lm.forward(contexts=[torch.randint(3, vocab, (context,)).tolist()] * batch)
            timings = interleaved({n: (tree_forward(lm, n), None) for n in ns}, repeats, seed=context)
            ms.append([round(timings[n][0], 3) for n in ns])
            spread.append([round(timings[n][1], 3) for n in ns])
            bar.set_postfix(c=context, ms_at_1=f"{timings[ns[0]][0]:.1f}", refresh=False)
            bar.update(len(ns))
    bar.close()
    return Curve(contexts=contexts, max_n=max_n, ms=ms, spread=spread, ns=None if every_n else ns)


def measure_drafter(drafter, target: TreeLM, contexts: list[int], max_n: int, repeats: int, batch: int = 1) -> Curve:
    """One draft forward over n new tree nodes per sequence after c committed tokens, B
    sequences, through the Drafter interface alone (begin / logits / commit), so any
    drafter is profiled the same way: the root is read first (untimed), then n children
    of the root, at the n of `grid`."""
    vocab = target.vocab_size
    ns = grid(max_n)
    ms, spread = [], []
    bar = tqdm(total=len(contexts) * len(ns), desc=f"profiling draft forwards (B={batch})", unit="point")
    with torch.inference_mode():
        for context in contexts:
            prompt = torch.randint(3, vocab, (context,)).tolist()
            target.reset(batch)
            target.feature_layers = drafter.feature_layers
            target.forward(contexts=[prompt[:-1]] * batch)
            contexts_b, prompt_features = [prompt[:-1]] * batch, target.features

            def draft_forward(n: int):
                """(forward over n children of the root, the reset before it)"""
                tree = DraftTree.root(prompt[-1])
                for i in range(n):
                    tree.add(0, 3 + i)
                trees = [tree] * batch

                def forward():
                    drafter.logits(contexts_b, trees, [list(range(1, n + 1))] * batch)

                def reset():
                    """Untimed: the drafter starts over and reads the context and the root, so
                    every timing's forward attends to exactly `context` rows."""
                    drafter.begin(contexts_b, prompt_features)
                    drafter.logits(contexts_b, trees, [[0]] * batch)

                return forward, reset

            timings = interleaved({n: draft_forward(n) for n in ns}, repeats, seed=context)
            ms.append([round(timings[n][0], 3) for n in ns])
            spread.append([round(timings[n][1], 3) for n in ns])
            bar.update(len(ns))
    bar.close()
    target.feature_layers = ()
    return Curve(contexts=contexts, max_n=max_n, ms=ms, spread=spread, ns=ns)


def measure_commit(lm: TreeLM, context: int, repeats: int) -> float:
    """Median ms of keeping a 4-node accepted path out of a 16-node tree's KV rows (the
    context grows by 4 rows a repeat, a negligible change)."""
    tree = DraftTree.root(1)
    for i in range(1, 16):
        tree.add(i - 1 if i < 4 else 0, 3 + i)
    with torch.inference_mode():
        lm.reset()
        lm.forward(contexts=[torch.randint(3, lm.vocab_size, (context,)).tolist()])
        mid, _ = timed(
            lambda: lm.commit([[0, 1, 2, 3]]), repeats, setup=lambda: lm.forward(trees=[tree], nodes=[range(16)])
        )
    return round(mid, 4)
