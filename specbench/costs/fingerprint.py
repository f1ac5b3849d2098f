"""What decides a forward's cost on this machine: the device, the ISA features that
decide matmul speed, torch and its thread count. Profiles are keyed by it and every
result records it, so a number always says which hardware produced it."""

from __future__ import annotations

import hashlib
import json
import os
import platform
from pathlib import Path

import torch

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
