"""python -m specbench.run.costs prints a target's cost curves and rejects bad input in one line."""


def test_profile_command_prints_the_curves_and_rejects_bad_input():
    import sys

    from conftest import run_in_process

    args = [
        sys.executable,
        "-m",
        "specbench.run.costs",
        "method=pld",
        "hardware=cpu-fp32",
        "costs.max_n=4",
        "costs.repeats=1",
    ]
    result = run_in_process(args)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "target c=" in result.stdout and "n=4" in result.stdout and "prompt_lookup" in result.stdout
    assert "tau a step must reach against AR in" in result.stdout and "1.3x: n=2 " in result.stdout
    bad = run_in_process([sys.executable, "-m", "specbench.run.costs", "method=nope"])
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "method" in bad.stderr
    unknown = run_in_process([sys.executable, "-m", "specbench.run.costs", "foo=bar"])
    assert unknown.returncode == 2 and unknown.stderr.strip().count("\n") == 0
    assert "Could not override 'foo'" in unknown.stderr and "+foo=bar" in unknown.stderr
    usage = run_in_process([sys.executable, "-m", "specbench.run.costs", "--help"])
    assert usage.returncode == 0 and usage.stdout.startswith("`python -m specbench.run.costs")
