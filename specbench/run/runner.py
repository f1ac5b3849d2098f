"""One benchmark run: decode every sample with the method and (back to back, alternating
order) the AR baseline, as the run's plan (specbench.run.plan) says; write one JSON line per
finished sample; summarise. Re-running the same config resumes where it stopped. A group
of runs that share their AR decode (specbench.run.group) goes through the same block loop."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, replace
from pathlib import Path

import torch
from tqdm import tqdm

from specbench.costs import contention
from specbench.data import questions
from specbench.engine.loop import Limits, Method, generate_batch
from specbench.engine.sampling import seeded
from specbench.metrics.records import MethodRun, method_run, read_records
from specbench.run import entmtp_bank, plan, tracking
from specbench.run.baseline import load_cached_baseline
from specbench.run.summary import summarize
from specbench.run.table import print_summary


class Runner:
    def __init__(self, cfg: dict, out_dir: Path):
        cfg = entmtp_bank.with_bank(cfg)
        plan.check(cfg)
        self.cfg, self.out_dir = cfg, out_dir
        self.batch_size = cfg["gen"]["batch_size"]
        if cfg["hardware"].get("threads") is not None:
            torch.set_num_threads(cfg["hardware"]["threads"])
        self.samples = questions.load(cfg["dataset"])
        mode = cfg["baseline"]["mode"]
        self.paired = mode == "paired" and cfg["method"] != cfg["baseline"]["method"]
        self.cached_baseline = load_cached_baseline(cfg) if mode == "cached" else None
        self.parts: plan.RunParts | None = None  # built by the plan when samples are left to decode
        self.decided: plan.RunPlan | None = None
        self.records: list[dict] = []
        self.done: set[str] = set()
        self.tracker = None

    def run(self) -> dict:
        todo = self.prepare()
        if todo:
            decode_in_blocks([self], [todo])
        return self.finish()

    def prepare(self) -> list[questions.Sample]:
        """Read what an earlier run finished; when samples are left, decide the plan, build
        its parts and warm them up. Returns the samples left to decode."""
        todo = self.resume()
        self.tracker = tracking.start(self.cfg, f"{self.cfg['method']['name']}/{self.out_dir.name}")
        for record in self.records if self.tracker else ():
            self.tracker.sample(record)
        if todo:
            self.decided, self.parts = plan.decide(
                self.cfg, self.samples, self.paired, self.cached_baseline is not None
            )
            self.write_decisions()
            self.warm_up(todo[: self.batch_size])
        return todo

    def write_decisions(self) -> None:
        (self.out_dir / "decisions.json").write_text(
            json.dumps(self.decided.to_json(self.cfg["hardware"]["device"]), indent=1)
        )

    def resume(self) -> list[questions.Sample]:
        """Read what an earlier run finished; the samples left to decode."""
        self.records = read_records(self.out_dir / "samples.jsonl")
        self.done = {r["id"] for r in self.records}
        return [s for s in self.samples if s.id not in self.done]

    def prepare_beside(self, host: "Runner") -> list[questions.Sample]:
        """prepare() for a group's null: it decodes with `host`'s plan and target, its method
        the host's baseline, so it is timed exactly as the shared AR decode is; nothing is
        decided, loaded or warmed up again. Returns the samples left to decode."""
        todo = self.resume()
        if todo:
            self.decided, self.parts = host.decided, replace(host.parts, method=host.parts.baseline)
            self.write_decisions()
        return todo

    def write(self, batch: list[dict], others_cores: float | None) -> None:
        """Append a decoded batch's records (kept even if the run is interrupted next)."""
        with open(self.out_dir / "samples.jsonl", "a", encoding="utf-8") as out:
            for record in batch:
                record["others_cores"] = None if others_cores is None else round(others_cores, 2)
                out.write(json.dumps(record) + "\n")
                self.records.append(record)
                self.done.add(record["id"])
                if self.tracker:
                    self.tracker.sample(record)
            out.flush()
            os.fsync(out.fileno())

    def finish(self) -> dict:
        """Summarise and write summary.json; a run found finished keeps the summary it wrote
        (its commit and environment are those of the session that decoded it)."""
        path = self.out_dir / "summary.json"
        if self.parts is None and path.is_file():
            summary = json.loads(path.read_text())
        else:
            summary = summarize(self.cfg, self.samples, self.records, self.out_dir, self.paired, self.cached_baseline)
            path.write_text(json.dumps(summary, indent=2))
        if self.tracker:
            self.tracker.finish(summary)
        print_summary(summary)
        return summary

    def warm_up(self, samples: list[questions.Sample]) -> None:
        """First touches of fresh memory are slow: run each method once, untimed, at the
        run's batch size."""
        parts = self.parts
        prompts = [parts.prompts.ids([{"role": "user", "content": s.turns[0]}], s.id) for s in samples]
        limits = Limits(min(16, parts.limits.max_new_tokens), parts.limits.stop_token_ids)
        for method in filter(None, (parts.method, parts.baseline)):
            generate_batch(
                parts.target, method, prompts, parts.sampling, limits, [self.generator(s.id) for s in samples]
            )

    @staticmethod
    def batch_records(
        samples: list[questions.Sample],
        method: list[MethodRun],
        baseline: list[MethodRun] | None,
        baseline_first: bool,
        block: int = 1,
    ) -> list[dict]:
        """One record per sample: the method's run and, when paired, the baseline's beside it
        (`block`: how many methods shared that baseline decode, when more than one)."""
        records = []
        for i, sample in enumerate(samples):
            record = {"id": sample.id, "category": sample.category, "method": asdict(method[i])}
            if baseline is not None:
                record["baseline"] = asdict(baseline[i])
                record["baseline_first"] = baseline_first
                if block > 1:
                    record["block_methods"] = block
            records.append(record)
        return records

    def decode_turns(self, samples: list[questions.Sample], method: Method, bar) -> list[MethodRun]:
        """All turns of a batch of conversations, turn by turn (a batch holds the samples
        that have that turn); each later turn sees this method's own answers."""
        parts = self.parts
        tokenizer = parts.prompts.tokenizer
        messages = [[] for _ in samples]
        results: list[list[tuple[int, object, str]]] = [[] for _ in samples]
        generators = [self.generator(s.id) for s in samples]
        batch_seconds = verify_seconds = 0.0
        for turn in range(max(len(s.turns) for s in samples)):
            rows = [i for i, s in enumerate(samples) if turn < len(s.turns)]
            for i in rows:
                messages[i].append({"role": "user", "content": samples[i].turns[turn]})
            prompts = [parts.prompts.ids(messages[i], samples[i].id) for i in rows]
            progress = Progress(bar) if bar is not None else None
            generations = generate_batch(
                parts.target,
                method,
                prompts,
                parts.sampling,
                parts.limits,
                [generators[i] for i in rows],
                decode=tokenizer.decode,
                on_step=progress,
            )
            batch_seconds += generations[0].batch_seconds
            verify_seconds += generations[0].verify_seconds
            for i, prompt, result in zip(rows, prompts, generations):
                text = tokenizer.decode(result.ids, skip_special_tokens=True)
                messages[i].append({"role": "assistant", "content": text})
                results[i].append((len(prompt), result, text))
        return [method_run(runs, len(samples), batch_seconds, samples[0].id, verify_seconds) for runs in results]

    def generator(self, sample_id: str) -> torch.Generator:
        """Seeded per sample, so a resumed run draws what an uninterrupted one would."""
        digest = hashlib.sha256(f"{self.cfg['seed']}/{sample_id}".encode()).digest()
        return seeded(int.from_bytes(digest[:8], "little"), self.parts.target.device)


