"""Heads trained on one shared target pass against each head trained alone, side by side
on the same batches: per batch, the joint step (one target forward, every head's loss and
backward) and then each head's own step (its own target forward, its loss and backward),
the order alternating; the ratio is what to quote. Optimizer steps are left out: they are
the same work either way.

    python scripts/bench_joint_training.py --data runs/corpus corpus/smollm2-135m --train eagle3 eagle medusa hydra \\
        --batches 6 --target-dtype bfloat16 --threads 2
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from specbench.costs.fingerprint import device_fingerprint
from specbench.errors import run_command
from specbench.train.data import batches
from specbench.train.joint import TRAINEES, head_args
from specbench.train.shared_pass import read_target
from specbench.train.validation import prepare


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", nargs="+", required=True)
    parser.add_argument("--train", nargs="+", choices=sorted(TRAINEES), default=sorted(TRAINEES))
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--target-dtype", default="float32")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--record-dir", default="results/bench", help="where the JSON record goes")
    cli = parser.parse_args(argv)
    args = argparse.Namespace(
        **vars(cli),
        out="runs/bench-joint/heads",
        sharegpt_answers=0,
        seed=0,
        validation_rows=0,
        validation_after=0,
        draft_vocab=8192,
        ttt_steps=3,
        noise=0.1,
        w_cls=0.1,
        blocks=1,
        medusa_heads=4,
        hydra_heads=3,
    )
    target, tokenizer, out, _, _, _, rows, _ = prepare(args)
    trainees = [
        TRAINEES[name](head_args(args, name, None), target, tokenizer, rows, out / name, None) for name in cli.train
    ]

    def step(heads):
        def run():
            batch = read_target(target, ids, labels)
            for t in heads:  # as train_heads does: each head's backward before the next head's loss
                t.loss(batch)[0].backward()

        return run

    joint, alone, forward = [], {t.name: [] for t in trainees}, []
    source = batches(rows, cli.batch, cli.length, 0)
    next(source)  # warm-up batch: first-call allocations and compiles
    for i in range(cli.batches):
        ids, labels = next(source)
        order = [None, *trainees] if i % 2 == 0 else [*trainees, None]
        for t in order:
            seconds = timed(step(trainees if t is None else [t]))
            (joint if t is None else alone[t.name]).append(seconds)
        forward.append(timed(lambda: read_target(target, ids, labels)))
        print(
            f"batch {i + 1}: joint {joint[-1]:.2f} s, alone {' + '.join(f'{s[-1]:.2f}' for s in alone.values())} "
            f"s, target pass {forward[-1]:.2f} s"
        )
    separate = [sum(s[i] for s in alone.values()) for i in range(cli.batches)]
    ratios = sorted(a / j for a, j in zip(separate, joint))
    record = {
        "fingerprint": device_fingerprint("cpu", cli.threads),
        "heads": cli.train,
        "batch": cli.batch,
        "length": cli.length,
        "target_dtype": cli.target_dtype,
        "batches": cli.batches,
        "joint_seconds": joint,
        "alone_seconds": alone,
        "target_pass_seconds": forward,
        "speedup_median": ratios[len(ratios) // 2],
        "speedup_range": [ratios[0], ratios[-1]],
    }
    print(
        f"{' + '.join(cli.train)}: heads alone take {record['speedup_median']:.2f}x the joint step's time "
        f"(median of {cli.batches} batches, range {ratios[0]:.2f}-{ratios[-1]:.2f}); target pass "
        f"{sorted(forward)[len(forward) // 2]:.2f} s"
    )
    path = Path(cli.record_dir) / f"joint-training-{'-'.join(cli.train)}-{cli.target_dtype}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    run_command(main, sys.argv[1:])
