"""The one decoding loop every method runs through.

prefill -> repeat: policy builds a tree (draft forwards), the target verifies all of
it in one forward, the verifier picks the accepted path and one more token, and both
caches keep exactly that path.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from specbench.engine.lm import TreeLM
from specbench.engine.sampling import Sampling
from specbench.engine.parts import Drafter, TreePolicy, Verifier


@dataclass
class Method:
    """A speculative decoding method: three independent parts."""

    policy: TreePolicy
    verifier: Verifier
    drafter: Drafter | None = None


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
    target_forwards: int  # N_p, after prefill
    draft_forwards: int  # N_q
    accept_lengths: list[int] = field(default_factory=list)  # tokens committed per verification
    seconds: float = 0.0  # decoding only, prefill included (see Clock)
    prefill_seconds: float = 0.0
    nll: float = 0.0  # the target's negative log-likelihood (T=1, raw logits) of `ids`, summed
    step_draft_forwards: list[int] = field(default_factory=list)  # draft forwards per verification
    tree_widths: list[list[int]] = field(default_factory=list)  # per verification: drafted nodes at depth 1, 2, ...
    # per verification: for each accepted draft token (depth 1, 2, ...), its rank among the
    # tree's nodes at that depth by cumulative draft log-prob, 0 = most probable
    accepted_ranks: list[list[int]] = field(default_factory=list)
    verifier_notes: dict = field(default_factory=dict)  # the verifier's notes, merged over steps


class Clock:
    """Wall time of decoding alone: bookkeeping (statistics, NLL, stop-string decoding,
    progress display) runs inside `paused()` and is not counted."""

    def __init__(self):
        self.seconds, self._since = 0.0, None

    def start(self) -> None:
        self._since = time.perf_counter()

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
    """Decode after `prompt`. `decode(ids) -> str` is needed only for stop strings;
    `on_step(n_new_tokens)` is called after every verification (progress display).
    The clock runs from prefill to the last token, around decoding work only."""
    clock = Clock()
    clock.start()
    drafter = method.drafter
    target.reset()
    target.feature_layers = drafter.feature_layers if drafter is not None else ()
    with torch.inference_mode():
        prefill = target.forward(context=prompt)[-1:]
        first = sampling.pick(prefill[0], generator)
        with clock.paused():
            prefill_seconds = clock.seconds
            token_nll = _nll(prefill, [first])
        if drafter is not None:
            drafter.begin(prompt, target.features)
        draft_forwards_before = drafter.forwards if drafter is not None else 0
        new = [first]
        accept_lengths, step_draft_forwards, tree_widths, accepted_ranks, notes = [], [], [], [], {}
        with clock.paused():
            done = _finished(new, limits, decode)
        while not done:
            context = prompt + new[:-1]
            forwards_before = drafter.forwards if drafter is not None else 0
            tree = method.policy.build(drafter, context, new[-1], sampling, generator)
            drafted = (drafter.forwards if drafter is not None else 0) - forwards_before
            logits = target.forward(tree=tree, nodes=range(len(tree)))
            accepted = method.verifier.accept(tree, logits, sampling, generator)
            committed = [tree.tokens[n] for n in accepted.path[1:]] + [accepted.next_token]
            target.commit(accepted.path)
            if drafter is not None:
                features = target.features[accepted.path] if target.features is not None else None
                drafter.commit(tree, accepted.path, features)
            new += committed
            with clock.paused():
                step_draft_forwards.append(drafted)
                tree_widths.append(_widths(tree.depths))
                merge_notes(notes, accepted.notes)
                accepted_ranks.append(_depth_ranks(tree, accepted.path[1:]))
                token_nll += _nll(logits[accepted.path], committed)
                accept_lengths.append(len(accepted.path))
                done = _finished(new, limits, decode, len(accepted.path))
                if on_step is not None:
                    on_step(len(accepted.path))
    seconds = clock.stop()
    new, stop = _truncate(new, limits, decode)
    return Generation(
        ids=new,
        stop_reason=stop,
        target_forwards=len(accept_lengths),
        draft_forwards=(drafter.forwards - draft_forwards_before) if drafter is not None else 0,
        accept_lengths=accept_lengths,
        seconds=seconds,
        prefill_seconds=prefill_seconds,
        nll=sum(token_nll[: len(new)]),
        step_draft_forwards=step_draft_forwards,
        tree_widths=tree_widths,
        accepted_ranks=accepted_ranks,
        verifier_notes=notes,
    )


def _nll(logits: torch.Tensor, tokens: list[int]) -> list[float]:
    """-log p(token) under the target at T=1, one per row."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return (-logp[torch.arange(len(tokens)), torch.tensor(tokens)]).tolist()


def _widths(depths: list[int]) -> list[int]:
    widths = [0] * max(depths)
    for d in depths[1:]:
        widths[d - 1] += 1
    return widths


def _depth_ranks(tree, nodes: list[int]) -> list[int]:
    """Rank of each node among the tree's nodes at its depth by cumulative draft log-prob
    (ties by position): where in a tree acceptances fall, TALON's Figure 3."""
    return [
        sum(1 for m in range(1, len(tree)) if tree.depths[m] == tree.depths[n] and (tree.logps[m], -m) > (tree.logps[n], -n))
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
