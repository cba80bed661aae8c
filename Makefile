# agentgym: the two commands of the README, and the inner-loop helpers.
#
#   make quickstart   create .venv, install, run the main job: a tiny local model learns Maze-v0 on CPU
#   make test         install what the tests need (apt packages, Docker engine, venv) and run every suite
#   make test-fast    the suites that need no container engine, browser, Ray or vLLM (inner loop)
#   make test-exhaustive  the sweeps over every shipped task (make test runs samples of each) and the
#                         longer variants marked `extended`

SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
TEST_EXTRAS := train,dev,postgres,docker,tools,browser,serve,ray
PYTEST_ARGS ?=
TEST_WORKERS ?= 2

.PHONY: quickstart test test-fast test-exhaustive setup-test venv lint bench clean

venv:
	bash scripts/venv.sh train

quickstart: venv
	$(VENV)/bin/agentgym envs check Maze-v0 --env-kwargs '{"difficulty": "open"}'
	$(VENV)/bin/agentgym train configs/quickstart.yaml

# the Docker engine and base image (debootstrap: mostly downloads and disk) are made while the venvs install; its
# output is printed when both are done
setup-test:
	bash scripts/apt.sh
	log=$$(mktemp); bash scripts/docker.sh > $$log 2>&1 & engine=$$!; \
	bash scripts/venv.sh $(TEST_EXTRAS) && bash scripts/vllm-venv.sh; venvs=$$?; \
	wait $$engine; docker=$$?; cat $$log; rm -f $$log; \
	[ $$docker -eq 0 ] || echo "scripts/docker.sh failed (exit $$docker): its output is above"; \
	exit $$(( venvs || docker ))

# two passes: every suite but the `serial` ones on TEST_WORKERS pytest-xdist workers (a file's tests stay on one
# worker), then the `serial` ones alone (the short soaks, the c10d and killed-rank torchrun runs); fails if either failed, and
# names every failed test of both passes on its last lines (a log cut to its tail still says what failed)
test: setup-test
	log=$$(mktemp); \
	$(PY) -m pytest -q -rfEs --durations=25 -n $(TEST_WORKERS) --dist loadfile -m "not exhaustive and not extended and not serial" \
	  $(PYTEST_ARGS) 2>&1 | tee $$log; parallel=$${PIPESTATUS[0]}; \
	$(PY) -m pytest -q -rfEs --durations=10 -m "serial and not exhaustive and not extended" $(PYTEST_ARGS) 2>&1 | tee -a $$log; \
	serial=$${PIPESTATUS[0]}; \
	[ $$serial -eq 5 ] && serial=0; [ $$parallel -eq 5 ] && parallel=0; \
	echo "make test: parallel pass exit $$parallel, serial pass exit $$serial"; grep -E '^(FAILED|ERROR) ' $$log; rm -f $$log; \
	exit $$(( parallel || serial ))

test-exhaustive: setup-test
	$(PY) -m pytest -q -rs -m "exhaustive or extended" $(PYTEST_ARGS)

test-fast:
	bash scripts/venv.sh $(TEST_EXTRAS)
	$(PY) -m pytest -q -x -m "not docker and not browser and not ray and not vllm and not slow and not exhaustive" $(PYTEST_ARGS)

lint:
	$(VENV)/bin/ruff check .

bench:
	$(PY) bench/store.py

clean:
	rm -rf runs artifacts .pytest_cache
