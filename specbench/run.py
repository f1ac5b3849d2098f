"""One benchmark run: load model, method and prompts; decode every sample with the
method and (back to back, alternating order) the AR baseline; write one JSON line per
finished sample; summarise. Re-running the same config resumes where it stopped."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import transformers
from tqdm import tqdm

from specbench import costs, methods, tracking
from specbench.costs import autotune, compile as compile_rule, contention
from specbench.costs.fingerprint import device_fingerprint
from specbench.costs.predict import predict
from specbench.costs.profile import CostProfile, ProfileCosts
from specbench.data import questions
from specbench.config import config_hash, run_name
from specbench.engine.lean import record_compiled
from specbench.engine.loop import Limits, Method, generate_batch, merge_notes
from specbench.engine.sampling import Sampling
from specbench.errors import ConfigError, require
from specbench.metrics import quality, speed
from specbench.models import registry
from specbench.report.table import print_summary

BASELINE_MODES = ("paired", "cached", "none")
MAX_BATCH = 32
# room kept after prompt + max_new_tokens for the draft tree of the last step
TREE_MARGIN = 64


@dataclass
class MethodRun:
    """What one method produced for one sample (all turns)."""

    new_tokens: int
    seconds: float  # this sample's latency (all turns), decoding only
    prefill_seconds: float
    target_forwards: int
    draft_forwards: int
    accept_lengths: list[int]
    turn_ids: list[list[int]]
    turn_texts: list[str]
    stop_reasons: list[str]
    prompt_tokens: list[int]
    nll: float  # target NLL of all new tokens (T=1), summed
    step_draft_forwards: list[int]
    tree_widths: list[list[int]]
    accepted_ranks: list[list[int]]
    verifier_notes: dict
    batch_size: int = 1  # sequences decoded together (gen.batch_size, fewer in a last batch)
    batch_seconds: float = 0.0  # the whole batch's decoding time, the same in each of its samples
    verify_seconds: float = 0.0  # the whole batch's time in the target's verification forwards
    batch_id: str = ""  # the first sample of its batch: throughput counts each batch's time once


class Runner:
    def __init__(self, cfg: dict, out_dir: Path):
        self.cfg = cfg
        self.out_dir = out_dir
        gen, hardware = cfg["gen"], cfg["hardware"]
        max_new = gen["max_new_tokens"]
        require(isinstance(max_new, int) and max_new >= 1, "gen.max_new_tokens", f"must be an integer >= 1, got {max_new!r}")
        self.batch_size = gen.get("batch_size", 1)
        require(
            isinstance(self.batch_size, int) and 1 <= self.batch_size <= MAX_BATCH, "gen.batch_size",
            f"must be an integer from 1 to {MAX_BATCH}, got {self.batch_size!r}",
        )
        self.sampling = Sampling(gen["temperature"], gen["top_p"], gen["top_k"])
        seed = cfg["seed"]
        require(isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0, "seed", f"must be an integer >= 0, got {seed!r}")
        mode = cfg["baseline"]["mode"]
        require(mode in BASELINE_MODES, "baseline.mode", f"unknown {mode!r}; choose one of {', '.join(BASELINE_MODES)}")
        min_gain = self.costs_cfg.get("min_gain", autotune.MIN_GAIN)
        require(isinstance(min_gain, (int, float)) and not isinstance(min_gain, bool) and min_gain >= 0, "costs.min_gain",
                f"must be a number >= 0 (the predicted gain over AR below which drafting stays off), got {min_gain!r}")
        threads = hardware.get("threads")
        if threads is not None:
            require(isinstance(threads, int) and threads >= 1, "hardware.threads", f"must be an integer >= 1, got {threads!r}")
            torch.set_num_threads(threads)
        self.calibration_kind = cfg["dataset"].get("calibration", "chat")
        require(self.calibration_kind in autotune.CALIBRATION_KINDS, "dataset.calibration",
                f"unknown {self.calibration_kind!r}; choose one of {', '.join(autotune.CALIBRATION_KINDS)} (the prompts `auto` shapes are calibrated on)")
        self.samples = questions.load(cfg["dataset"])
        self.quality_metrics = list(cfg["dataset"].get("metrics") or [])
        unknown = [m for m in self.quality_metrics if m not in quality.METRICS]
        require(not unknown, "dataset.metrics", f"unknown {unknown}; choose from {', '.join(quality.METRICS)}")
        self.paired = mode == "paired" and cfg["method"] != cfg["baseline"]["method"]
        compile_rule.check(cfg.get("engine") or {})
        methods.check(cfg["method"])
        if self.paired:
            methods.check(cfg["baseline"]["method"])
        self.cached_baseline = load_cached_baseline(cfg) if mode == "cached" else None

    def load(self) -> None:
        """Model and methods; only a run with samples left to decode needs them. The
        dtype and any `auto` tree shape are decided here, from measured costs."""
        cfg = self.cfg
        hardware = self.hardware = dict(cfg["hardware"])
        hardware["dtype"], self.dtype_choice = costs.resolve_dtype(hardware, cfg["model"], method_cfg=cfg["method"], engine=cfg.get("engine"))
        model, self.tokenizer = load_target(cfg["model"], hardware["dtype"], hardware["device"])
        self.context_length = cfg["model"].get("context_length") or model.config.max_position_embeddings
        self.limits = Limits(
            max_new_tokens=cfg["gen"]["max_new_tokens"],
            stop_token_ids=frozenset(stop_token_ids(model, self.tokenizer, cfg["model"])),
            stop_strings=tuple(cfg["gen"].get("stop_strings") or ()),
        )
        for sample in self.samples:  # a first turn that cannot fit fails before any cost is measured
            self.prompt_ids([{"role": "user", "content": sample.turns[0]}], sample.id)
        self.target, self.compile_choice = costs.target_lm(model, cfg, hardware)
        record_compiled(hardware, self.target)  # drafters pack their weights as the target does
        self.profile, self.shape_choice, self.calibration_runs = None, None, None
        self.method = methods.assemble(cfg["method"], model, hardware, tune_tree=self.tune_tree)
        ar_dtype = (self.dtype_choice or {}).get("ar_dtype", hardware["dtype"])
        if ar_dtype != hardware["dtype"] and self.calibration_runs is not None:
            model = self.weigh_dtype(model, ar_dtype)
        if self.cached_baseline is not None:
            cached, dtype = cached_baseline_dtype(cfg), self.hardware["dtype"]
            require(cached in (None, dtype), "baseline.mode",
                    f"cached, but the cached {cfg['baseline']['method']['name']} run decoded in {cached} and this one decodes in {dtype} "
                    f"(hardware.dtype=auto decides per method); set hardware.dtype={dtype} for both runs or use baseline.mode=paired")
        self.baseline = methods.assemble(cfg["baseline"]["method"], model, self.hardware) if self.paired else None
        if self.costs_cfg.get("profile", True) and self.profile is None:  # tune_tree has it already
            self.profile = self.cost_profile(self.method.drafter)
        self.tree_overhead = None
        if self.profile is not None:
            self.method.costs = ProfileCosts(self.profile, costs.drafter_id(cfg["method"].get("drafter")))
            self.tree_overhead = self.calibrate_tree_overhead()

    @property
    def costs_cfg(self) -> dict:
        return self.cfg.get("costs") or {}

    def weigh_dtype(self, calibrated_model, other: str):
        """When plain AR is fastest in another dtype than the one drafting was calibrated in
        (an AVX2-only CPU: bf16 wins one-token forwards, fp32 wide ones), price the calibrated
        shapes in `other` too and decode in the dtype and shape predicted fastest; returns
        the target model the run decodes with."""
        cfg, hardware = self.cfg, {**self.hardware, "dtype": other}
        model, _ = load_target(cfg["model"], other, hardware["device"])
        target, compile_choice = costs.target_lm(model, cfg, hardware)
        record_compiled(hardware, target)
        options = autotune.candidates(cfg["method"]["tree"])
        calibrated = {"candidates": self.shape_choice["candidates"], "runs": self.calibration_runs}
        decision = {}

        def tune_in_other(tree_cfg, drafter, verifier):
            profile = self.cost_profile(drafter, target, other)
            priced = {self.hardware["dtype"]: calibrated["candidates"], other: autotune.reprice(calibrated, profile, costs.drafter_id(cfg["method"].get("drafter")))}
            decision.update(autotune.choose_dtype(priced, options, self.costs_cfg.get("min_gain", autotune.MIN_GAIN)), profile=profile)
            return decision["chosen"]

        method = methods.assemble(cfg["method"], model, hardware, tune_tree=tune_in_other)
        profile = decision.pop("profile")
        self.dtype_choice = {**self.dtype_choice, "joint": decision}
        gain, chosen, ar_ms = decision["predicted_gain"], decision["chosen"], decision["ar_ms"]
        shape = {k: chosen[k] for k in autotune.auto_keys(cfg["method"]["tree"])} if chosen != autotune.DRAFTING_OFF else "drafting off"
        faster_ar = min(ar_ms, key=ar_ms.get)
        self.dtype_choice["note"] = decision.get("note") or (
            f"{decision['dtype']} with {shape} is predicted {gain:.2f}x the speed of plain AR in {faster_ar}, AR's faster dtype on this "
            f"profile ({' vs '.join(f'{d} {ms:.0f} ms' for d, ms in ar_ms.items())} on the calibration prompts); this run's speedup is over AR in {decision['dtype']}")
        if decision["dtype"] != other:
            if chosen != self.shape_choice["chosen"]:  # the gain over the faster AR ranks the shapes
                self.method = methods.assemble(cfg["method"], calibrated_model, self.hardware, tune_tree=lambda *_: chosen, drafter=self.method.drafter)
            self.shape_choice = {**self.shape_choice, "chosen": chosen}
            return calibrated_model
        calibrated_in = self.hardware["dtype"]
        self.hardware, self.target, self.compile_choice, self.method, self.profile = hardware, target, compile_choice, method, profile
        self.shape_choice = {k: v for k, v in self.shape_choice.items() if k != "note"} | {"chosen": chosen, "predicted_speedup": gain, "dtype": other, "calibrated_in": calibrated_in}
        if "note" in decision:
            self.shape_choice["note"] = decision["note"]
        return model

    def cost_profile(self, drafter, target=None, dtype: str | None = None):
        """The cached cost profile of the target (and drafter) on this machine, measured on
        first use: this run's target, or `target` in `dtype`."""
        target, dtype = target or self.target, dtype or self.hardware["dtype"]
        key = costs.profile_key(self.cfg["model"]["name"], dtype, self.hardware["device"], self.hardware.get("threads"), target.kind)
        turns = max((len(s.turns) for s in self.samples), default=1)
        longest = max((len(self.tokenizer(t).input_ids) for s in self.samples for t in s.turns[:1]), default=64)
        longest = min(self.context_length, turns * (longest + 32 + self.limits.max_new_tokens) + TREE_MARGIN)
        name = costs.drafter_id(self.cfg["method"].get("drafter"))
        return costs.ensure_profile(
            key, target, longest, {name: drafter} if drafter is not None else None,
            repeats=self.costs_cfg.get("repeats", costs.REPEATS), max_n=self.costs_cfg.get("max_n", costs.MAX_N),
            batch=self.batch_size,
        )

    def save_decisions(self) -> None:
        """What measured costs decided for this run (dtype, shape, the profile used), kept
        beside the samples so a resumed run's summary reports them without re-measuring."""
        decisions = {
            "dtype": self.hardware["dtype"], "dtype_choice": self.dtype_choice, "tree_choice": self.shape_choice,
            "forward": self.target.kind, "compile_choice": self.compile_choice,
            "fingerprint": device_fingerprint(self.hardware["device"], torch.get_num_threads()),
            "profile": self.profile.to_json() if self.profile else None,
            "drafter": costs.drafter_id(self.cfg["method"].get("drafter")),
            "tree_overhead": self.tree_overhead,
        }
        (self.out_dir / "decisions.json").write_text(json.dumps(decisions, indent=1))

    def calibration(self) -> autotune.Calibration:
        """The calibration decodes' shared settings: at least one full batch of prompts."""
        drafter_cfg = self.cfg["method"].get("drafter")
        count = max(self.costs_cfg.get("calibration_prompts", autotune.CALIBRATION_PROMPTS), self.batch_size)
        kind = self.calibration_kind
        return autotune.Calibration(
            lambda: autotune.calibration_prompts(self.tokenizer, count, kind=kind), autotune.calibration_id(count, kind=kind), self.sampling,
            self.limits.stop_token_ids, costs.cache_root(), costs.drafter_id(drafter_cfg), weights=registry.weights_id(drafter_cfg),
            max_new_tokens=self.costs_cfg.get("calibration_tokens", autotune.CALIBRATION_TOKENS), batch_size=self.batch_size,
            min_gain=self.costs_cfg.get("min_gain", autotune.MIN_GAIN),
        )

    def tune_tree(self, tree_cfg: dict, drafter, verifier) -> dict:
        """Tree parameters set to `auto`: the shape with the best predicted speedup."""
        setup = self.calibration()
        self.profile = self.cost_profile(drafter)
        chosen, record = autotune.tune(tree_cfg, drafter, verifier, self.target, self.profile, setup)
        self.calibration_runs = record.pop("runs", None)  # kept apart: the summary needs the choice, not every decode
        self.shape_choice = record
        return chosen

    def calibrate_tree_overhead(self) -> dict | None:
        """The per-step tree work the summary's prediction adds to the profiled forwards:
        from the shape choice when the tree was `auto`, else timed once for this shape."""
        if self.shape_choice is not None:
            return autotune.overhead_line(self.shape_choice["candidates"])
        tree_cfg = self.cfg["method"]["tree"]
        if tree_cfg.get("_target_") == autotune.DRAFTING_OFF["_target_"] or not self.costs_cfg.get("calibrate_tree", True):
            return None
        setup = self.calibration()
        return autotune.tree_overhead(tree_cfg, self.method, self.target, self.profile, setup)

    def run(self) -> dict:
        path = self.out_dir / "samples.jsonl"
        records = read_records(path)
        done = {r["id"] for r in records}
        todo = [s for s in self.samples if s.id not in done]
        tracker = tracking.start(self.cfg, f"{self.cfg['method']['name']}/{self.out_dir.name}")
        for record in records if tracker else ():
            tracker.sample(record)
        if todo:
            self.load()
            self.save_decisions()
            self.warm_up(todo[: self.batch_size])
        bar = tqdm(total=len(self.samples), initial=len(self.samples) - len(todo), desc=self.cfg["method"]["name"], unit="sample")
        with open(path, "a", encoding="utf-8") as out:
            for index, start in enumerate(range(0, len(todo), self.batch_size)):
                with contention.watch() as usage:
                    batch = self.run_batch(todo[start : start + self.batch_size], baseline_first=index % 2 == 1, bar=bar)
                for record in batch:
                    record["others_cores"] = None if usage.others is None else round(usage.others, 2)
                    out.write(json.dumps(record) + "\n")
                    records.append(record)
                    if tracker:
                        tracker.sample(record)
                out.flush()
                os.fsync(out.fileno())
                bar.update(min(self.batch_size, len(todo) - start))
        bar.close()
        summary = self.summarize(records)
        (self.out_dir / "summary.json").write_text(json.dumps(summary, indent=2))
        if tracker:
            tracker.finish(summary)
        print_summary(summary)
        return summary

    def warm_up(self, samples: list[questions.Sample]) -> None:
        """First touches of fresh memory are slow: run each method once, untimed, at the
        run's batch size."""
        prompts = [self.prompt_ids([{"role": "user", "content": s.turns[0]}], s.id) for s in samples]
        limits = Limits(min(16, self.limits.max_new_tokens), self.limits.stop_token_ids)
        for method in filter(None, (self.method, self.baseline)):
            generate_batch(self.target, method, prompts, self.sampling, limits, [self.generator(s.id) for s in samples])

    def run_batch(self, samples: list[questions.Sample], baseline_first: bool, bar) -> list[dict]:
        """The method and the baseline back to back on the same batch of samples."""
        runs = {}
        order = [("baseline", self.baseline), ("method", self.method)]
        if not baseline_first:
            order.reverse()
        for role, method in order:
            if method is not None:
                runs[role] = self.decode_turns(samples, method, bar if role == "method" else None)
        records = []
        for i, sample in enumerate(samples):
            record = {"id": sample.id, "category": sample.category, "method": asdict(runs["method"][i])}
            if "baseline" in runs:
                record["baseline"] = asdict(runs["baseline"][i])
                record["baseline_first"] = baseline_first
            records.append(record)
        return records

    def decode_turns(self, samples: list[questions.Sample], method: Method, bar) -> list[MethodRun]:
        """All turns of a batch of conversations, turn by turn (a batch holds the samples
        that have that turn); each later turn sees this method's own answers."""
        messages = [[] for _ in samples]
        results: list[list[tuple[int, object, str]]] = [[] for _ in samples]
        generators = [self.generator(s.id) for s in samples]
        batch_seconds = verify_seconds = 0.0
        for turn in range(max(len(s.turns) for s in samples)):
            rows = [i for i, s in enumerate(samples) if turn < len(s.turns)]
            for i in rows:
                messages[i].append({"role": "user", "content": samples[i].turns[turn]})
            prompts = [self.prompt_ids(messages[i], samples[i].id) for i in rows]
            progress = Progress(bar) if bar is not None else None
            generations = generate_batch(
                self.target, method, prompts, self.sampling, self.limits, [generators[i] for i in rows],
                decode=self.tokenizer.decode, on_step=progress,
            )
            batch_seconds += generations[0].batch_seconds
            verify_seconds += generations[0].verify_seconds
            for i, prompt, result in zip(rows, prompts, generations):
                text = self.tokenizer.decode(result.ids, skip_special_tokens=True)
                messages[i].append({"role": "assistant", "content": text})
                results[i].append((len(prompt), result, text))
        return [self.method_run(runs, len(samples), batch_seconds, samples[0].id, verify_seconds) for runs in results]

    @staticmethod
    def method_run(runs: list, batch_size: int, batch_seconds: float, batch_id: str, verify_seconds: float) -> MethodRun:
        """One sample's turns, summed."""
        return MethodRun(
            new_tokens=sum(len(r.ids) for _, r, _ in runs),
            seconds=sum(r.seconds for _, r, _ in runs),
            prefill_seconds=sum(r.prefill_seconds for _, r, _ in runs),
            target_forwards=sum(r.target_forwards for _, r, _ in runs),
            draft_forwards=sum(r.draft_forwards for _, r, _ in runs),
            accept_lengths=[n for _, r, _ in runs for n in r.accept_lengths],
            turn_ids=[r.ids for _, r, _ in runs],
            turn_texts=[t for _, _, t in runs],
            stop_reasons=[r.stop_reason for _, r, _ in runs],
            prompt_tokens=[n for n, _, _ in runs],
            nll=sum(r.nll for _, r, _ in runs),
            step_draft_forwards=[n for _, r, _ in runs for n in r.step_draft_forwards],
            tree_widths=[w for _, r, _ in runs for w in r.tree_widths],
            accepted_ranks=[a for _, r, _ in runs for a in r.accepted_ranks],
            verifier_notes=notes_of([r for _, r, _ in runs]),
            batch_size=batch_size,
            batch_seconds=batch_seconds,
            verify_seconds=verify_seconds,
            batch_id=batch_id,
        )

    def prompt_ids(self, messages: list[dict], sample_id: str) -> list[int]:
        ids = chat_prompt(self.tokenizer, messages)
        room = self.context_length - self.limits.max_new_tokens - TREE_MARGIN
        if len(ids) <= room:
            return ids
        require(
            bool(self.cfg["gen"].get("truncate_prompt")) and room > 0,
            "gen.truncate_prompt",
            f"sample {sample_id}: prompt of {len(ids)} tokens + gen.max_new_tokens={self.limits.max_new_tokens} "
            f"does not fit the model context of {self.context_length}; set gen.truncate_prompt=true to keep its last {max(room, 0)} tokens",
        )
        return ids[-room:]

    def generator(self, sample_id: str) -> torch.Generator:
        """Seeded per sample, so a resumed run draws what an uninterrupted one would."""
        digest = hashlib.sha256(f"{self.cfg['seed']}/{sample_id}".encode()).digest()
        return torch.Generator(device=self.target.device).manual_seed(int.from_bytes(digest[:8], "little"))

    def summarize(self, records: list[dict]) -> dict:
        decisions_file = self.out_dir / "decisions.json"
        decisions = json.loads(decisions_file.read_text()) if decisions_file.is_file() else {}
        by_id = {r["id"]: r for r in records}
        ordered = [by_id[s.id] for s in self.samples if s.id in by_id]
        method_runs = [r["method"] for r in ordered]
        summary = {
            "method": self.cfg["method"]["name"],
            "model": self.cfg["model"]["name"],
            "dataset": self.cfg["dataset"]["name"],
            "config_hash": config_hash(self.cfg),
            "results": {**speed.totals(method_runs), **speed.intervals(method_runs)},
            "environment": {**environment(self.cfg, decisions), "others_cores": mean_others_cores(ordered)},
            "out_dir": str(self.out_dir),
            "config": self.cfg,
        }
        if decisions.get("tree_choice"):
            summary["tree_choice"] = decisions["tree_choice"]
        if decisions.get("profile") and method_runs:
            summary["cost_model"] = predict(method_runs, CostProfile.from_json(decisions["profile"]), decisions.get("drafter"), decisions.get("tree_overhead"))
        scored = [s for s in self.samples if s.id in by_id]
        if self.quality_metrics and scored:
            summary["quality"] = self.quality(scored, [r["turn_texts"] for r in method_runs])
        baseline_runs, source = self.baseline_runs(ordered)
        if baseline_runs:
            if self.quality_metrics and len(baseline_runs) == len(scored):
                summary["baseline_quality"] = self.quality(scored, [b["turn_texts"] for _, b in baseline_runs])
            summary["baseline"] = speed.totals([b for _, b in baseline_runs])
            summary["baseline_source"] = source
            method_side = [m for m, _ in baseline_runs]
            summary["agreement_with_baseline"] = speed.agreement(method_side, [b for _, b in baseline_runs])
            if source != "cached run, outputs only":
                summary.update(speed.speedup(method_side, [b for _, b in baseline_runs]))
        return summary

    def quality(self, samples: list[questions.Sample], texts: list[list[str]]) -> dict:
        """The dataset's metrics; a failing one (e.g. the judge endpoint is down) is recorded,
        not raised, so the speed results of a finished run are still written."""
        try:
            return quality.score(self.quality_metrics, samples, texts)
        except Exception as error:  # noqa: BLE001
            print(f"warning: quality metrics failed: {error!r}; re-run the same command to retry", file=sys.stderr)
            return {"error": repr(error)}

    def baseline_runs(self, ordered: list[dict]) -> tuple[list[tuple[dict, dict]], str | None]:
        if self.paired:
            return [(r["method"], r["baseline"]) for r in ordered if "baseline" in r], "paired in this run (side by side)"
        if self.cached_baseline is not None:
            pairs = [(r["method"], self.cached_baseline[r["id"]]) for r in ordered if r["id"] in self.cached_baseline]
            if self.cfg["baseline"].get("cached_timings"):
                return pairs, "cached run, timings NOT side by side"
            return pairs, "cached run, outputs only"
        return [], None


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
        self.bar.set_postfix(tok_s=f"{self.tokens / max(elapsed, 1e-9):.1f}", tau=f"{self.tokens / self.steps:.2f}", refresh=False)
        if self.calls % 8 == 0:
            self.bar.refresh()


