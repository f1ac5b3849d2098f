"""Device placement a CPU run cannot show: sampling generators live on the target's device, and
what is copied to a GPU without blocking is staged contiguous."""

import ast
import sys
from types import SimpleNamespace

import pytest
import torch
from conftest import ROOT, VOCAB

from specbench.drafters.small_lm import SmallLMDrafter
from specbench.engine import transfer
from specbench.engine.lm import TreeLM
from specbench.engine.loop import Limits, Method, generate, generate_batch
from specbench.engine.sampling import Sampling
from specbench.errors import ConfigError
from specbench.trees.chain import Chain
from specbench.verify.standard import StandardVerifier

# files whose generators draw host values only (moved or listed afterwards), never a sample
HOST_ONLY = {"specbench/trees/talon_expansion.py", "scripts/device_check.py"}


def unplaced_generators() -> list[str]:
    """`path:line` of every torch.Generator(...) in specbench/ and scripts/ that names no device."""
    found = []
    for path in sorted([*(ROOT / "specbench").rglob("*.py"), *(ROOT / "scripts").rglob("*.py")]):
        name = str(path.relative_to(ROOT))
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "Generator"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "torch"
                and not node.args
                and not any(k.arg == "device" for k in node.keywords)
                and name not in HOST_ONLY
            ):
                found.append(f"{name}:{node.lineno}")
    return found


def test_every_generator_names_its_device():
    """A CPU generator given to sampling on a GPU fails there ("Expected a 'cuda' device type
    for generator"): each generator is made on the device it will draw on."""
    assert unplaced_generators() == []


def test_the_loop_refuses_a_generator_on_another_device_in_one_line(prompts):
    on_gpu = SimpleNamespace(device=torch.device("cuda", 0))
    method = Method(Chain(2), StandardVerifier())
    with pytest.raises(ConfigError, match=r"^generator: on cpu, but the target is on cuda:0: seed it there"):
        generate(on_gpu, method, prompts[0], Sampling(temperature=1.0), Limits(4), torch.Generator())


@pytest.fixture
def fake_gpu_copies(monkeypatch) -> list[tuple[str, bool]]:
    """Copies to "cuda" run on the CPU: pinning and the copy return their tensor as it is, and
    each is recorded as (step, whether its tensor was contiguous)."""
    seen = []
    real_to = torch.Tensor.to

    def pin_memory(tensor):
        seen.append(("pin", tensor.is_contiguous()))
        return tensor

    def to(tensor, *args, **kwargs):
        device = args[0] if args else kwargs.get("device")
        if isinstance(device, (str, torch.device)) and torch.device(device).type == "cuda":
            seen.append(("copy", tensor.is_contiguous()))
            return tensor
        return real_to(tensor, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "pin_memory", pin_memory)
    monkeypatch.setattr(torch.Tensor, "to", to)
    return seen


def test_a_strided_view_is_staged_contiguous(fake_gpu_copies):
    valid = torch.zeros(3, 64, dtype=torch.bool)
    view = valid[:, None, :10]
    assert not view.is_contiguous()
    assert torch.equal(transfer.to_device(view, "cuda"), view)
    assert fake_gpu_copies == [("pin", True), ("copy", True)]


def test_a_batched_decode_stages_only_contiguous_tensors(target, draft, prompts, monkeypatch, fake_gpu_copies):
    """Every engine copy to the device of a B=3 decode (the cache's context mask is a strided
    view of its columns at B > 1) goes through to_device as it runs for a GPU."""
    real = transfer.to_device

    def as_for_a_gpu(host, device):
        return real(host, "cuda") if torch.device(device).type == "cpu" else real(host, device)

    for module in list(sys.modules.values()):
        if module is not None and module.__name__.startswith("specbench") and getattr(module, "to_device", 0) is real:
            monkeypatch.setattr(module, "to_device", as_for_a_gpu)
    method = Method(Chain(3), StandardVerifier(), SmallLMDrafter(draft, VOCAB))
    generate_batch(TreeLM(target), method, prompts[:3], Sampling(), Limits(12))
    assert ("pin", True) in fake_gpu_copies and all(contiguous for _, contiguous in fake_gpu_copies)
