"""A separate small LM that shares the target's tokenizer (SpS).

It keeps its own KV cache of committed context plus the draft nodes it has read, so
each expansion costs one draft forward over only the new nodes.

A draft may have its own smaller output vocabulary (`draft_vocab` in its weights; see
DraftVocab): a CPU draft's cost is mostly its output layer, so the rows for tokens the
target rarely writes are better spent on width or layers. Such a draft reads every token
through the target's own input embedding, shared in memory and not shipped.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModelForCausalLM

from specbench.engine.kernels import Compiled
from specbench.engine.lean import cast, make_lm
from specbench.engine.parts import Drafter, DrafterLoader
from specbench.engine.transfer import to_device
from specbench.engine.tree import DraftTree
from specbench.errors import ConfigError
from specbench.models import registry
from specbench.models.medusa import check_draft_vocab, scattered

WEIGHTS_FILE = "model.safetensors"


class DraftVocab:
    """A draft's own output vocabulary: its output rows are the target ids `ids` (sorted).
    It never drafts another token, so at T > 0 its distribution over the target's
    vocabulary is zero outside `ids`, and verification stays lossless."""

    def __init__(self, ids: torch.Tensor, target_vocab_size: int):
        self.ids, self.target_vocab_size = ids, target_vocab_size

    def to_target(self, logits: torch.Tensor) -> torch.Tensor:
        """Draft logits [..., len(ids)] -> target logits [..., V], -inf outside `ids`."""
        return scattered(logits, self.ids, self.target_vocab_size)

    def rows(self, target_ids: torch.Tensor, missing: int) -> torch.Tensor:
        """Each target id's output row, `missing` where the draft cannot draft it (what a
        trainer's labels and a held-out score need)."""
        index = torch.full((self.target_vocab_size,), missing, dtype=torch.long)
        index[self.ids] = torch.arange(len(self.ids))
        return index[target_ids]


def check_own_vocab(ids: torch.Tensor, draft_config, target_config, weights: Path, key: str) -> None:
    """Refuse, in one line, a draft vocabulary that does not fit the draft or the target
    (beyond what heads' draft vocabularies must meet: check_draft_vocab)."""
    check_draft_vocab(ids, target_config.vocab_size, weights, key)
    where = f"{key}: {weights}"
    if ids.dim() != 1 or len(ids) != draft_config.vocab_size:
        raise ConfigError(
            f"{where}: draft_vocab must be int64 target ids, one per output row ({draft_config.vocab_size})"
        )
    if bool((ids[1:] <= ids[:-1]).any()):
        raise ConfigError(f"{where}: draft_vocab must be sorted, distinct target ids below {target_config.vocab_size}")
    if draft_config.hidden_size != target_config.hidden_size:
        raise ConfigError(
            f"{where}: a draft with its own vocabulary reads the target's input embedding, so needs its width "
            f"{target_config.hidden_size} (it has {draft_config.hidden_size})"
        )


def own_vocab_draft(directory: Path, target: torch.nn.Module, key: str) -> tuple[torch.nn.Module, DraftVocab] | None:
    """(draft, its vocabulary) for a draft whose weights hold `draft_vocab`, its input
    embedding the target's own; None for a plain draft LM."""
    weights = directory / WEIGHTS_FILE
    if not weights.is_file():
        return None
    try:
        with safe_open(weights, "pt") as f:
            if "draft_vocab" not in f.keys():
                return None
        state = load_file(weights)
    except (SafetensorError, OSError) as error:
        raise ConfigError(f"{key}: {weights}: not a readable safetensors file ({error})") from None
    ids = state.pop("draft_vocab")
    config = AutoConfig.from_pretrained(directory)
    check_own_vocab(ids, config, target.config, weights, key)
    draft = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    missing, unexpected = draft.load_state_dict(state, strict=False)
    if unexpected or set(missing) != {"model.embed_tokens.weight"}:
        raise ConfigError(
            f"{key}: {weights}: weights do not fit its config.json "
            f"(missing {sorted(set(missing) - {'model.embed_tokens.weight'})[:3]}, unexpected {unexpected[:3]})"
        )
    cast(draft, target.dtype, target.device)
    draft.model.embed_tokens = target.get_input_embeddings()
    return draft.eval(), DraftVocab(ids.to(target.device), target.config.vocab_size)


def load_draft(
    entry: dict, target: torch.nn.Module, dtype: str, device: str, key: str
) -> tuple[torch.nn.Module, DraftVocab | None]:
    """The draft LM a model entry names, with its own vocabulary when it has one."""
    own = own_vocab_draft(Path(registry.resolve(entry, key)), target, key)
    return own if own is not None else (registry.load_model(entry, dtype, device, key=key), None)


def check(model: dict | None) -> None:
    """What build() refuses before any model loads (methods.check)."""
    if not model:
        raise ConfigError(
            "method.drafter.model: this target has no default SpS draft; "
            "set method.drafter.model={name:my-draft,path:/dir/of/a/draft/LM} (it must share the target's tokenizer)"
        )
    if model.get("path"):
        registry.resolve(model, "method.drafter.model")


def build(target: torch.nn.Module, hardware: dict, compiled: Compiled, model: dict | None) -> "SmallLMDrafter":
    """The drafter named by a method config: `model` is a model entry (see registry)."""
    check(model)
    draft, vocab = load_draft(model, target, hardware["dtype"], hardware["device"], "method.drafter.model")
    return SmallLMDrafter(draft, target.config.vocab_size, hardware.get("forward", "auto"), compiled, vocab)


