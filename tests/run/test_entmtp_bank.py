"""EntMTP out of the box (specbench.run.entmtp_bank): with no bank given, a run gets this
machine's bank, its task searched on first use with the run's heads and the calibration
prompts, and reused after; a bank given by path is used as it is."""

import json

import pytest
from entmtp_fixtures import small_bank

from specbench.run import entmtp_bank
from specbench.run.config import compose_config
from specbench.trees.entmtp import load_bank


@pytest.fixture
def searches(tmp_path, monkeypatch):
    """The search replaced by one that records its arguments and writes a small bank."""
    calls = []

    def search(cfg, path, budget, max_depth, prompts, tokens, min_prompts=1, exclude_limit=0):
        calls.append(
            {
                "cfg": cfg,
                "budget": budget,
                "depth": max_depth,
                "prompts": prompts,
                "tokens": tokens,
                "exclude": exclude_limit,
            }
        )
        raw = json.loads(small_bank(tmp_path / "made").read_text())
        raw["tasks"] = {cfg["dataset"]["name"]: raw["tasks"]["gsm8k"]}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(raw))

    monkeypatch.setattr("specbench.run.entmtp_search.search", search)
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "cache"))
    (tmp_path / "made").mkdir()
    return calls


def test_a_run_without_a_bank_searches_its_task_once_and_reuses_it(searches, capsys):
    cfg = compose_config(["method=entmtp", "dataset=gsm8k", "dataset.limit=5", "costs.calibration_prompts=3"])
    banked = entmtp_bank.with_bank(cfg)
    path = banked["method"]["tree"]["bank"]
    assert "gsm8k" in load_bank(path)[0] and "searched once" in capsys.readouterr().out
    (call,) = searches
    # the heads' static tree in place of the scheduler, the calibration prompts outside the 5 the run decodes
    assert call["cfg"]["method"]["tree"]["_target_"] == "specbench.trees.static.StaticTree"
    assert call["cfg"]["method"]["drafter"] == cfg["method"]["drafter"] and call["cfg"]["dataset"]["limit"] is None
    assert (call["prompts"], call["tokens"], call["exclude"]) == (3, cfg["costs"]["calibration_tokens"], 5)
    assert (call["budget"], call["depth"]) == (entmtp_bank.BUDGET, entmtp_bank.MAX_DEPTH)
    # the scheduler's other methods read the same bank: no second search
    tau = entmtp_bank.with_bank(compose_config(["method=entmtp_tau", "dataset=gsm8k", "dataset.limit=5"]))
    assert tau["method"]["tree"]["bank"] == path and len(searches) == 1
    # another task is searched into the same file; another temperature has a bank of its own
    assert (
        entmtp_bank.with_bank(compose_config(["method=entmtp", "dataset=humaneval"]))["method"]["tree"]["bank"] == path
    )
    warm = compose_config(["method=entmtp", "dataset=gsm8k", "gen.temperature=0.2"])
    assert entmtp_bank.with_bank(warm)["method"]["tree"]["bank"] != path and len(searches) == 3
    assert searches[1]["exclude"] == 0  # no limit: the whole dataset is decoded, nothing left out


def test_a_given_bank_and_other_methods_are_left_alone(searches, tmp_path):
    given = small_bank(tmp_path)
    cfg = compose_config(["method=entmtp", f"method.tree.bank={given}"])
    assert entmtp_bank.with_bank(cfg) == cfg
    hydra = compose_config(["method=hydra"])
    assert entmtp_bank.with_bank(hydra) == hydra and not searches
