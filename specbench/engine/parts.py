"""The three parts of a method and what the loop asks of each.

Everything is defined over a batch: row b of every list belongs to the b-th sequence
still decoding (rows that finish leave the batch; `keep` tells the parts which stay).
Batch size 1 is the same path with one row.

Drafter, TreePolicy and Verifier are base classes: every part subclasses one, overrides
its one abstract method, and overrides the per-batch hooks only when it keeps state
across steps. The hooks are no-ops here so the loop calls them unconditionally.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Callable, Protocol

import torch

from specbench.engine.kernels import Compiled
from specbench.engine.sampling import Sampling
from specbench.engine.tree import DraftTree


class Drafter(ABC):
    """Given each row's committed context and draft tree, next-token logits for some nodes."""

    forwards: int = 0  # draft forward passes so far (N_q); one batched forward counts once
    feature_layers: tuple[int, ...] = ()  # target hidden_states it reads (empty: none)
    # logits over the vocabulary at every node asked (a model's, never None): a policy's
    # tree then has the size its settings give (TreePolicy.deepest)
    always_proposes: bool = False

    def begin(self, prompts: list[list[int]], features: list[torch.Tensor] | None) -> None:
        """Start new sequences; `features[b]` [len(prompts[b]), .] are the target's hidden
        states at `feature_layers` for row b's prompt, None when it reads none."""

    @abstractmethod
    def logits(
        self, contexts: list[list[int]], trees: list[DraftTree], nodes: list[list[int]]
    ) -> list[torch.Tensor | None]:
        """Per row, logits [len(nodes[b]), V] over the target vocabulary for the token after
        each node, or None when the row asks for no nodes or the drafter has nothing to
        propose for it. One call is (at most) one draft forward over all rows."""

    # A drafter that can also be fed whole levels as device tensors sets this and implements
    # root_logits and level_logits: a tree policy whose shape follows the draft values
    # (EAGLE-2/3's dynamic tree) then keeps the growing tree on the device and reads it back
    # once per step, instead of once per level (a GPU waits for every read).
    grows_on_device: bool = False

    def root_logits(self, contexts: list[list[int]], roots: list[int]) -> torch.Tensor:
        """[B, V] logits after each row's root: the first level of a tree grown on the device."""
        raise NotImplementedError(f"{type(self).__name__} grows trees through `logits` only")

    def level_logits(self, tokens: torch.Tensor, parents: torch.Tensor) -> torch.Tensor:
        """The next level of that tree: `tokens` [B, w] (long, on the device) are children of
        the nodes at `parents` [B, w] in the level fed before (the root's level has one node);
        [B, w, V] logits after each."""
        raise NotImplementedError(f"{type(self).__name__} grows trees through `logits` only")

    def commit(self, trees: list[DraftTree], paths: list[list[int]], features: list[torch.Tensor] | None) -> None:
        """The target accepted `paths[b]` (root first) of `trees[b]`; `features[b]` are the
        target's hidden states at that path's nodes, from the forward that verified them.
        Called after every step, also one whose policy drafted nothing (a tree of the root
        alone, the drafter not asked): what was accepted there is read at the next call."""

    def keep(self, rows: list[int]) -> None:
        """Only these rows (ascending indices into the current batch) go on decoding."""


class StepCosts(Protocol):
    """Measured forward times (ms) at batch size `batch`, `context` cached rows and `n` new
    rows per sequence (specbench.costs)."""

    def target_ms(self, batch: int, context: float, n: int) -> float: ...

    def draft_ms(self, batch: int, context: float, n: int) -> float: ...


@dataclass(frozen=True)
class NestedStep:
    """One verification step as a smaller candidate shape would have taken it, read off a
    step of a wider candidate whose tree contains the smaller one's (TreePolicy.nested_step)."""

    accepted: int  # draft tokens the target accepts in the smaller tree (the wider tree's path, cut)
    nodes: int  # tokens the smaller tree verifies, root included
    draft_forwards: int
    reach: int  # the most draft tokens one step of the smaller shape can accept (its depth)