load = DrafterLoader(build, check)


class SmallLMDrafter(Drafter):
    always_proposes = True

    def __init__(
        self,
        model: torch.nn.Module,
        target_vocab_size: int,
        forward: str = "hf",
        compiled: Compiled = Compiled(),
        vocab: DraftVocab | None = None,
    ):
        """`compiled`: the target's choice (packed weights, fp32 attention, int8 drafter
        weights), run the same way; `vocab`: the draft's own vocabulary, when it has one."""
        self.lm = make_lm(model, forward, compiled, draft=True)
        self.target_vocab_size = target_vocab_size
        self.vocab = vocab
        self._node_logits: dict[int, torch.Tensor] = {}

    @property
    def forwards(self) -> int:
        return self.lm.forwards

    def begin(self, prompts: list[list[int]], features=None) -> None:
        self.lm.reset(len(prompts))
        self._node_logits = [{} for _ in prompts]
        self._levels: list[tuple[torch.Tensor, torch.Tensor]] | None = None  # this step's levels fed as device tensors

    def logits(
        self, contexts: list[list[int]], trees: list[DraftTree], nodes: list[list[int]]
    ) -> list[torch.Tensor | None]:
        """Rows read the context they have not seen (first step after a commit) and the
        asked nodes' uncached ancestors, all rows in one forward."""
        needed = [
            sorted({a for n in row_nodes for a in tree.path_to(n)} - known.keys())
            for tree, row_nodes, known in zip(trees, nodes, self._node_logits)
        ]
        if any(needed):
            tails = [
                context[self.lm.layout.lengths[b] :] if row_needed and not self.lm.layout.node_columns[b] else []
                for b, (context, row_needed) in enumerate(zip(contexts, needed))
            ]
            rows = self.lm.forward(tails, trees, needed)
            for known, row_needed, row_logits in zip(self._node_logits, needed, rows):
                if row_needed:
                    known.update(zip(row_needed, self._in_target_vocab(row_logits)))
        return [
            torch.stack([known[n] for n in row_nodes]) if row_nodes else None
            for known, row_nodes in zip(self._node_logits, nodes)
        ]

    grows_on_device = True

    def root_logits(self, contexts: list[list[int]], roots: list[int]) -> torch.Tensor:
        """The host path's first forward (each row's unseen context, then its root); the
        levels after it are fed as device tensors (level_logits)."""
        logits = torch.cat(self.logits(contexts, [DraftTree.root(root) for root in roots], [[0]] * len(roots)))
        layout = self.lm.layout
        attended = torch.zeros(len(roots), 1, layout.columns, dtype=torch.bool)
        attended[torch.arange(len(roots)), 0, torch.tensor([cached[0] for cached in layout.node_columns])] = True
        self._attended, self._levels = to_device(attended, logits.device), []
        return logits

    def level_logits(self, tokens: torch.Tensor, parents: torch.Tensor) -> torch.Tensor:
        """One draft forward over the level, its mask and positions built on the device; the
        level is kept (tokens and parent slots) to find the accepted nodes at commit."""
        batch, width = tokens.shape
        feed, self._attended = self.lm.layout.level_feed(self._attended, parents, depth=len(self._levels) + 1)
        self._levels.append((tokens, parents))
        logits = self.lm.forward_level(tokens, feed)
        return self._in_target_vocab(logits.reshape(batch * width, -1)).reshape(batch, width, -1)

    def commit(self, trees: list[DraftTree], paths: list[list[int]], features=None) -> None:
        fed = (
            self._fed_paths(trees, paths)
            if self._levels is not None
            else [tree.drafted_ids(path) for tree, path in zip(trees, paths)]
        )
        self.lm.commit(fed)
        self._node_logits = [{} for _ in trees]
        self._levels = None

    def _fed_paths(self, trees: list[DraftTree], paths: list[list[int]]) -> list[list[int]]:
        """Each accepted path (root first) as the ids its nodes were cached under in a tree
        grown on the device (root 0, then the order fed), as far as they were fed. The fed
        levels come back in one transfer; a path's node at depth d is the node of level d
        under its parent's slot with its token (siblings' tokens differ)."""
        if not self._levels:
            return [[0] for _ in paths]
        widths = [level_tokens.shape[1] for level_tokens, _ in self._levels]
        fed_tokens, fed_parents = torch.stack([torch.cat(part, dim=1) for part in zip(*self._levels)]).tolist()
        out = []
        for tree, path, row_tokens, row_parents in zip(trees, paths, fed_tokens, fed_parents):
            ids, slot, offset = [0], 0, 0
            for node, width in zip(path[1:], widths):
                found = next(
                    (
                        i
                        for i in range(offset, offset + width)
                        if row_tokens[i] == tree.tokens[node] and row_parents[i] == slot
                    ),
                    None,
                )
                if found is None:
                    break
                ids.append(1 + found)
                slot, offset = found - offset, offset + width
            out.append(ids)
        return out

    def keep(self, rows: list[int]) -> None:
        self.lm.keep(rows)

    def _in_target_vocab(self, logits: torch.Tensor) -> torch.Tensor:
        """Drafts may pad their vocabulary differently from the target, or have their own: align the ids."""
        if self.vocab is not None:
            return self.vocab.to_target(logits)
        extra = self.target_vocab_size - logits.shape[-1]
        if extra <= 0:
            return logits[:, : self.target_vocab_size]
        return torch.nn.functional.pad(logits, (0, extra), value=float("-inf"))
