"""Train several heads on one target pass per batch: EAGLE-3, EAGLE-1, Medusa and Hydra
heads learn from the same text, and the target's forward is most of each one's step
(specbench.train.shared_pass), so together they cost little more than the slowest alone.
Each head is exported as its own trainer would (OUT/<head>/, with its learning curve),
and the run resumes from OUT.ckpt.pt like every trainer.

    python -m specbench.train.joint --train eagle3 eagle medusa hydra --data runs/corpus corpus/smollm2-135m \\
        --out runs/smollm2-135m-heads --steps 3000 --minutes 150
"""

from __future__ import annotations

import argparse
import math
import sys

from specbench.errors import require, run_command
from specbench.train import eagle, eagle3, hydra, medusa
from specbench.train.loop import add_fit_arguments, add_head_arguments
from specbench.train.shared_pass import saved_states, train_heads
from specbench.train.validation import prepare

TRAINEES = {"eagle3": eagle3.trainee, "eagle": eagle.trainee, "medusa": medusa.trainee, "hydra": hydra.trainee}


def per_head(pairs: list[str], names: list[str], flag: str, value: str) -> dict[str, str]:
    """`flag` HEAD=VALUE ... as {head: value}."""
    chosen = {}
    for pair in pairs:
        name, _, given = pair.partition("=")
        require(bool(given), flag, f"'{pair}' is not HEAD={value}")
        require(name in names, flag, f"'{name}' is not a head this run trains ({' '.join(names)})")
        chosen[name] = given
    return chosen


def head_lrs(pairs: list[str], names: list[str]) -> dict[str, float]:
    """--head-lr HEAD=LR ... as {head: positive learning rate}."""
    lrs = {}
    for name, given in per_head(pairs, names, "--head-lr", "LR").items():
        try:
            lrs[name] = float(given)
        except ValueError:
            lrs[name] = math.nan  # refused below, with the other bad values
        require(
            math.isfinite(lrs[name]) and lrs[name] > 0,
            "--head-lr",
            f"'{name}={given}': the learning rate must be a positive number",
        )
    return lrs


def head_args(args: argparse.Namespace, name: str, init: str | None) -> argparse.Namespace:
    """A joint run's arguments as head `name`'s own trainer reads them."""
    return argparse.Namespace(
        **{**vars(args), "init": init, "heads": args.medusa_heads if name == "medusa" else args.hydra_heads}
    )


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_fit_arguments(parser, sharegpt_answers=4000, length=256, steps=800, minutes=60, lr=1e-3)
    add_head_arguments(parser)
    parser.add_argument(
        "--train", nargs="+", choices=sorted(TRAINEES), required=True, help="the heads to train together"
    )
    parser.add_argument(
        "--init",
        nargs="+",
        default=[],
        metavar="HEAD=DIR",
        help="warm starts (eagle3, eagle) when no checkpoint exists yet",
    )
    parser.add_argument(
        "--head-lr",
        nargs="+",
        default=[],
        metavar="HEAD=LR",
        help="a head's own peak learning rate instead of --lr, e.g. a gentler one for a warm-started head",
    )
    parser.add_argument("--ttt-steps", type=int, default=3, help="EAGLE-3's unrolled training-time-test steps")
    eagle3.add_layers_argument(parser, "--eagle3-layers")
    parser.add_argument("--noise", type=float, default=0.1, help="EAGLE-1's input feature noise")
    parser.add_argument("--w-cls", type=float, default=0.1, help="EAGLE-1's classification loss weight")
    parser.add_argument("--medusa-heads", type=int, default=4)
    parser.add_argument("--hydra-heads", type=int, default=3)
    parser.add_argument("--blocks", type=int, default=1, help="residual blocks of each Medusa and Hydra head")
    args = parser.parse_args(argv)
    names = list(dict.fromkeys(args.train))
    starts, lrs = per_head(args.init, names, "--init", "DIR"), head_lrs(args.head_lr, names)
    require(
        not (set(starts) & {"medusa", "hydra"}),
        "--init",
        "Medusa and Hydra heads start as the target's own guess, not from a directory",
    )
    target, tokenizer, out, checkpoint, _, validation, rows, n_target = prepare(args)
    saved = saved_states(checkpoint, names)
    out.mkdir(parents=True, exist_ok=True)  # each head's curve lives beside its export
    trainees = [
        TRAINEES[name](head_args(args, name, starts.get(name)), target, tokenizer, rows, out / name, saved[name])
        for name in names
    ]
    train_heads(
        trainees,
        target,
        (rows, n_target, validation),
        args,
        checkpoint,
        f"{' + '.join(names)} training (top-1 per draft step)",
        lrs,
    )


if __name__ == "__main__":
    run_command(main, sys.argv[1:])
