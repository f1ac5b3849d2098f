"""A machine's fingerprint (CPU model and matmul flags, ISA caps) and how busy its other cores are."""

import torch

from specbench.costs import fingerprint

AVX2_CPUINFO = (
    "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\nmodel name\t: AMD EPYC\nflags\t\t: "
    "fpu sse avx avx2 fma bmi2\n"
)


AMX_CPUINFO = (
    "model name\t: Intel(R) Xeon(R) Platinum 8480+\nflags\t\t: avx2 fma avx512f avx512_bf16 amx_bf16 amx_tile\n"
)


def test_fingerprint_names_the_cpu_and_its_matmul_flags():
    avx2 = fingerprint.cpu_info(AVX2_CPUINFO)
    assert avx2["cpu_model"] == "AMD EPYC" and avx2["isa"] == ["avx2", "fma"] and avx2["cpu_family_model"] == "25/1"
    amx = fingerprint.cpu_info(AMX_CPUINFO)
    assert {"avx512_bf16", "amx_bf16"} <= set(amx["isa"])
    here = fingerprint.device_fingerprint("cpu", 2)
    assert here["threads"] == 2 and here["torch"] == torch.__version__ and here["cpu_model"] != "x86_64"
    assert fingerprint.fingerprint_id(here) != fingerprint.fingerprint_id({**here, "threads": 1})


def test_a_cpu_capped_to_avx2_is_another_fingerprint(monkeypatch):
    """ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 makes an avx512_bf16 CPU run bf16 linear
    layers as an AVX2-only one does: its profiles must not be cached as the native CPU's."""
    for name in fingerprint.ISA_LIMITS:
        monkeypatch.delenv(name, raising=False)
    native = fingerprint.device_fingerprint("cpu", 2)
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    capped = fingerprint.device_fingerprint("cpu", 2)
    assert "isa_limits" not in native and capped["isa_limits"] == {
        "ATEN_CPU_CAPABILITY": "avx2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
    }
    assert fingerprint.fingerprint_id(capped) != fingerprint.fingerprint_id(native)


def test_contention_counts_busy_cpu_time_outside_this_process(monkeypatch):
    from specbench.costs import contention

    clocks = {"busy": iter([100.0, 103.0]), "own": iter([10.0, 11.0]), "wall": iter([5.0, 7.0])}
    monkeypatch.setattr(contention, "_busy_seconds", lambda: next(clocks["busy"]))
    monkeypatch.setattr(contention.time, "process_time", lambda: next(clocks["own"]))
    monkeypatch.setattr(contention.time, "perf_counter", lambda: next(clocks["wall"]))
    with contention.watch() as usage:
        pass
    assert usage.others == (3.0 - 1.0) / 2.0  # 3 busy CPU seconds, 1 of them ours, over 2 s
    monkeypatch.setenv("SPECBENCH_CONTENDED_CORES", "0.25")
    assert contention.contended(1.0) and not contention.contended(0.1) and not contention.contended(None)