def decode_in_blocks(members: list[Runner], todo: list[list[questions.Sample]]) -> None:
    """Decode the samples each member lacks (`todo`, per member), batch by batch: per batch,
    the paired AR baseline once (on the first member's target, which every member's plan
    chose alike: specbench.run.group) and each member that lacks the batch, back to back in one
    block ordered by `block_order`; each member writes its records as its batch finishes."""
    first = members[0]
    wanted = {s.id for samples in todo for s in samples}
    samples = [s for s in first.samples if s.id in wanted]
    size = first.batch_size
    if len(members) == 1:
        bar = tqdm(
            total=len(first.samples),
            initial=len(first.samples) - len(samples),
            desc=first.cfg["method"]["name"],
            unit="sample",
        )
    else:
        names = ", ".join(r.cfg["method"]["name"] for r in members)
        bar = tqdm(total=len(samples), desc=f"{len(members)} runs ({names}) + AR", unit="sample")
    for index, start in enumerate(range(0, len(samples), size)):
        batch = samples[start : start + size]
        needing = [r for r in members if any(s.id not in r.done for s in batch)]
        order = [None if i is None else needing[i] for i in block_order(index, len(needing), first.parts.baseline)]
        with contention.watch() as usage:
            runs = {}
            for runner in order:
                if runner is None:
                    runs[None] = first.decode_turns(batch, first.parts.baseline, None)
                else:
                    runs[id(runner)] = runner.decode_turns(batch, runner.parts.method, bar)
        for runner in needing:
            baseline_first = None in order and order.index(None) < order.index(runner)
            records = Runner.batch_records(batch, runs[id(runner)], runs.get(None), baseline_first, block=len(needing))
            runner.write([r for r in records if r["id"] not in runner.done], usage.others)
        bar.update(len(batch))
    bar.close()


def block_order(index: int, methods: int, baseline) -> list[int | None]:
    """The order of the `index`-th block: the methods (0..methods-1) rotated by index // 2,
    and the shared AR decode (None; none without a `baseline`) first in even blocks and last
    in odd ones. So every method has AR before it in half the blocks and after it in the
    other half, whatever its place in the group, and the methods take every place in turn:
    a drift within a block (caches, clocks, the host's other load) reaches AR and each method
    alike."""
    turn = (index // 2) % max(methods, 1)
    order: list[int | None] = [*range(turn, methods), *range(turn)]
    if baseline is None:
        return order
    return [None, *order] if index % 2 == 0 else [*order, None]


class Progress:
    """Live tok/s (over the batch) and tau for the progress bar of one generation."""

    def __init__(self, bar):
        self.bar, self.tokens, self.steps, self.calls = bar, 0, 0, 0
        self.start = bar.format_dict["elapsed"]

    def __call__(self, committed: int, rows: int) -> None:
        self.tokens += committed
        self.steps += rows  # row-steps: tau is per sequence
        self.calls += 1
        elapsed = self.bar.format_dict["elapsed"] - self.start
        self.bar.set_postfix(
            tok_s=f"{self.tokens / max(elapsed, 1e-9):.1f}", tau=f"{self.tokens / self.steps:.2f}", refresh=False
        )
        if self.calls % 8 == 0:
            self.bar.refresh()