_loaded_target: dict = {}


def load_target(entry: dict, dtype: str, device: str):
    """(model, tokenizer), reused by the next run in this process when it asks for the same
    model: the jobs of a Hydra multirun (one process) then load the target only once."""
    key = json.dumps([entry, dtype, device], sort_keys=True, default=str)
    if key not in _loaded_target:
        _loaded_target.clear()
        _loaded_target[key] = registry.load(entry, dtype, device)
    return _loaded_target[key]


def notes_of(results) -> dict:
    notes = {}
    for result in results:
        merge_notes(notes, result.verifier_notes)
    return notes


def chat_prompt(tokenizer, messages: list[dict]) -> list[int]:
    """Token ids of a conversation under the model's chat template (plain text without one)."""
    if tokenizer.chat_template:
        return list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False))
    text = "\n\n".join(m["content"] for m in messages)
    return tokenizer(text).input_ids


def stop_token_ids(model, tokenizer, model_cfg: dict) -> set[int]:
    ids = set(model_cfg.get("stop_token_ids") or [])
    for source in (getattr(model, "generation_config", None), tokenizer):
        eos = getattr(source, "eos_token_id", None)
        if eos is not None:
            ids.update(eos if isinstance(eos, list) else [eos])
    return ids


def read_records(path: Path) -> list[dict]:
    """Finished samples of an earlier, possibly interrupted run; a torn last line
    (killed mid-write) is dropped from the file so appends stay valid JSONL."""
    if not path.exists():
        return []
    records, good_bytes = [], 0
    with open(path, "rb") as f:
        for line in f:
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                break
            good_bytes += len(line)
    with open(path, "rb+") as f:
        f.truncate(good_bytes)
    return records