class TreePolicy(ABC):
    """Builds each row's draft tree. Policies that keep state across steps (CAST's
    acceptance buffers, EntMTP's scheduler) override `begin`, `observe` and/or `keep`;
    a policy never touches the engine or the model.

    A policy whose keys may be `auto` lists the shapes they choose among in AUTO_CANDIDATES
    (smallest first; one dict of values a candidate, the same keys in each; empty: no key
    can be auto; costs/autotune.py calibrates them), and may override distinct_candidate so
    candidates that build the same tree are written alike and calibrated once.

    SIZE_KEYS names the integer settings that count tokens, nodes, levels or children
    (gamma, top_k, depth, ...): run/bounds.py bounds each, and `widest`, by the room the
    model's context leaves, before anything is loaded or timed.

    COST_AWARE marks a policy that sizes its trees from this machine's measured costs (CAST,
    EntMTP's searched trees): a smaller tree than a baseline's is then the method at work,
    which a replication's regime gate does not hold against it."""

    AUTO_CANDIDATES: list[dict] = []
    COST_AWARE = False
    SIZE_KEYS: tuple[str, ...] = ()

    @staticmethod
    def distinct_candidate(cfg: dict) -> dict:
        """A candidate's tree config as written for the tree it builds; as given here."""
        return cfg

    def nested_step(self, tree: DraftTree, path: list[int], draft_forwards: int, context: int) -> NestedStep | None:
        """This shape's view of a step where the widest candidate of the same policy drafted
        `tree` (in `draft_forwards` drafter calls) after `context` committed tokens and the
        target accepted `path` (root first), where this shape's tree is read off the wider
        one's; None (the default) where it is not, and calibration then decodes every
        candidate instead of predicting it (costs/pilot.py). The steps of one decode come in
        order after `begin`, so a policy with state across steps carries it (CAST)."""
        return None

    def widest(self) -> int | None:
        """The most tokens (root included) one row's verification forward holds, where the
        settings fix it; None where the tree's size follows the draft. `hardware.dtype=auto`
        weighs the dtypes at this width."""
        return None

    def deepest(self) -> int | None:
        """The most draft tokens one step can accept (the tree's depth) where the settings fix
        both that and the tree's size: with a drafter that always proposes, every step then
        verifies exactly `widest` tokens. None where the size follows the draft or the costs
        (CAST, OPT-Tree, Lookahead). It bounds what the shape can gain: calibration does not
        decode a shape that could not beat AR even accepting this many every step
        (costs/autotune.py `ceiling`)."""
        return None

    def begin(self, batch_size: int, costs: StepCosts | None) -> None:
        """A new batch of `batch_size` rows, before its first step; `costs` is the
        method's measured cost profile, None when it has none."""

    @abstractmethod
    def grow(
        self,
        drafter: Drafter | None,
        contexts: list[list[int]],
        roots: list[int],
        sampling: Sampling,
        generators: list[torch.Generator | None],
    ) -> list[DraftTree]:
        """One draft tree per row, rooted at that row's pending token `roots[b]`."""

    def observe(self, trees: list[DraftTree], paths: list[list[int]], logits: list[torch.Tensor]) -> None:
        """After every verification: each row's tree, its accepted path (root first) and
        the target logits at every node of the tree, as the verifier saw them."""

    def keep(self, rows: list[int]) -> None:
        """Only these rows (ascending indices into the current batch) go on decoding."""


@dataclass
class Acceptance:
    path: list[int]  # accepted nodes, root first
    next_token: int  # the bonus or correction token appended after the path
    # what a verifier wants recorded about its decisions: counts (int, summed per run)
    # and observations (lists, concatenated), e.g. MARS's relaxed acceptances and logits
    notes: dict = field(default_factory=dict)


class Verifier(ABC):
    """Decides every row of the batch at once (each row's tree and logits are its own): what
    a verifier needs of the target's logits is computed for every node of every row on the
    device and read back in one transfer (`read_back`), then each row's path is walked on
    the host, so a step waits for the device a fixed number of times whatever the batch
    size and tree size."""

    @abstractmethod
    def accept_rows(
        self,
        trees: list[DraftTree],
        logits: list[torch.Tensor],
        sampling: Sampling,
        generators: list[torch.Generator | None],
    ) -> list[Acceptance]:
        """Per row, given target logits at every node of its tree, the accepted path and the next token."""

    def accept(
        self, tree: DraftTree, logits: torch.Tensor, sampling: Sampling, generator: torch.Generator | None
    ) -> Acceptance:
        """One row: the batch of one."""
        return self.accept_rows([tree], [logits], sampling, [generator])[0]


def read_back(trees: list[DraftTree], *columns: torch.Tensor) -> list[list[list[float]]]:
    """Per-node device columns (each [sum of the trees' sizes], rows' nodes in order) read to
    the host in one transfer; per row, per column, that row's values. Float64 carries token
    ids and counts exactly."""
    values = torch.stack([c.double() for c in columns]).tolist()
    out, start = [], 0
    for tree in trees:
        out.append([column[start : start + len(tree)] for column in values])
        start += len(tree)
    return out


def nothing_to_check(**params) -> None:
    """For a drafter whose parameters nothing can refuse before its load."""


@dataclass(frozen=True)
class DrafterLoader:
    """What a drafter config's `_target_` names (each drafter module's `load`), so a
    drafter declares both halves of its interface where it is defined.
    build(target, hardware, compiled, **params): the drafter for `target`, its layers run as
    `compiled` says the target's forward runs;
    check(**params): the ConfigError build would raise for these parameters, raised before
    any model loads (methods.check);
    layers: whether the drafter runs linear layers (engine.int8_drafts can put them on int8
    weights, so the compile probe times that only for a drafter that has them)."""

    build: Callable[..., Drafter]
    check: Callable[..., None] = nothing_to_check
    layers: bool = True

    def __call__(self, target: torch.nn.Module, hardware: dict, compiled: Compiled, **params) -> Drafter:
        return self.build(target, hardware, compiled, **params)
