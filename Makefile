# Every target creates the virtualenv it needs; nothing else has to be installed by hand.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# make lint [CONFIGS="a.yaml b.yaml"] [RUNNERS=r.yaml] [CHANGELOG=c.yaml] [PROFILE=strict|inferencex]
#           [BASE=<git ref>] [REPO=org/repo]
LINT_ARGS = $(if $(PROFILE),--profile $(PROFILE)) $(if $(RUNNERS),--runners $(RUNNERS)) \
	$(if $(CHANGELOG),--changelog $(CHANGELOG)) $(if $(BASE),--base $(BASE)) $(if $(REPO),--repo $(REPO)) \
	$(CONFIGS)

.PHONY: help venv lint render submit golden test schema bench-lint clean

help:
	@echo "make render [CONFIG=<key>] [OUT=out]   render launch files for every variant"
	@echo "make submit CONFIG=<key> [VARIANT=<v>] [DRY_RUN=1]   sbatch one variant"
	@echo "make lint       validate configs/*-master.yaml, configs/runners.yaml, perf-changelog.yaml"
	@echo "make test       the whole test suite"
	@echo "make schema     regenerate the JSON Schemas under schemas/json/"
	@echo "make bench-lint time linting the InferenceX reference corpus"

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $@

venv: $(STAMP)

lint: $(STAMP)
	@$(PY) -m schemas.lint $(LINT_ARGS)

render: $(STAMP)
	@$(PY) -m recipes.render $(CONFIG) $(if $(OUT),--out $(OUT))

submit: $(STAMP)
	@$(PY) -m recipes.submit $(CONFIG) $(if $(VARIANT),--variant $(VARIANT)) $(if $(DRY_RUN),--dry-run) \
		$(if $(OUT),--out $(OUT))

# Regenerate the golden files after an intended change; review `git diff tests/golden` before committing.
golden: $(STAMP)
	$(PY) -m tests.recipes.golden

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

schema: $(STAMP)
	$(PY) -m schemas.export

bench-lint: $(STAMP)
	$(PY) tests/bench/bench_lint.py

clean:
	rm -rf out .pytest_cache .hypothesis