def cached_baseline_dir(cfg: dict) -> Path:
    """Where an earlier `method=<baseline>` run with identical settings wrote its samples."""
    ar_cfg = dict(cfg, method=cfg["baseline"]["method"])
    return Path(cfg["output_root"]) / ar_cfg["method"]["name"] / run_name(ar_cfg)


def cached_baseline_dtype(cfg: dict) -> str | None:
    """The dtype the cached baseline run decoded in (None: it recorded none)."""
    decisions = cached_baseline_dir(cfg) / "decisions.json"
    return json.loads(decisions.read_text()).get("dtype") if decisions.is_file() else None


def load_cached_baseline(cfg: dict) -> dict[str, dict]:
    """Per-sample AR results from an earlier `method=<baseline>` run with identical settings."""
    ar_cfg = dict(cfg, method=cfg["baseline"]["method"])
    directory = cached_baseline_dir(cfg)
    records = read_records(directory / "samples.jsonl")
    if not records:
        raise ConfigError(
            f"baseline.mode: cached, but no finished {ar_cfg['method']['name']} run with these settings at {directory}; "
            "run it first (same overrides, method=ar) or use baseline.mode=paired"
        )
    return {r["id"]: r["method"] for r in records}


def mean_others_cores(records: list[dict]) -> float | None:
    """Cores other processes kept busy while these samples were timed, on average (the
    speed figures of a run beside another job are not this machine's)."""
    known = [r["others_cores"] for r in records if r.get("others_cores") is not None]
    return round(sum(known) / len(known), 2) if known else None


def environment(cfg: dict, decisions: dict) -> dict:
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True, cwd=Path(__file__).parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = None
    return {
        "git_commit": commit,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": sys.version.split()[0],
        "torch_threads": torch.get_num_threads(),
        "dtype": decisions.get("dtype", cfg["hardware"]["dtype"]),
        "dtype_rule": (decisions.get("dtype_choice") or {}).get("rule") if cfg["hardware"]["dtype"] == "auto" else "set by hardware.dtype",
        "dtype_note": (decisions.get("dtype_choice") or {}).get("note") if cfg["hardware"]["dtype"] == "auto" else None,
        "forward": decisions.get("forward"),
        "device": cfg["hardware"]["device"],
        "hardware": cfg["hardware"]["name"],
        "fingerprint": decisions.get("fingerprint") or device_fingerprint(cfg["hardware"]["device"], torch.get_num_threads()),
        "seed": cfg["seed"],
    }
