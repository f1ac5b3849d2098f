"""The shared training loop: a stop request (SIGTERM, Ctrl-C) ends training after the
current step with a whole checkpoint, and a re-run continues from it."""

import os
import signal

import torch

from specbench.train.loop import fit


def test_a_stop_signal_checkpoints_the_current_step_and_a_rerun_resumes(tmp_path):
    torch.manual_seed(0)
    module = torch.nn.Linear(4, 2)
    checkpoint = tmp_path / "head.ckpt.pt"
    calls = []

    def batches(step):
        while True:
            yield torch.randn(3, 4), torch.zeros(3, dtype=torch.long)

    def loss_fn(ids, labels):
        calls.append(1)
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGTERM)  # arrives mid-step: the step still completes
        return torch.nn.functional.cross_entropy(module(ids), labels), [0.0]

    previous = signal.getsignal(signal.SIGTERM)
    first = fit(
        module,
        batches,
        loss_fn,
        checkpoint,
        steps=10,
        minutes=5,
        lr=1e-2,
        weight_decay=0.0,
        desc="t",
        checkpoint_every=100,
    )
    assert first["steps"] == 3 and torch.load(checkpoint)["step"] == 3
    assert signal.getsignal(signal.SIGTERM) is previous  # the caller's handler is back
    assert [p.name for p in tmp_path.iterdir()] == [checkpoint.name]  # no partial file left
    second = fit(
        module,
        batches,
        loss_fn,
        checkpoint,
        steps=10,
        minutes=5,
        lr=1e-2,
        weight_decay=0.0,
        desc="t",
        checkpoint_every=100,
    )
    assert second["steps"] == 10 and len(calls) == 10 and second["answer_tokens_seen"] == 30


def test_heads_trained_together_each_follow_their_own_learning_rate(tmp_path):
    """A ModuleDict's heads are parameter groups of their own: a head given lr 0 stays as
    it was while the other trains."""
    torch.manual_seed(0)
    module = torch.nn.ModuleDict({"a": torch.nn.Linear(4, 2), "b": torch.nn.Linear(4, 2)})
    before = {k: v.clone() for k, v in module.state_dict().items()}

    def batches(step):
        while True:
            yield torch.randn(3, 4), torch.zeros(3, dtype=torch.long)

    def loss_fn(ids, labels):
        return sum(torch.nn.functional.cross_entropy(head(ids), labels) for head in module.values()), [0.0]

    fit(
        module,
        batches,
        loss_fn,
        tmp_path / "joint.ckpt.pt",
        steps=3,
        minutes=5,
        lr=[1e-2, 0.0],
        weight_decay=0.0,
        desc="t",
    )
    after = module.state_dict()
    assert all(torch.equal(after[k], before[k]) for k in before if k.startswith("b."))
    assert not any(torch.equal(after[k], before[k]) for k in before if k.startswith("a."))


def test_a_single_group_checkpoint_of_a_joint_run_resumes_with_its_moments(tmp_path):
    """Joint checkpoints from before heads had their own parameter groups hold one group:
    resuming splits it per head, and every parameter keeps its Adam moments."""
    from specbench.train.loop import grouped

    torch.manual_seed(0)
    module = torch.nn.ModuleDict({"a": torch.nn.Linear(4, 2), "b": torch.nn.Linear(4, 3)})
    single = torch.optim.AdamW(module.parameters(), lr=1e-2)
    sum(head(torch.randn(5, 4)).square().sum() for head in module.values()).backward()
    single.step()
    per_head = torch.optim.AdamW([{"params": list(head.parameters())} for head in module.values()], lr=1e-2)
    per_head.load_state_dict(grouped(single.state_dict(), [2, 2]))
    assert len(per_head.param_groups) == 2
    for p in module.parameters():
        assert torch.equal(per_head.state[p]["exp_avg"], single.state[p]["exp_avg"])
        assert torch.equal(per_head.state[p]["exp_avg_sq"], single.state[p]["exp_avg_sq"])
