"""The one decoding loop every method runs through.

prefill -> repeat: the method's tree (policy) grows a draft tree per row (draft forwards over the whole batch),
the target verifies every row's tree in one forward, the verifier picks each row's
accepted path and one more token, and both caches keep exactly those paths. Rows that
stop leave the batch; batch size 1 is the same loop with one row.
"""

from __future__ import annotations

import math
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from specbench.engine.graphs import BUCKETS, CAPTURES
from specbench.engine.lm import TreeLM
from specbench.engine.parts import Drafter, StepCosts, TreePolicy, Verifier
from specbench.engine.sampling import Sampling
from specbench.engine.transfer import device_tensor
from specbench.errors import require

# cache columns reserved past the longest prompt and the token limit: the widest bucketed tree
RESERVE_TREE_ROWS = max(BUCKETS)


@dataclass
class Method:
    """A speculative decoding method: three independent parts."""

    tree: TreePolicy  # configured as method.tree
    verifier: Verifier
    drafter: Drafter | None = None
    costs: StepCosts | None = None  # measured forward costs, for policies that price trees (CAST)


@dataclass
class Limits:
    max_new_tokens: int
    stop_token_ids: frozenset[int] = frozenset()
    # stop strings are matched on the decoded new text; needs a decode function
    stop_strings: tuple[str, ...] = ()


@dataclass
class Generation:
    ids: list[int]  # new tokens only
    stop_reason: str  # "eos", "stop_string" or "length"
    target_forwards: int  # N_p: verifications this sequence took part in, after prefill
    draft_forwards: int  # N_q: draft forwards during those verifications
    accept_lengths: list[int] = field(default_factory=list)  # tokens committed per verification
    seconds: float = 0.0  # this sequence's latency: decoding only, prefill included (see Clock)
    prefill_seconds: float = 0.0
    batch_seconds: float = 0.0  # the whole batch's decoding time (= seconds at batch size 1)
    batch_size: int = 1
    # the whole batch's time in the target's verification forwards: against the profile's price
    # of the same forwards it tells how much slower or faster the machine ran than when profiled
    verify_seconds: float = 0.0
    nll: float = 0.0  # the target's negative log-likelihood (T=1, raw logits) of `ids`, summed
    step_draft_forwards: list[int] = field(default_factory=list)  # draft forwards per verification
    tree_widths: list[list[int]] = field(default_factory=list)  # per verification: drafted nodes at depth 1, 2, ...
    # per verification: for each accepted draft token (depth 1, 2, ...), its rank among its
    # siblings (the children of its parent) by draft log-prob, 0 = the parent's top-1
    accepted_sibling_ranks: list[list[int]] = field(default_factory=list)
    # per verification: the verified tree's confidence, the sum of its draft nodes' path
    # probabilities v(u) (the draft's cumulative probability; CAST's Figure 3 plots accepted
    # tokens against it)
    tree_scores: list[float] = field(default_factory=list)
    verifier_notes: dict = field(default_factory=dict)  # the verifier's notes, merged over steps


class Clock:
    """Wall time of decoding alone: bookkeeping (statistics, NLL, stop-string decoding,
    progress display) runs inside `paused()` and is not counted."""

    def __init__(self):
        self.seconds, self._since = 0.0, None

    def start(self) -> None:
        self._since = time.perf_counter()

    def exclude(self, seconds: float) -> None:
        """Take one-off setup work that ran while the clock ran (graph captures) off it."""
        self.seconds -= seconds

    def stop(self) -> float:
        self.seconds += time.perf_counter() - self._since
        self._since = None
        return self.seconds

    @contextmanager
    def paused(self):
        self.stop()
        try:
            yield
        finally:
            self.start()


class Captured:
    """Graph captures (engine.graphs.CAPTURES) since the last `take`, taken off `clock`."""

    def __init__(self, clock: Clock):
        self.clock, self.seen = clock, CAPTURES.seconds

    def take(self) -> float:
        """The capture seconds since the last call, now off the clock."""
        seconds, self.seen = CAPTURES.seconds - self.seen, CAPTURES.seconds
        self.clock.exclude(seconds)
        return seconds


@dataclass(eq=False)
class _Row:
    """What the loop tracks for one sequence of the batch."""

    prompt: list[int]
    generator: torch.Generator | None
    new: list[int] = field(default_factory=list)
    nll: list[float] = field(default_factory=list)
    accept_lengths: list[int] = field(default_factory=list)
    step_draft_forwards: list[int] = field(default_factory=list)
    tree_widths: list[list[int]] = field(default_factory=list)
    accepted_sibling_ranks: list[list[int]] = field(default_factory=list)
    tree_scores: list[float] = field(default_factory=list)
    notes: dict = field(default_factory=dict)
    seconds: float = 0.0


