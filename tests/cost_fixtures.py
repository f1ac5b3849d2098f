"""Hand-made cost curves and profiles, CPU descriptions and calibration helpers the cost tests share."""

from conftest import CALIBRATION_TOKENS, MIN_GAIN

from specbench.costs.autotune import Calibration
from specbench.costs.profile import CostProfile, Curve
from specbench.engine.sampling import Sampling


def flat_curve(ms_at_1: float, per_token: float, max_n: int = 64) -> Curve:
    row = [ms_at_1 + per_token * (n - 1) for n in range(1, max_n + 1)]
    return Curve(contexts=[128], max_n=max_n, ms=[row], spread=[[0.0] * max_n])


def synthetic_profile(per_token: float, drafter_ms: float = 0.0, base: float = 10.0) -> CostProfile:
    key = {"model": "tiny", "dtype": "float32", "fingerprint": {"device": "cpu", "cpu_model": "test"}}
    drafters = {"d": flat_curve(drafter_ms, 0.0)} if drafter_ms else {}
    return CostProfile(key=key, target=flat_curve(base, per_token), drafters=drafters)


def busy(others: float):
    """contention.watch as it reads a machine where others keep `others` cores busy."""
    from contextlib import contextmanager

    from specbench.costs import contention

    @contextmanager
    def watch():
        yield contention.Usage(others=others)

    return watch


def calibration(prompts: list, cache, batch_size: int = 1) -> Calibration:
    """Shape calibration on `prompts` (greedy, the tests' token budget and min_gain), cached
    under `cache`, quiet."""
    return Calibration(
        lambda: prompts,
        "test-prompts",
        Sampling(),
        frozenset(),
        cache,
        "d",
        weights="",
        max_new_tokens=CALIBRATION_TOKENS,
        batch_size=batch_size,
        min_gain=MIN_GAIN,
        log=lambda *_: None,
    )
