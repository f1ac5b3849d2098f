"""A conversation as the target's prompt ids, and the ids that end its answer."""

from __future__ import annotations

from dataclasses import dataclass

from specbench.errors import require


def chat_prompt(tokenizer, messages: list[dict]) -> list[int]:
    """Token ids of a conversation under the model's chat template (plain text without one)."""
    if tokenizer.chat_template:
        return list(
            tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
        )
    text = "\n\n".join(m["content"] for m in messages)
    return tokenizer(text).input_ids


def stop_token_ids(model, tokenizer, model_cfg: dict) -> set[int]:
    ids = set(model_cfg.get("stop_token_ids") or [])
    for source in (getattr(model, "generation_config", None), tokenizer):
        eos = getattr(source, "eos_token_id", None)
        if eos is not None:
            ids.update(eos if isinstance(eos, list) else [eos])
    return ids


# room kept after prompt + max_new_tokens for the draft tree of the last step
TREE_MARGIN = 64


@dataclass(frozen=True)
class PromptFormat:
    """A run's conversations as prompt ids that leave room in the model's context for the
    answer and the last step's draft tree (gen.truncate_prompt: keep a long prompt's tail)."""

    tokenizer: object
    context_length: int
    max_new_tokens: int
    truncate: bool

    def ids(self, messages: list[dict], sample_id: str) -> list[int]:
        ids = chat_prompt(self.tokenizer, messages)
        room = self.context_length - self.max_new_tokens - TREE_MARGIN
        if len(ids) <= room:
            return ids
        require(
            self.truncate and room > 0,
            "gen.truncate_prompt",
            f"sample {sample_id}: prompt of {len(ids)} tokens + gen.max_new_tokens={self.max_new_tokens} "
            f"does not fit the model context of {self.context_length}; set gen.truncate_prompt=true to keep its "
            f"last {max(room, 0)} tokens",
        )
        return ids[-room:]
