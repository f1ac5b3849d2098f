"""What both head trainers (EAGLE-3, Medusa) share around the optimisation loop: the
target and the training rows, a fixed held-out set of the target's answers, a learning-curve point per checkpoint (top-1
agreement per
draft step, chain τ), and the export of the curve and the training record."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from omegaconf import OmegaConf
from safetensors.torch import save_file

from specbench.data import questions
from specbench.data.chat import chat_prompt
from specbench.errors import ConfigError, require
from specbench.metrics.records import read_records
from specbench.models import registry
from specbench.train.data import check_corpus_target, load_rows, target_entry
from specbench.train.packed import read_answers


def prepare(args):
    """(target, tokenizer, out dir, checkpoint path, curve path, validation rows by set
    (MAIN_SET first, then each domain set), training rows, how many of them are target
    answers) for a trainer's parsed arguments."""
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    entry = target_entry(tuple(args.target))
    require(args.answers >= 0, "--answers", f"{args.answers}: a number of prompts, 0 or more")
    require(
        bool(args.data) or args.answers > 0,
        "--data",
        "no training data: give the target's answers (--data DIR ...) or have it answer prompts (--answers N)",
    )
    for source in map(Path, args.data):
        if source.is_dir():
            check_corpus_target(source, entry, "--data")
    tokenizer = registry.load_tokenizer(entry, "--target")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    checkpoint, curve_path = out.with_name(out.name + ".ckpt.pt"), out.with_name(out.name + ".curve.jsonl")
    data = list(args.data)
    if args.answers:
        data.append(answer_prompts(args, out.with_name(out.name + ".corpus")))
        args.data = data  # the training record names every source of its rows
    answers = read_answers(data, tokenizer)
    main_keys = validation_set(
        out.with_name(out.name + ".validation.json"),
        answers,
        args.validation_rows,
        args.validation_after,
        committed_set(data),
    )
    domains = run_domain_sets(
        out.with_name(out.name + ".validation-sets.json"), checkpoint.exists(), domain_sets(data), answers
    )
    # after the data's checks: a bad key costs no model load
    target = registry.load_model(entry, args.target_dtype, "cpu", "--target")
    sets = {MAIN_SET: set(main_keys)} | {name: set(keys) for name, keys in domains.items()}
    training, held = split_held_out(answers, set().union(*sets.values()))
    validation = {name: [r for r in held if r["key"] in keys] for name, keys in sets.items()}
    rows, n_target = load_rows(training, tokenizer, args.sharegpt_answers, args.seed, args.length // 2)
    return target, tokenizer, out, checkpoint, curve_path, validation, rows, n_target


def answer_prompts(args, directory: Path) -> str:
    """The corpus directory of the target's answers to the first --answers training prompts
    (specbench.train.corpus, answers up to --length tokens: longer ones are cut to that for
    training anyway); what an earlier run answered there is kept, and every prompt is
    answered there even if a committed pack holds it (pass that pack as --data too)."""
    from specbench.train import corpus

    # (no packs: answer all N here)
    options = [
        "--out",
        str(directory),
        "--prompts",
        str(args.answers),
        "--max-new-tokens",
        str(args.length),
        "--dtype",
        args.target_dtype,
        "--threads",
        str(args.threads),
        "--seed",
        str(args.seed),
        "--packs",
    ]
    corpus.generate(corpus.arguments().parse_args(options + (["--target", *args.target] if args.target else [])))
    return str(directory)


def split_held_out(answers: list[dict], held_out: set[str]) -> tuple[list[dict], list[dict]]:
    """(training answers, scored validation answers). A held-out prompt's sampled answers
    stay out of training too, but only the greedy one is scored: with the target's greedy
    text, chain tau is what greedy decoding would accept."""
    training = [r for r in answers if r.get("key") not in held_out]
    return training, [r for r in answers if r.get("key") in held_out and r.get("temperature") == 0.0]


COMMITTED_SET = "validation.json"
MAIN_SET = "main"  # the set a curve point's own top1 and chain_tau are scored on
DOMAIN_SET_GLOB = "validation-*.json"  # e.g. validation-code.json: a set named "code"


def domain_sets(sources: list[str]) -> dict[str, list[str]]:
    """Held-out keys of the further sets corpus directories among `sources` commit
    (validation-<name>.json), each scored apart: the main set's text is ShareGPT answers,
    which predict τ on other kinds of prompts (code, math) poorly."""
    sets = {}
    for source in map(Path, sources):
        for path in sorted(source.glob(DOMAIN_SET_GLOB)) if source.is_dir() else []:
            sets.setdefault(path.stem.removeprefix("validation-"), json.loads(path.read_text()))
    return sets


def run_domain_sets(
    path: Path, resumed: bool, committed: dict[str, list[str]], rows: list[dict]
) -> dict[str, list[str]]:
    """A run's domain sets, fixed at its first step (saved to `path`) like its main set: a
    run resumed from before it had any keeps none, so its training rows do not change."""
    if path.exists():
        return json.loads(path.read_text())
    sets = {} if resumed else committed
    for name, keys in sets.items():
        require_greedy(keys, rows, f"keys of validation set {name!r}")
    path.write_text(json.dumps(sets))
    return sets


def require_greedy(keys: list[str], rows: list[dict], what: str) -> None:
    """Refuse, in one line, held-out keys that are no greedy answer among `rows`."""
    greedy = {r.get("key") for r in rows if r.get("temperature") == 0.0}
    missing = [k for k in keys if k not in greedy]
    if missing:
        raise ConfigError(
            f"--data: {len(missing)} of the {len(keys)} {what} are in no greedy answer read "
            f"(first: {missing[0]}); read the packs that hold them"
        )


def committed_set(sources: list[str]) -> tuple[Path, list[str]] | None:
    """The held-out keys a corpus directory among `sources` commits beside its packs (its
    validation.json), so runs started on different days score on the same answers."""
    for source in map(Path, sources):
        if (source / COMMITTED_SET).is_file():
            return source / COMMITTED_SET, json.loads((source / COMMITTED_SET).read_text())
    return None


def held_out_keys(sources: list[str]) -> set[str]:
    """Keys of every held-out set the corpus directories among `sources` commit (the main
    set and each domain set): what the trainers keep out of training."""
    committed = committed_set(sources)
    return set(committed[1] if committed else []).union(*domain_sets(sources).values())


def validation_set(
    path: Path, rows: list[dict], count: int, after: int = 0, committed: tuple[Path, list[str]] | None = None
) -> list[str]:
    """Keys of the held-out rows, fixed at the first run (saved to `path`) so the
    learning curve stays comparable while the corpus grows: a corpus directory's
    committed set when one is read (every key must be a greedy answer read), else the
    `count` greedy target answers of 64+ tokens with the smallest keys, among the greedy
    rows after the first `after` (in corpus order: a warm start's head trained on those,
    so they would flatter it)."""
    if path.exists():
        return json.loads(path.read_text())
    if committed is not None:
        source, keys = committed
        require_greedy(keys, rows, f"held-out keys in {source}")
        path.write_text(json.dumps(keys))
        return keys
    greedy = [r for r in rows if r.get("temperature") == 0.0][after:]
    greedy = sorted((r for r in greedy if len(r["answer"]) >= 64), key=lambda r: r["key"])
    keys = [r["key"] for r in greedy[:count]]
    path.write_text(json.dumps(keys))
    return keys


def curve_point(step: int, seen: int, batch_hits, chain) -> dict:
    """Top-1 per draft step and chain τ = 1 + accepted / anchors over validation batches;
    `batch_hits` yields per batch a list of (hit, scored) per draft step, `chain(hits)`
    gives (accepted, anchors)."""
    hits_total, scored_total, accepted, anchors = None, None, 0, 0
    for hits in batch_hits:
        if hits_total is None:
            hits_total, scored_total = [0] * len(hits), [0] * len(hits)
        for j, (hit, scored) in enumerate(hits):
            hits_total[j] += int(hit.sum())
            scored_total[j] += int(scored.sum())
        a, n = chain(hits)
        accepted, anchors = accepted + a, anchors + n
    return {
        "step": step,
        "tokens": seen,
        "top1": [h / max(s, 1) for h, s in zip(hits_total or [], scored_total or [])],
        "chain_tau": 1 + accepted / max(anchors, 1),
    }


def set_points(step: int, seen: int, hits_by_set: dict, chain) -> dict:
    """curve_point on the main set, with each domain set's top1 and chain_tau under "sets"."""
    point = curve_point(step, seen, hits_by_set[MAIN_SET], chain)
    others = {name: curve_point(step, seen, hits, chain) for name, hits in hits_by_set.items() if name != MAIN_SET}
    if others:
        point["sets"] = {name: {"top1": p["top1"], "chain_tau": p["chain_tau"]} for name, p in others.items()}
    return point


def held_out_counts(validation: dict[str, list[dict]]) -> dict:
    """A training record's counts of held-out answers: the main set's, and each domain set's."""
    domains = {name: len(rows) for name, rows in validation.items() if name != MAIN_SET}
    return {
        "validation_answers": len(validation[MAIN_SET]),
        **({"domain_validation_answers": domains} if domains else {}),
    }


def append_point(curve_path: Path, point: dict) -> None:
    with curve_path.open("a") as f:
        f.write(json.dumps(point) + "\n")


def save_head(out: Path, raw_config: dict, head: torch.nn.Module) -> None:
    """A trained head as shipped: config.json and model.safetensors, floats in bf16 (integer
    buffers such as a draft-vocabulary map kept as they are)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(raw_config, indent=2))
    save_file(
        {k: (v.to(torch.bfloat16) if v.is_floating_point() else v).contiguous() for k, v in head.state_dict().items()},
        out / "model.safetensors",
    )


def export(out: Path, curve_path: Path, record: dict, step_label: str) -> None:
    """Copy the learning curve into the export (curve.jsonl, curve.png) and write
    training.json with `record`, the last validation point and, where `record["init"]` is a
    warm start with a training.json, that file under `init_record`: a head trained on from
    another keeps how every earlier version was made."""
    curve = [json.loads(line) for line in curve_path.open()] if curve_path.exists() else []
    if curve:
        (out / "curve.jsonl").write_text("".join(json.dumps(p) + "\n" for p in curve))
        draw_curve(curve, out / "curve.png", step_label)
    init = record.get("init")
    previous = Path(init) / "training.json" if isinstance(init, str) else None
    history = {"init_record": json.loads(previous.read_text())} if previous is not None and previous.is_file() else {}
    (out / "training.json").write_text(
        json.dumps({**record, "validation": curve[-1] if curve else None, **history}, indent=2)
    )


def draw_curve(points: list[dict], path: Path, step_label: str = "TTT step") -> None:
    """Top-1 per draft step (`step_label` j) and chain tau against answer tokens seen."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tokens = [p["tokens"] / 1e6 for p in points]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for j in range(len(points[0]["top1"])):
        left.plot(tokens, [p["top1"][j] for p in points], label=f"{step_label} {j}")
    left.set(xlabel="answer tokens seen (M)", ylabel="top-1 agreement with the target", title="validation top-1")
    left.legend()
    right.plot(tokens, [p["chain_tau"] for p in points], label="main set")
    for name in dict.fromkeys(name for p in points for name in p.get("sets", {})):
        scored = [(t, p["sets"][name]["chain_tau"]) for t, p in zip(tokens, points) if name in p.get("sets", {})]
        right.plot(*zip(*scored), linestyle="--", label=f"{name} set")
    right.set(
        xlabel="answer tokens seen (M)", ylabel="tau", title=f"validation chain tau (depth {len(points[0]['top1'])})"
    )
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def run_config(run: Path) -> dict:
    """A run directory's resolved config: Hydra's copy, or the one its summary records."""
    if (run / ".hydra" / "config.yaml").is_file():
        return OmegaConf.to_container(OmegaConf.load(run / ".hydra" / "config.yaml"), resolve=True)
    require(
        (run / "summary.json").is_file(),
        "--runs",
        f"{run}: neither .hydra/config.yaml nor summary.json (not a finished run directory)",
    )
    return json.loads((run / "summary.json").read_text())["config"]


def run_rows(run: Path, tokenizer) -> tuple[str, list[dict]]:
    """(dataset name, first-turn rows of prompt and output ids) of a T=0 benchmark run
    directory (python -m specbench, or a script calling its Runner: its config is then read
    from summary.json): every method is lossless at T=0, so its outputs are the target's own
    greedy text on that benchmark."""
    cfg = run_config(run)
    require(
        float(cfg["gen"]["temperature"]) == 0.0,
        "--runs",
        f"{run}: a T={cfg['gen']['temperature']} run; its outputs are not the target's greedy text",
    )
    samples = {s.id: s for s in questions.load(cfg["dataset"])}
    rows = []
    for record in read_records(run / "samples.jsonl"):
        method = record["method"]
        prompt = chat_prompt(tokenizer, [{"role": "user", "content": samples[record["id"]].turns[0]}])
        require(
            len(prompt) == method["prompt_tokens"][0],
            "--runs",
            f"{run}: sample {record['id']}'s prompt does not rebuild as the run asked it",
        )
        rows.append({"prompt": prompt, "answer": method["turn_ids"][0]})
    return cfg["dataset"]["name"], rows