def generate(
    target: TreeLM,
    method: Method,
    prompt: list[int],
    sampling: Sampling,
    limits: Limits,
    generator: torch.Generator | None = None,
    decode=None,
    on_step=None,
) -> Generation:
    """Decode after one prompt: the batched loop with one row."""
    return generate_batch(target, method, [prompt], sampling, limits, [generator], decode, on_step)[0]


def generate_batch(
    target: TreeLM,
    method: Method,
    prompts: list[list[int]],
    sampling: Sampling,
    limits: Limits,
    generators: list[torch.Generator | None] | None = None,
    decode=None,
    on_step=None,
) -> list[Generation]:
    """Decode after every prompt at once, one row per prompt; a row that stops leaves the
    batch. `decode(ids) -> str` is needed only for stop strings; `on_step(n_new_tokens,
    n_rows)` is called after every verification (progress display). The clock runs from prefill
    to the last token, around decoding work only."""
    rows = [_Row(list(p), g) for p, g in zip(prompts, generators or [None] * len(prompts))]
    for row in rows:
        _require_on_device(row.generator, target.device)
    clock = Clock()
    verify_seconds = 0.0
    clock.start()
    drafter, tree = method.drafter, method.tree
    target.reset(len(rows))
    target.reserve(max(map(len, prompts)) + limits.max_new_tokens + RESERVE_TREE_ROWS)
    captured = Captured(clock)
    target.feature_layers = drafter.feature_layers if drafter is not None else ()
    with torch.inference_mode():
        prefill = target.forward(contexts=[r.prompt for r in rows])
        captured.take()
        for row, logits in zip(rows, prefill):
            row.new.append(sampling.pick(logits[-1], row.generator))
        with clock.paused():
            prefill_seconds = clock.seconds
            for row, nll in zip(rows, _nll_rows([logits[-1:] for logits in prefill], [row.new for row in rows])):
                row.nll += nll
        if drafter is not None:
            drafter.begin([r.prompt for r in rows], target.features)
        tree.begin(len(rows), method.costs)
        with clock.paused():
            active = [r for r in rows if not _finished(r.new, limits, decode)]
            _leave(rows, active, target, method, clock)
        while active:
            forwards_before = drafter.forwards if drafter is not None else 0
            drafts = tree.grow(
                drafter,
                [r.prompt + r.new[:-1] for r in active],
                [r.new[-1] for r in active],
                sampling,
                [r.generator for r in active],
            )
            drafted = (drafter.forwards if drafter is not None else 0) - forwards_before
            captured.take()
            verify_start = time.perf_counter()
            logits = target.forward(trees=drafts, nodes=[range(len(t)) for t in drafts])
            verify_seconds += time.perf_counter() - verify_start - captured.take()
            accepted = method.verifier.accept_rows(drafts, logits, sampling, [r.generator for r in active])
            paths = [a.path for a in accepted]
            target.commit(paths)
            if drafter is not None:
                features = (
                    [f[device_tensor(p, f.device)] for f, p in zip(target.features, paths)]
                    if target.features is not None
                    else None
                )
                drafter.commit(drafts, paths, features)
            tree.observe(drafts, paths, logits)
            for row, draft, a in zip(active, drafts, accepted):
                row.new += [draft.tokens[n] for n in a.path[1:]] + [a.next_token]
            with clock.paused():
                nlls = _nll_rows(
                    [z[device_tensor(a.path, z.device)] for z, a in zip(logits, accepted)],
                    [r.new[len(r.new) - len(a.path) :] for r, a in zip(active, accepted)],
                )
                for row, draft, a, nll in zip(active, drafts, accepted, nlls):
                    _record_step(row, draft, a, nll, drafted)
                if on_step is not None:
                    on_step(sum(len(a.path) for a in accepted), len(active))
                still = [r for r, a in zip(active, accepted) if not _finished(r.new, limits, decode, len(a.path))]
                _leave(active, still, target, method, clock)
                active = still
    seconds = clock.stop()
    return [_generation(row, limits, decode, prefill_seconds, seconds, len(rows), verify_seconds) for row in rows]


def _require_on_device(generator: torch.Generator | None, device: torch.device) -> None:
    """One clear error where torch's would come from deep inside sampling."""
    if generator is not None:
        require(
            generator.device.type == torch.device(device).type,
            "generator",
            f"on {generator.device}, but the target is on {device}: seed it there (engine.sampling.seeded)",
        )


