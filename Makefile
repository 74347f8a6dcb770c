# Two entry points for a fresh machine: `make demo` and `make test`.
#
# `make test` checks two stacks (docs/install.md), each in its own venv:
#   .venv     Python 3.11 (PYTHON), numpy 1.26, Procgen from procgen-mirror (legacy gym), Ray and RLlib, verl;
#   .venv313  Python 3.13 (PYTHON313), numpy 2, Procgen from procgen-gym (no gym), Ray core, the notebooks, TRL.
# RLlib is not on the 3.13 stack: RLlib 2.60 pins gymnasium==1.2.2, procgen-gym needs gymnasium>=1.2.3.
# A test whose package a stack lacks skips, naming the stack; PLR_GYM_ALLOWED_SKIPS lists the only skips each
# stack allows, and any other skip fails the run (tests/conftest.py).
#
# torch==2.13.0 goes first into .venv because on these machines it is a CPU wheel on local disk, while an
# unpinned `torch` requirement (pulled in by stable-baselines3) would fetch a CUDA build. Python 3.13 has no
# local wheel: there `torch` comes from the package index (a CUDA build, which runs on the CPU).
#
# The venvs are filled by uv (`uv pip install`, the same requirements; its parallel downloads, unpacking and
# bytecode compilation save minutes on a fresh clone), installed into each venv beside pip. uv reads none of
# pip's configuration: .ci/uv_args.py passes it pip's find-links, indexes and constraints, so both install from
# the same places. `make test INSTALLER=pip` installs with pip instead.
PYTHON ?= python3
PYTHON313 ?= /root/.pyenv/versions/3.13.0/bin/python3.13
PYTHON312 ?= /root/.pyenv/versions/3.12.1/bin/python3.12
VENV ?= .venv
VENV313 ?= .venv313
VENV312 ?= .venv312
PY := $(VENV)/bin/python
PY313 := $(VENV313)/bin/python
PY312 := $(VENV312)/bin/python
PIP := $(PY) -m pip
PIP313 := $(PY313) -m pip
INSTALLER ?= uv
UV_ARGS = $(shell $(PYTHON) .ci/uv_args.py)
# $(call install,VENV): the install command for that venv (uv is added to a venv made before it was used);
# bytecode is compiled at install, as pip does
install = $(if $(filter uv,$(INSTALLER)),test -x $(1)/bin/uv || $(1)/bin/python -m pip install --quiet uv; \
	$(1)/bin/uv pip install --quiet --compile-bytecode --python $(1)/bin/python $(UV_ARGS),\
	$(1)/bin/python -m pip install --quiet)
TORCH_VERSION ?= 2.13.0
PYTEST_ARGS ?= -n 2 --dist worksteal -q --durations=20
EXTRAS := test,procgen,minigrid,contrib,bench,cli,docs,distributed,rllib,verl
EXTRAS313 := test,procgen,minigrid,contrib,bench,cli,notebooks,distributed,trl,jax,jax-examples
# The 3.13 stack runs what depends on the stack: Procgen (procgen-gym) and its benchmarks' quick runs, the
# examples and notebooks, Ray core, the packaging and README checks, and the numpy-level core (sampler,
# scoring, replay, wrappers, doctests). To shorten .ci/run (target 20 min on 2 cores; a fresh clone took
# 18.7 min with three stacks at 6e71f2b) it leaves out the SB3 training, callback and CLI suites and the other benchmarks'
# quick runs, which .venv runs and which do not touch the stacks' differences, and the mkdocs build;
# `make test-313 TESTS313=` runs everything there.
# plr_gym/rllib.py cannot be imported without RLlib: its doctests skip (--doctest-ignore-import-errors, on
# this stack only; the skip guard allows that one module).
SB3_SUITES := training learning_quick per_learning_quick researcher cli rl_zoo3 reliability per_algorithms \
	per_levels callback curriculum_options run_directory
# The paper preset's and the campaign's CPU smoke runs: the same Python on both builds (each build's
# Procgen is checked byte for byte by the exactness tests, and trained on by examples/ppo_procgen.py).
PRESET_SMOKE := tests/test_paper_campaign.py::test_cpu_smoke_campaign_runs_in_parallel_then_resumes \
	tests/test_presets.py::test_cpu_smoke_run_of_paper_procgen_uses_impala_and_reward_normalisation
NON_PROCGEN_BENCH := quick_benchmark_reports_both_samplers overhead_quick_reports_every_variant \
	per_speed_quick replay_memory_quick
TESTS313 ?= $(SB3_SUITES:%=--ignore=tests/test_%.py) \
	$(NON_PROCGEN_BENCH:%=--deselect tests/test_benchmarks_quick.py::test_%) \
	--deselect tests/test_docs.py::test_docs_build_strict $(PRESET_SMOKE:%=--deselect %)
