"""The prompts that calibrate a run's tree shapes: English chat turns, or a corpus source's held-out prompts."""

import pytest


def test_calibration_prompts_are_english_chat(monkeypatch):
    from specbench.data import calibration, sharegpt

    english = ["Can you coach me through each of these points?", "Tell me about the negatives of farming meat"]
    # no English function words
    other = [
        "estoy en 6to semestre de mecatronica, necesito un nombre para mi equipo, asi que quiero",
        "我需要建立一個powerpoint你幫我摘要一篇內容分配每一頁的標題和應該要有的內容，可以嗎？謝謝你的幫忙",
        "SELECT id, name, email FROM users WHERE active ORDER BY name",
    ]
    monkeypatch.setattr(
        sharegpt, "conversations", lambda: [{"conversations": [{"from": "human", "value": t}]} for t in other + english]
    )
    monkeypatch.setattr(
        calibration, "evaluation_index", lambda: type("Index", (), {"overlaps": lambda self, text: False})()
    )
    monkeypatch.setattr(calibration, "chat_prompt", lambda tokenizer, messages: messages[0]["content"])
    assert sorted(calibration.calibration_prompts(None, count=2)) == sorted(english)


@pytest.mark.parametrize("kind", ["code", "math"])
def test_code_and_math_calibration_prompts_are_the_held_out_ones(monkeypatch, kind):
    """Code and math datasets calibrate on the prompts of their corpus source whose answers the
    committed corpus holds out of every drafter's training text, asked as HumanEval and GSM8K
    ask; a batch bigger than the set repeats prompts; the cache key names the kind."""
    import json

    from specbench.data import calibration
    from specbench.data.benchmarks import GSM8K_INSTRUCTION, HUMANEVAL_INSTRUCTION
    from specbench.train.prompts.sources import COMMITTED_PACKS, prompt_key, source_texts

    source, name = calibration.HELD_OUT_SOURCES[kind]
    monkeypatch.setattr(calibration, "chat_prompt", lambda tokenizer, messages: messages[0]["content"])
    held_out = set(json.loads((COMMITTED_PACKS / name).read_text()))
    prompts = calibration.calibration_prompts(None, count=6, kind=kind)
    instruction = HUMANEVAL_INSTRUCTION if kind == "code" else GSM8K_INSTRUCTION
    assert len(set(prompts)) == 6 and all(prompt_key(p) in held_out and p.startswith(instruction) for p in prompts)
    assert calibration.calibration_prompts(None, count=6, kind=kind) == prompts  # seeded
    every = calibration.calibration_prompts(None, count=len(held_out) + 3, kind=kind)
    assert len(every) == len(held_out) + 3 and len(set(every)) == len(held_out)
    assert {prompt_key(p) for p in source_texts(source)} >= held_out
    assert calibration.calibration_id(6, kind=kind) != calibration.calibration_id(6)
