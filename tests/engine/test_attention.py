"""engine/attention.py: every layout the engine and the draft heads call attention in (the GPU's
folded queries and K/V copied per group included, run here on a CPU) computes plain masked
attention; on a GPU the kernel order leaves cuDNN out; each kind of call records its kernel."""

import pytest
import torch

from specbench.engine import attention


def reference(q, keys, values, mask):
    """Masked softmax attention written out: K and V copied per group, fp64."""
    groups = q.shape[1] // keys.shape[1]
    keys, values = (t.repeat_interleave(groups, 1).double() for t in (keys, values))
    scores = q.double() @ keys[:, :, : (mask.shape[-1] if mask is not None else None)].transpose(-1, -2)
    scores = scores / q.shape[-1] ** 0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return (scores.softmax(-1) @ values[:, :, : scores.shape[-1]]).float()


def tree_mask(batch: int, n: int, columns: int, span: int, seed: int) -> torch.Tensor:
    """[B, 1, n, span]: every cached column before the new rows, a random ancestor set among
    them (the diagonal always), nothing past the live columns."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.zeros(batch, 1, n, span, dtype=torch.bool)
    start = columns - n
    mask[..., :start] = True
    mask[..., start:columns] = torch.rand(batch, 1, n, n, generator=g).tril() > 0.5
    mask[..., torch.arange(n), start + torch.arange(n)] = True
    return mask


@pytest.mark.parametrize("gpu", [False, True])
@pytest.mark.parametrize("heads, kv_heads", [(4, 4), (4, 2), (6, 1)])
@pytest.mark.parametrize("n", [1, 5, attention.FOLD_WIDTH + 6])
def test_every_layout_computes_masked_attention(gpu, heads, kv_heads, n):
    """Over a cache wider than the live columns (the static forward's span) and with one row's
    mask, folded or not, a GPU's layout and a CPU's agree with attention written out."""
    torch.manual_seed(n)
    batch, d, columns, capacity = 2, 8, n + 11, n + 40
    q = torch.randn(batch, heads, n, d)
    keys, values = torch.randn(batch, kv_heads, capacity, d), torch.randn(batch, kv_heads, capacity, d)
    mask = tree_mask(batch, n, columns, columns + 3, seed=n)
    expected = reference(q, keys, values, mask)
    got = attention.attend(q, keys, values, mask, kv_heads, gpu=gpu)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)
    folded = attention.fold_mask(mask, heads // kv_heads)
    torch.testing.assert_close(attention.attend(q, keys, values, folded, kv_heads, gpu=gpu), expected)
    if n == 1:  # a decode attends to every column it is given, no mask
        live = keys[:, :, :columns], values[:, :, :columns]
        torch.testing.assert_close(
            attention.attend(q, *live, None, kv_heads, gpu=gpu), reference(q, *live, None), atol=1e-5, rtol=1e-4
        )


def test_a_two_dimensional_mask_is_folded_as_a_head_passes_it():
    """The draft heads pass one [n, columns] mask for every row."""
    mask = torch.tensor([[True, False], [True, True]])
    assert attention.fold_mask(mask, 3).tolist() == [[True, False], [True, True]] * 3
    assert attention.fold_mask(mask[None, None], 1) is not None and attention.fold_mask(mask, 1) is mask


def test_a_gpu_runs_the_fused_kernels_in_a_fixed_order_and_never_cudnn():
    """cuDNN's SDPA takes a 4-D mask and has open mask bugs: on a GPU the order is
    memory-efficient, flash, math; on a CPU nothing is changed."""
    before = torch._C._get_sdp_priority_order()
    with attention.kernels(torch.device("cuda")):
        assert not torch.backends.cuda.cudnn_sdp_enabled()
        assert torch.backends.cuda.mem_efficient_sdp_enabled() and torch.backends.cuda.math_sdp_enabled()
        assert torch._C._get_sdp_priority_order()[:3] == [int(k) for k in attention.KERNELS]
    assert torch._C._get_sdp_priority_order() == before
    with attention.kernels(torch.device("cpu")):
        assert torch._C._get_sdp_priority_order() == before


def test_each_kind_of_call_records_the_kernel_sdpa_chose(monkeypatch):
    monkeypatch.setattr(attention, "KERNELS_RAN", {})
    q, keys = torch.randn(1, 4, 3, 8), torch.randn(1, 2, 9, 8)
    mask = torch.ones(1, 1, 3, 9, dtype=torch.bool)
    attention.attend(q, keys, keys, mask, 2)
    attention.attend(q, keys, keys, mask, 2, gpu=True)
    attention.attend(q, keys, keys, mask, 2)  # the same kind again: one entry
    assert set(attention.KERNELS_RAN) == {
        ("cpu", "float32", "grouped in SDPA", 1, 3),
        ("cpu", "float32", "folded", 1, 6),
    }
    assert set(attention.KERNELS_RAN.values()) <= {"flash_attention", "math", "unknown"}