# The 3.11 stack leaves to the 3.13 stack what CI needs only once and what users run on Colab's stack
# (Python 3.13 + numpy 2): the notebooks end to end, the README's Python blocks and the examples that do
# not touch Procgen or RLlib. The Ray level-source benchmark's quick run is left to the 3.11 stack (Ray core
# is the same on both; test_distributed runs on both).
STACK_FREE_EXAMPLES := ppo_minigrid frame_stack_dqn perdqn_cartpole robust_plr_generator custom_loop_vector
TESTS311 ?= --deselect "tests/test_examples.py::test_notebook_runs[plr_minigrid.ipynb]" \
	--deselect "tests/test_examples.py::test_notebook_runs[plr_procgen.ipynb]" \
	$(STACK_FREE_EXAMPLES:%="--deselect=tests/test_examples.py::test_script_runs[%.py]") \
	--deselect tests/test_docs.py::test_readme_python_blocks_run
TESTS313 += --deselect tests/test_distributed.py::test_remote_source_benchmark_quick
# The Procgen 0.9.5-vs-0.10.7 comparison records through procgen-mirror's gym3 API (the 3.11 stack's build).
TESTS313 += --deselect tests/test_benchmarks_quick.py::test_procgen_fork_comparison_quick
# examples/jax_ppo_plr.py runs (and must learn) in tests/test_jax_example.py: one compile of it, not two.
TESTS313 += --deselect "tests/test_examples.py::test_script_runs[jax_ppo_plr.py]"
# The LLM extras need different transformers and numpy: verl 0.7 (numpy < 2) runs on .venv, TRL 1.16 on .venv313.
# verl 0.9 (numpy 2, Python <= 3.12, transformers < 5.11) resolves with neither: a third venv, .venv312 (Python
# 3.12, numpy 2, torch from the index as on .venv313), holds only the verl-v1 extra and pytest and runs only
# tests/test_verl.py (verl 0.9's V1 trainer over a real TransferQueue; the sampler's tests skip: verl >= 0.8
# has no AbstractCurriculumSampler).
# JAX >= 0.11 needs Python >= 3.12: plr_gym.jax (and navix, for examples/jax_ppo_plr.py) is tested on .venv313 only.
ALLOWED_SKIPS311 := tests/test_trl.py,tests/test_jax.py,tests/test_jax_incremental.py,tests/test_jax_example.py,tests/test_examples.py::test_script_runs[[]jax_ppo_plr.py[]],tests/test_verl.py::test_v1_*
VERL_SAMPLER_TESTS := verl_builds_the_sampler_from_its_config training_loop_concentrates_on_the_learnable_third \
	plus_minus_one_rewards_with_range_and_threshold_from_the_yaml_config \
	checkpoint_through_the_stateful_dataloader_resumes_the_same_draws \
	bad_batches_are_refused_with_the_curriculum_unchanged sampler_maps_labels_to_positions_and_refuses_duplicate_labels
comma := ,
ALLOWED_SKIPS312 := $(subst $() ,$(comma),$(VERL_SAMPLER_TESTS:%=tests/test_verl.py::test_%))
ALLOWED_SKIPS313 := tests/test_rllib.py,src/plr_gym/rllib.py,tests/test_verl.py,tests/test_examples.py::test_script_runs[[]rllib_minigrid.py[]],tests/test_bad_input_43.py::test_d13_the_verl_ledger_*

.PHONY: demo test test-311 test-312 test-313 lint typecheck dist bench docs clean

$(PY):
	@echo "== venv $(VENV) $$(date -u +%T)"
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(PY313):
	@echo "== venv $(VENV313) $$(date -u +%T)"
	$(PYTHON313) -m venv $(VENV313)
	$(PIP313) install --quiet --upgrade pip

# Core + MiniGrid + the CLI's plots and TensorBoard: enough for the demo and the README's quick starts.
$(VENV)/.core-installed: pyproject.toml | $(PY)
	$(call install,$(VENV)) torch==$(TORCH_VERSION)
	$(call install,$(VENV)) -e ".[minigrid,cli]"
	touch $@

# Everything: tests, Procgen, sb3-contrib, the benchmark peers, Ray and RLlib.
$(VENV)/.all-installed: pyproject.toml | $(PY)
	@echo "== install .venv $$(date -u +%T)"
	$(call install,$(VENV)) torch==$(TORCH_VERSION)
	$(call install,$(VENV)) -e ".[$(EXTRAS)]"
	touch $@ $(VENV)/.core-installed

# numpy>=2 on the command line: the install fails if anything (the procgen extra included) wants numpy 1.
$(VENV313)/.all-installed: pyproject.toml | $(PY313)
	@echo "== install .venv313 $$(date -u +%T)"
	$(call install,$(VENV313)) torch
	$(call install,$(VENV313)) -e ".[$(EXTRAS313)]" "numpy>=2"
	touch $@

