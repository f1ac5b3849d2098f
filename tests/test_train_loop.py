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
    first = fit(module, batches, loss_fn, checkpoint, steps=10, minutes=5, lr=1e-2, weight_decay=0.0, desc="t", checkpoint_every=100)
    assert first["steps"] == 3 and torch.load(checkpoint)["step"] == 3
    assert signal.getsignal(signal.SIGTERM) is previous  # the caller's handler is back
    assert [p.name for p in tmp_path.iterdir()] == [checkpoint.name]  # no partial file left
    second = fit(module, batches, loss_fn, checkpoint, steps=10, minutes=5, lr=1e-2, weight_decay=0.0, desc="t", checkpoint_every=100)
    assert second["steps"] == 10 and len(calls) == 10 and second["answer_tokens_seen"] == 30
