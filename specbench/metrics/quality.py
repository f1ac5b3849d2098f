"""Output-quality metrics of a run, per dataset (`metrics:` in conf/dataset/<name>.yaml).

Each takes the samples and, per sample, the decoded turn texts of one method, and
returns a dict of scores; `score` runs the dataset's list and puts them in the summary."""

from __future__ import annotations

import re
from collections.abc import Callable

from specbench.data.questions import Sample

NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def gsm8k_final_number(text: str) -> float | None:
    """The answer GSM8K is graded on: the first number after the first '####' (as the
    MARS evaluation does; a model that runs on past its answer is graded on the answer),
    else the last number in the text; commas, currency signs and units are ignored."""
    marker = text.find("####")
    if marker >= 0:
        found = NUMBER.search(text, marker)
        if found:
            return _as_number(found.group())
    numbers = NUMBER.findall(text)
    return _as_number(numbers[-1]) if numbers else None


def _as_number(token: str) -> float | None:
    try:
        return float(token.replace(",", ""))
    except ValueError:
        return None


def gsm8k_accuracy(samples: list[Sample], texts: list[list[str]]) -> dict:
    """Exact match of the final number of the answer with the reference's '#### n'."""
    hits = []
    for sample, turns in zip(samples, texts):
        expected = gsm8k_final_number("\n".join(sample.reference))
        got = gsm8k_final_number(turns[-1])
        hits.append(expected is not None and got is not None and abs(got - expected) < 1e-6)
    return {"gsm8k_accuracy": sum(hits) / len(hits), "gsm8k_scored": len(hits)} if hits else {}


def rouge_l(samples: list[Sample], texts: list[list[str]]) -> dict:
    """Mean ROUGE-L F1 (rouge-score, Porter stemming) of the answer against the reference
    (the best of several references); samples without a reference are not scored."""
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    scores = [
        max(scorer.score(reference, turns[-1])["rougeL"].fmeasure for reference in sample.reference)
        for sample, turns in zip(samples, texts)
        if sample.reference
    ]
    return {"rouge_l": sum(scores) / len(scores), "rouge_l_scored": len(scores)} if scores else {}


def bleu_chrf(samples: list[Sample], texts: list[list[str]]) -> dict:
    """Corpus BLEU and chrF (character n-grams, beta = 2) from sacrebleu's defaults."""
    import sacrebleu

    pairs = [(turns[-1].strip(), sample.reference[0]) for sample, turns in zip(samples, texts) if sample.reference]
    if not pairs:
        return {}
    hypotheses, references = [h for h, _ in pairs], [[r for _, r in pairs]]
    return {
        "bleu": sacrebleu.corpus_bleu(hypotheses, references).score,
        "chrf": sacrebleu.corpus_chrf(hypotheses, references, beta=2).score,
        "translation_scored": len(pairs),
    }


def bleu_statistics(answer: str, reference: str) -> list[int]:
    """One answer's BLEU sufficient statistics (matched and total n-grams for n = 1..4, its
    length, the reference's), tokenised as corpus BLEU tokenises: corpus BLEU of any set of
    answers is a function of their sum, so a resample sums instead of re-scoring."""
    import sacrebleu

    score = sacrebleu.sentence_bleu(answer.strip(), [reference])
    return [*score.counts, *score.totals, score.sys_len, score.ref_len]


def corpus_bleu_of(statistics: list[list[int]]) -> float:
    """sacrebleu's corpus BLEU (its defaults: 4-grams, exp smoothing) from bleu_statistics of
    the answers, as `bleu_chrf` computes it from their texts."""
    from sacrebleu.metrics import BLEU

    total = [sum(column) for column in zip(*statistics)]
    return BLEU.compute_bleu(total[0:4], total[4:8], total[8], total[9], smooth_method="exp").score


def humaneval_pass(samples: list[Sample], texts: list[list[str]]) -> dict:
    """pass@1 by execution (see specbench.metrics.humaneval)."""
    from specbench.metrics import humaneval

    return humaneval.score(samples, texts)


def mt_bench_judge(samples: list[Sample], texts: list[list[str]]) -> dict:
    """LLM-judge score (1-10), when a judge endpoint is configured."""
    from specbench.metrics import judge

    return judge.score(samples, texts)


METRICS: dict[str, Callable[[list[Sample], list[list[str]]], dict]] = {
    f.__name__: f for f in (gsm8k_accuracy, rouge_l, bleu_chrf, humaneval_pass, mt_bench_judge)
}


def score(names: list[str], samples: list[Sample], texts: list[list[str]]) -> dict:
    """The dataset's metrics on one method's outputs, merged into one dict."""
    result = {}
    for name in names:
        result.update(METRICS[name](samples, texts))
    return result
