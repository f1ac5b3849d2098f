"""The compile probe: it times what the method runs, only the parts a run needs, and keeps a contended record."""

import pytest
from cost_fixtures import busy

from specbench import costs
from specbench.costs import cache
from specbench.engine import methods
from specbench.engine.candidates import DRAFTING_OFF


def test_a_probe_times_only_the_parts_a_run_needs_and_keeps_a_contended_record(tmp_path, monkeypatch):
    from specbench.costs import contention

    monkeypatch.setenv("SPECBENCH_CONTENDED_CORES", "0.25")
    monkeypatch.setattr(contention, "watch", busy(1.4))
    monkeypatch.setattr(contention, "idle_now", lambda: False)
    timed = []

    def measure(parts):
        timed.append(parts)
        return {"probe": {"plain": {p: 1.0 for p in parts}}}

    path, quiet = tmp_path / "probe.json", {"log": lambda *_: None}
    record, seconds = cache.measured_parts(path, {"cpu": "x"}, measure, ["1"], **quiet)
    assert record["contended_cores"] == 1.4 and path.is_file() and seconds is not None
    record, seconds = cache.measured_parts(path, {"cpu": "x"}, measure, ["1", "16"], **quiet)
    assert timed == [["1"], ["16"]] and record["probe"]["plain"] == {"1": 1.0, "16": 1.0}  # merged, not replaced
    assert cache.measured_parts(path, {"cpu": "x"}, measure, ["16"], **quiet)[1] is None and len(timed) == 2
    monkeypatch.setattr(contention, "watch", busy(0.0))
    monkeypatch.setattr(contention, "idle_now", lambda: True)
    record, _ = cache.measured_parts(path, {"cpu": "x"}, measure, ["16"], **quiet)
    assert timed[-1] == ["1", "16"] and record["contended_cores"] == 0.0  # refined: every part it held, timed again
    cache.measured_parts(path, {"cpu": "y"}, measure, ["16"], **quiet)
    assert timed[-1] == ["16"]  # another machine's record is not this one's


@pytest.mark.parametrize(
    "method, parts",
    [
        ({"drafter": None, "tree": DRAFTING_OFF}, ["n=1"]),  # AR: one-token forwards, no drafter projections
        # PLD drafts without layers: no int8 projections to time; its gamma = 5 chain verifies
        # at most 6 tokens, so no wider forward is timed
        (
            {
                "drafter": {"_target_": "specbench.drafters.prompt_lookup.load"},
                "tree": {"_target_": "specbench.trees.chain.Chain"},
            },
            [f"n={n}" for n in (1, 2, 4, 6)],
        ),
        (
            {
                "drafter": {"_target_": "specbench.drafters.eagle3.load"},
                "tree": {"_target_": "specbench.trees.eagle.EagleDynamicTree"},
            },
            [*(f"n={n}" for n in (1, 2, 4, 8, 16, 60)), "int8"],  # total_tokens = 60
        ),
    ],
)
def test_the_compile_probe_times_what_the_method_runs(method, parts, tmp_path, monkeypatch):
    from conftest import tiny_llama

    from specbench.costs import compile as compile_rule

    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path))
    monkeypatch.setattr(
        compile_rule, "measure", lambda model, forward, sizes, **_: {"plain": {str(n): 1.0 for n in sizes}}
    )
    monkeypatch.setattr(
        compile_rule,
        "measure_int8",
        lambda model, packed: {k: {str(n): 1.0 for n in compile_rule.INT8_ROWS} for k in ("float", "int8")},
    )
    model = tiny_llama(0)
    model.config.save_pretrained(tmp_path / "tiny")  # caches are named by the weights' files: here config.json alone
    cfg = {
        "model": {"name": "tiny", "path": str(tmp_path / "tiny")},
        "hardware": {"dtype": "float32", "device": "cpu", "threads": 1},
        "engine": {},
        "method": method,
    }
    _, record = costs.target_lm(model, cfg, cfg["hardware"], drafter_layers=methods.drafter_layers(method))
    assert record["parts"] == parts


@pytest.mark.parametrize("fp16_ms, int8_timed", [(1.0, False), (3.0, True)])
def test_int8_drafter_projections_are_timed_only_where_fp16_weights_lose(fp16_ms, int8_timed, tmp_path, monkeypatch):
    """fp16 weights run the drafters on fp16 weights too, so where they win the int8 part is
    never timed; where they lose, the forward keeps the model's dtype and int8 is timed."""
    from conftest import tiny_llama

    from specbench.costs import compile as compile_rule

    monkeypatch.setattr(compile_rule, "has_fp16_weights", lambda: True)
    monkeypatch.setattr(
        compile_rule,
        "measure",
        lambda model, forward, sizes, **_: {
            kind: {str(n): ms for n in sizes} for kind, ms in (("plain", 2.0), ("fp16", fp16_ms))
        },
    )
    int8_calls = []
    monkeypatch.setattr(
        compile_rule,
        "measure_int8",
        lambda model, packed: (
            int8_calls.append(1)
            or {k: {str(n): ms for n in compile_rule.INT8_ROWS} for k, ms in (("float", 2.0), ("int8", 1.0))}
        ),
    )
    chosen, record = compile_rule.resolve(
        "auto",
        tiny_llama(0),
        "tiny",
        {"device": "cpu", "threads": 1},
        tmp_path,
        log=lambda *_: None,
        fp16="auto",
        sizes=(1, 2, 4),
        drafter_layers=True,
    )
    assert chosen.fp16_weights is not int8_timed and ("int8" in record["parts"]) is int8_timed
    assert len(int8_calls) == int(int8_timed) and (chosen.int8_drafts_below > 0) is int8_timed
