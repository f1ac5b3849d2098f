"""The one decoding loop every method runs through.

prefill -> repeat: policy builds a tree (draft forwards), the target verifies all of
it in one forward, the verifier picks the accepted path and one more token, and both
caches keep exactly that path.
"""

from __future__ import annotations

import time
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
    seconds: float = 0.0  # prefill included


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
    `on_step(n_new_tokens)` is called after every verification (progress display)."""
    start = time.perf_counter()
    drafter = method.drafter
    target.reset()
    target.feature_layers = drafter.feature_layers if drafter is not None else ()
    with torch.inference_mode():
        first = sampling.pick(target.forward(context=prompt)[-1], generator)
        if drafter is not None:
            drafter.begin(prompt, target.features)
        draft_forwards_before = drafter.forwards if drafter is not None else 0
        new = [first]
        accept_lengths = []
        done = _finished(new, limits, decode)
        while not done:
            context = prompt + new[:-1]
            tree = method.policy.build(drafter, context, new[-1], sampling, generator)
            logits = target.forward(tree=tree, nodes=range(len(tree)))
            accepted = method.verifier.accept(tree, logits, sampling, generator)
            target.commit(accepted.path)
            if drafter is not None:
                features = target.features[accepted.path] if target.features is not None else None
                drafter.commit(tree, accepted.path, features)
            new += [tree.tokens[n] for n in accepted.path[1:]] + [accepted.next_token]
            accept_lengths.append(len(accepted.path))
            done = _finished(new, limits, decode, len(accepted.path))
            if on_step is not None:
                on_step(len(accepted.path))
    new, stop = _truncate(new, limits, decode)
    return Generation(
        ids=new,
        stop_reason=stop,
        target_forwards=len(accept_lengths),
        draft_forwards=(drafter.forwards - draft_forwards_before) if drafter is not None else 0,
        accept_lengths=accept_lengths,
        seconds=time.perf_counter() - start,
    )


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
