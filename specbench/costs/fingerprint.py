"""What decides a forward's cost on this machine: the device, the ISA features that
decide matmul speed, torch and its thread count. Profiles are keyed by it and every
result records it, so a number always says which hardware produced it."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path

import torch

from specbench.costs import contention
from specbench.costs.profile import write_whole

# CPU flags that change which matmul kernels torch can use (fp32 / bf16 / int8 GEMM)
MATMUL_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile", "asimd", "sve", "bf16")
# environment variables that cap the kernels torch, oneDNN and MKL pick below the CPU's flags
ISA_LIMITS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")


def cpu_info(cpuinfo: str | None = None) -> dict:
    """CPU model name and the matmul-relevant ISA flags (from /proc/cpuinfo on Linux)."""
    if cpuinfo is None:
        path = Path("/proc/cpuinfo")
        cpuinfo = path.read_text() if path.exists() else ""
    model, flags, ids = None, set(), {}
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("model name", "hardware", "cpu model") and model is None:
            model = value.strip()
        elif key in ("flags", "features"):
            flags.update(value.split())
        elif key in ("cpu family", "model") and key not in ids:
            ids[key] = value.strip()  # tells CPU generations apart where the name does not (VMs)
    return {
        "cpu_model": model or platform.processor() or platform.machine(),
        "cpu_family_model": "/".join(ids[k] for k in ("cpu family", "model") if k in ids),
        "isa": [f for f in MATMUL_FLAGS if f in flags],
        "arch": platform.machine(),
    }


def isa_limits() -> dict[str, str]:
    """The ISA caps set in the environment (none on a plain run)."""
    return {k: os.environ[k] for k in ISA_LIMITS if os.environ.get(k)}


def device_fingerprint(device: str, threads: int | None = None) -> dict:
    """The hardware a measurement ran on: CPU model and ISA flags, or GPU name and
    compute capability; torch version and threads."""
    info = {"device": "cuda" if str(device).startswith(("cuda", "auto")) and torch.cuda.is_available() else "cpu"}
    if info["device"] == "cuda":
        major, minor = torch.cuda.get_device_capability(0)
        info.update(
            gpu=torch.cuda.get_device_name(0), compute_capability=f"{major}.{minor}", gpus=torch.cuda.device_count()
        )
    info.update(cpu_info())
    if limits := isa_limits():
        info["isa_limits"] = limits  # e.g. an AVX2-only CPU emulated on a newer one: its own profiles
    info["torch"] = torch.__version__
    info["threads"] = threads if threads is not None else torch.get_num_threads()
    return info


def fingerprint_id(fingerprint: dict) -> str:
    """A short, file-name-safe name: readable model + a hash of everything."""
    name = fingerprint.get("gpu") or fingerprint["cpu_model"]
    slug = "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")
    while "--" in slug:
        slug = slug.replace("--", "-")
    digest = hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode()).hexdigest()[:8]
    return f"{slug}-{digest}"


def cached_probe(
    path: Path,
    fingerprint: dict,
    measure: Callable[[list[str]], dict],
    parts: list[str],
    refresh: bool = False,
    version: int | None = None,
    log=print,
) -> tuple[dict, float | None]:
    """The probe record cached at `path`, measured further where it lacks any of the `parts`
    this run needs (forward sizes, sub-probes): `measure(missing)` times just those and its
    fields are merged in, so a probe measures each part at most once per machine (this
    `fingerprint`) and probe `version`, and a part one run adds never invalidates another's.
    A record timed while other processes used the CPU is cached with that note
    (`contended_cores`) and reused while the machine stays busy; the first run that finds
    the machine idle times all its parts again (refines it). `refresh`: time again anyway.
    Also returns the seconds measuring took (None when nothing was measured)."""
    record = None if refresh else _load_probe(path, fingerprint, version)
    if record is not None and contention.retime(record.get("contended_cores")):
        log(f"refining {path.name} ({contention.note(record['contended_cores'])}): the machine is idle now")
        parts, record = list(dict.fromkeys([*record["parts"], *parts])), None
    have = record["parts"] if record is not None else []
    missing = [part for part in parts if part not in have]
    if not missing:
        return record, None
    start = time.perf_counter()
    with contention.watch() as usage:
        fresh = measure(missing)
    others = None if usage.others is None else round(usage.others, 2)
    if record is None:
        record = {
            "fingerprint": fingerprint,
            **({"version": version} if version is not None else {}),
            "parts": [],
            "contended_cores": others,
        }
    elif others is not None:
        record["contended_cores"] = max(record.get("contended_cores") or 0.0, others)
    record = merged(record, fresh)
    record["parts"] = [*have, *missing]
    write_whole(path, json.dumps(record, indent=1))
    contention.kept(path.name, others, log)
    return record, time.perf_counter() - start


def _load_probe(path: Path, fingerprint: dict, version: int | None) -> dict | None:
    """The cached record when it was measured on this fingerprint by this probe version."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if record.get("fingerprint") != fingerprint or record.get("version") != version or "parts" not in record:
        return None
    return record


def merged(old: dict, new: dict) -> dict:
    """`old` with `new`'s leaves written over it, nested dicts merged key by key (a probe's
    timings per kind and size)."""
    out = dict(old)
    for key, value in new.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out