def _record_step(row: _Row, draft, accepted, nll: list[float], drafted: int) -> None:
    """What one verification of this row adds to its statistics (`accepted`'s tokens are
    already in row.new, `nll` theirs)."""
    row.step_draft_forwards.append(drafted)
    row.tree_widths.append(_widths(draft.depths))
    merge_notes(row.notes, accepted.notes)
    row.accepted_sibling_ranks.append(_sibling_ranks(draft, accepted.path[1:]))
    row.tree_scores.append(round(sum(math.exp(v) for v in draft.logps[1:]), 4))
    row.nll += nll
    row.accept_lengths.append(len(accepted.path))


def _generation(
    row: _Row, limits: Limits, decode, prefill_seconds: float, seconds: float, batch_size: int, verify_seconds: float
) -> Generation:
    """A finished row's result, cut where AR would have stopped."""
    new, stop = _truncate(row.new, limits, decode)
    return Generation(
        ids=new,
        stop_reason=stop,
        target_forwards=len(row.accept_lengths),
        draft_forwards=sum(row.step_draft_forwards),
        accept_lengths=row.accept_lengths,
        seconds=row.seconds,
        prefill_seconds=prefill_seconds,
        batch_seconds=seconds,
        batch_size=batch_size,
        verify_seconds=verify_seconds,
        nll=sum(row.nll[: len(new)]),
        step_draft_forwards=row.step_draft_forwards,
        tree_widths=row.tree_widths,
        accepted_sibling_ranks=row.accepted_sibling_ranks,
        tree_scores=row.tree_scores,
        verifier_notes=row.notes,
    )


def _leave(active: list[_Row], still: list[_Row], target: TreeLM, method: Method, clock: Clock) -> None:
    """Rows that stopped record their latency and leave the batch (called with the clock
    paused; the cache compaction it triggers is decoding work and is timed)."""
    if len(still) == len(active):
        return
    for row in active:
        if row not in still:
            row.seconds = clock.seconds
    keep = [i for i, row in enumerate(active) if row in still]
    if not keep:
        return
    clock.start()
    target.keep(keep)
    if method.drafter is not None:
        method.drafter.keep(keep)
    method.tree.keep(keep)
    clock.stop()


def _nll_rows(logits: list[torch.Tensor], tokens: list[list[int]]) -> list[list[float]]:
    """Per batch row, -log p(token) under the target at T=1 for each of its `tokens` (given
    the logits before each), read back in one transfer."""
    logp = torch.log_softmax(torch.cat(logits).float(), dim=-1)
    flat = device_tensor([t for row in tokens for t in row], logp.device)
    values = (-logp[torch.arange(len(flat), device=logp.device), flat]).tolist()
    out, start = [], 0
    for row in tokens:
        out.append(values[start : start + len(row)])
        start += len(row)
    return out


def _widths(depths: list[int]) -> list[int]:
    widths = [0] * max(depths)
    for d in depths[1:]:
        widths[d - 1] += 1
    return widths


def _sibling_ranks(tree, nodes: list[int]) -> list[int]:
    """Rank of each node among its siblings by draft log-prob (ties by position), 0 = its
    parent's top-1 child: which of a parent's top-K the target accepted (TALON's Figure 3)."""
    return [
        sum(
            1
            for m in range(1, len(tree))
            if tree.parents[m] == tree.parents[n] and (tree.logps[m], -m) > (tree.logps[n], -n)
        )
        for n in nodes
    ]


def merge_notes(notes: dict, new: dict) -> None:
    """Add `new` verifier notes into `notes`: counts are summed, lists concatenated."""
    for key, value in new.items():
        if isinstance(value, list):
            notes.setdefault(key, []).extend(value)
        else:
            notes[key] = notes.get(key, 0) + value


def _finished(new: list[int], limits: Limits, decode, n_added: int | None = None) -> bool:
    recent = new if n_added is None else new[-n_added:]
    return (
        len(new) >= limits.max_new_tokens
        or any(t in limits.stop_token_ids for t in recent)
        or (bool(limits.stop_strings) and any(s in decode(new) for s in limits.stop_strings))
    )


def _truncate(new: list[int], limits: Limits, decode) -> tuple[list[int], str]:
    """Cut what a multi-token step produced past the stopping point, so every method
    reports exactly the tokens (and stop reason) AR would have produced."""
    new = new[: limits.max_new_tokens]
    for i, t in enumerate(new):
        if t in limits.stop_token_ids:
            return new[: i + 1], "eos"
    if limits.stop_strings:
        for end in range(1, len(new) + 1):
            if any(s in decode(new[:end]) for s in limits.stop_strings):
                return new[:end], "stop_string"
    return new, "length"