$(PY312):
	@echo "== venv $(VENV312) $$(date -u +%T)"
	$(PYTHON312) -m venv $(VENV312)
	$(PY312) -m pip install --quiet --upgrade pip

# verl 0.9 and its V1 trainer's TransferQueue (the verl-v1 extra) and pytest: what tests/test_verl.py needs.
$(VENV312)/.all-installed: pyproject.toml | $(PY312)
	@echo "== install .venv312 $$(date -u +%T)"
	$(call install,$(VENV312)) torch
	$(call install,$(VENV312)) -e ".[verl-v1]" "pytest>=7" "hypothesis>=6"
	touch $@

demo: $(VENV)/.core-installed
	$(PY) -m plr_gym.demo

lint: $(VENV)/.all-installed
	@echo "== $@ $$(date -u +%T) load $$(cut -d" " -f1-3 /proc/loadavg)"
	$(PY) -m ruff check src tests benchmarks examples .ci
	$(PY) -m ruff format --check src tests benchmarks examples .ci

typecheck: $(VENV)/.all-installed
	@echo "== $@ $$(date -u +%T) load $$(cut -d" " -f1-3 /proc/loadavg)"
	$(PY) -m mypy

# The release artifacts: sdist and wheel (isolated build, as a release makes them), checked by twine;
# tests/test_packaging.py installs this wheel in a clean venv (PLR_GYM_DIST).
dist: dist/.built

# A stamp, so that `make test` builds the artifacts once (the test targets need them; a phony prerequisite
# would rebuild them in each recursive make). Rebuilt when anything that goes into them changes.
dist/.built: $(VENV)/.all-installed pyproject.toml MANIFEST.in README.md LICENSE $(shell find src -name '*.py' -o -name py.typed)
	@echo "== dist $$(date -u +%T) load $$(cut -d" " -f1-3 /proc/loadavg)"
	rm -rf dist
	$(PY) -m build --outdir dist .
	$(PY) -m twine check --strict dist/*
	touch $@

# On 2 cores: the two installs overlap (downloads, unpacking and disk writes) and the build follows .venv's;
# ruff and mypy (one core, about a minute) run beside the 3.11 suite; the two suites run one after the other.
# Side by side (make -j4, tried 2026-11-26) they took as long in all and Ray's restart and benchmark
# timeouts failed under the load. Each target's output is printed whole when it ends (--output-sync); the
# "== target HH:MM:SS" lines say when each started.
test:
	@echo "== $@ $$(date -u +%T) load $$(cut -d" " -f1-3 /proc/loadavg)"
	$(MAKE) -j3 --output-sync=target dist $(VENV313)/.all-installed $(VENV312)/.all-installed
	$(MAKE) -j3 --output-sync=target lint typecheck test-311
	$(MAKE) test-313
	$(MAKE) test-312
	@echo "== done $$(date -u +%T)"

test-311: $(VENV)/.all-installed dist
	@echo "== $@ $$(date -u +%T) load $$(cut -d" " -f1-3 /proc/loadavg)"
	$(PY) .ci/check_stack.py py311
	PLR_GYM_ALLOWED_SKIPS=$(ALLOWED_SKIPS311) PLR_GYM_DIST=dist $(PY) -m pytest $(PYTEST_ARGS) $(TESTS311)

test-313: $(VENV313)/.all-installed dist
	@echo "== $@ $$(date -u +%T) load $$(cut -d" " -f1-3 /proc/loadavg)"
	$(PY313) .ci/check_stack.py py313
	PLR_GYM_ALLOWED_SKIPS=$(ALLOWED_SKIPS313) PLR_GYM_DIST=dist $(PY313) -m pytest $(PYTEST_ARGS) \
		--doctest-ignore-import-errors $(TESTS313)

# verl 0.9 only (tests/test_verl.py, one process: the module's TransferQueue fixture starts Ray once).
test-312: $(VENV312)/.all-installed
	@echo "== $@ $$(date -u +%T) load $$(cut -d" " -f1-3 /proc/loadavg)"
	$(PY312) .ci/check_stack.py py312
	PLR_GYM_ALLOWED_SKIPS=$(ALLOWED_SKIPS312) $(PY312) -m pytest -q --durations=10 -p no:cacheprovider tests/test_verl.py

bench: $(VENV)/.all-installed
	$(PY) benchmarks/sampler/sampler_speed.py
	$(PY) benchmarks/procgen/procgen_switch.py
	$(PY) benchmarks/procgen/procgen_throughput.py
	$(PY) benchmarks/replay/per_speed.py

docs: $(VENV)/.all-installed
	$(PY) -m mkdocs build --strict -d site

clean:
	rm -rf $(VENV) $(VENV313) $(VENV312) dist build .mypy_cache .ruff_cache .pytest_cache
