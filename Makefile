# mt_transformer: make demo (train on the built-in data), make test (the test suite).
PYTHON ?= python3
PIP = $(PYTHON) -m pip
DEMO_DATA = data/demo
DEMO_RUN = runs/demo

.PHONY: install demo test tour lint bench gpu-check clean

# Keeps a torch that is already installed; on a machine without CUDA installs the CPU build
# first (torch==2.13.0 here), so pip never pulls the multi-gigabyte CUDA wheels. The package
# itself must be installed from this directory (checked from /, where a plain import cannot see it).
install:
	@$(PYTHON) -c "import torch" 2>/dev/null || { \
	  if command -v nvidia-smi >/dev/null 2>&1; then $(PIP) install "torch>=2.3"; \
	  else $(PIP) install "torch==2.13.0" || $(PIP) install "torch>=2.3" --index-url https://download.pytorch.org/whl/cpu; fi; }
	@(cd / && $(PYTHON) -c "import mt_transformer, ctranslate2, pytest, xdist, datasets, sentencepiece, sacrebleu, safetensors, matplotlib, tensorboard, transformers, fastapi, uvicorn, httpx, selenium, bertviz, nbclient; \
	  assert mt_transformer.__file__.startswith('$(CURDIR)/')") 2>/dev/null \
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
	$(PYTHON) -m pytest -q -n 2 --dist loadgroup -m "not notebook"

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
	  $(PYTHON) scripts/engine_bench.py --checkpoint $(DEMO_RUN) --src $(DEMO_DATA)/test.en --ref $(DEMO_DATA)/test.de --save-layout; \
	else echo "make demo first for our engine and CTranslate2 side by side (scripts/engine_bench.py)"; fi

# On a CUDA machine: the gpu tests, precisions, speed and a killed run resumed; a report to paste (gpu-check.md).
gpu-check: install
	$(PYTHON) scripts/gpu_check.py

clean:
	rm -rf $(DEMO_DATA) $(DEMO_RUN) .pytest_cache
