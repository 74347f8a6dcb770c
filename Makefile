# Two entry points for a fresh machine: `make demo` and `make test`.
# Everything installs into .venv; torch==2.13.0 goes first because on these machines it is a CPU wheel on
# local disk, while an unpinned `torch` requirement (pulled in by stable-baselines3) would fetch a CUDA build.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
TORCH_VERSION ?= 2.13.0

.PHONY: demo test lint typecheck bench docs clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# Core + MiniGrid: enough for the demo.
$(VENV)/.core-installed: pyproject.toml | $(PY)
	$(PIP) install --quiet torch==$(TORCH_VERSION)
	$(PIP) install --quiet -e ".[minigrid,cli]"
	touch $@

# Everything: tests, Procgen, sb3-contrib and the benchmark peers.
$(VENV)/.all-installed: pyproject.toml | $(PY)
	$(PIP) install --quiet torch==$(TORCH_VERSION)
	$(PIP) install --quiet -e ".[test,procgen,minigrid,contrib,bench,cli,docs,distributed,rllib]"
	touch $@ $(VENV)/.core-installed

demo: $(VENV)/.core-installed
	$(PY) -m plr_gym.demo

lint: $(VENV)/.all-installed
	$(PY) -m ruff check src tests benchmarks examples
	$(PY) -m ruff format --check src tests benchmarks examples

typecheck: $(VENV)/.all-installed
	$(PY) -m mypy

test: $(VENV)/.all-installed lint typecheck
	$(PY) -m pytest -n 2 -q

bench: $(VENV)/.all-installed
	$(PY) benchmarks/sampler_speed.py
	$(PY) benchmarks/procgen_switch.py
	$(PY) benchmarks/procgen_throughput.py
	$(PY) benchmarks/per_speed.py

docs: $(VENV)/.all-installed
	$(PY) -m mkdocs build --strict -d site

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
