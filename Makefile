# One command sets up and runs the CPU demo, one sets up and runs the tests.
#   make demo   - venv + torch 2.13.0 CPU + teperf, then a real base-vs-head comparison
#   make test   - same set-up, then the test suite (what .ci/run calls)
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.teperf-installed

.PHONY: setup demo test test-fast lint docs format bench bench-schedules bench-plan calibrate bench-lanes bench-spawn bench-bisect nightly-demo clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	# torch first and pinned: 2.13.0 CPU installs from local disk; an unpinned
	# torch would pull a multi-GB CUDA build.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

demo: setup
	$(BIN)/teperf compare --config demo --base-path examples/planted/base --head-path examples/planted/head

# Two at a time (pytest-xdist, one per core; --dist loadscope keeps a module's tests, and its module-scoped
# fixtures, on one worker; --no-loadscope-reorder keeps tests/conftest.py's longest-first order of modules,
# where xdist would put the modules with the most tests first): the in-process tests and the real-worker
# ones. Those that assert on live timing (statistical) plant changes many times the noise, most with the load
# rule off, and passed one at a time at load 10 on the 2-core VM (calibration's loose rates too, and beside
# this part's other tests at load 5-8): one test beside them is load 2. Then, one at a time, those that must
# be alone (every core for --lanes, --precision's time budget, a 5 s start bound, the own-time ranking) and
# the browser's; both parts run, and either failing fails the target. compileall first: where
# PYTHONDONTWRITEBYTECODE is set (as on this project's VMs), each of the suite's hundreds of teperf processes
# would otherwise compile teperf's modules again (0.27 s of CPU a CLI start).
test: setup
	$(BIN)/python -m compileall -q teperf benchmarks >/dev/null
	$(BIN)/python -m pytest -q -ra -n 2 --dist loadscope --no-loadscope-reorder -m "not browser and not alone"; a=$$?; \
	$(BIN)/python -m pytest -q -ra -m "browser or alone"; b=$$?; exit $$(( a || b ))

test-fast: setup
	$(BIN)/python -m pytest -q -ra -n 2 -m "not browser and not real_worker and not slow"

# Formatter check, linter (pyproject.toml [tool.ruff]) and the layers contract ([tool.importlinter]);
# `make format` rewrites the files.
lint: setup
	$(BIN)/ruff format --check --diff teperf tests benchmarks examples scripts docs/_hooks
	$(BIN)/ruff check teperf tests benchmarks examples scripts docs/_hooks
	$(BIN)/lint-imports

# The manual (docs/, mkdocs.yml) into site/; --strict fails on a broken link or a page left out of the nav.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

format: setup
	$(BIN)/ruff format teperf tests benchmarks examples scripts
	$(BIN)/ruff check --fix teperf tests benchmarks examples scripts

# A small real nightly on the CPU over several commits of a fixture repo, then the dashboard.
nightly-demo: setup
	$(BIN)/python examples/nightly_demo.py --out results/nightly-demo
	@echo "open results/nightly-demo/site/index.html"

# What the engine itself costs (start-up, round trip, time to first trial): figures, not asserts.
bench: setup
	$(BIN)/python benchmarks/engine_costs.py

# The PR thread's schedule vs teperf's default, A/A: half-width, spread, wall time, false changes.
bench-schedules: setup
	$(BIN)/python benchmarks/schedule_quality.py --repeats 3

# --schedule auto against what the machine allows: the demo for a minute, the schedule planning itself; per
# cell the half-width, the width a minute gives, couple and between-pair noise; pairs a minute against the
# start limit (BENCH_PLAN_ARGS: other compare args after --, e.g. a GPU config). Figures, not asserts.
BENCH_PLAN_ARGS ?=
bench-plan: setup
	$(BIN)/python benchmarks/schedule_plan.py --run $(BENCH_PLAN_ARGS)

# How often each kind of verdict lies (issue 32): A/A and planted (1x/2x/4x the min effect) demo compares per
# verdict kind (one lane, two lanes, fork-server generations, --precision), quiet, with a CPU hog on the other
# core, and busy (a hog on every core and a second compare beside). Figures, not asserts
# (tests/test_calibration.py is the CI's small version); CALIBRATE_ARGS for more runs.
# Then the CPU half of issue 56's response curve (benchmarks/plant_truth.py, about 3 minutes): planted
# 0/50/100/200 us against their in-process truth (one worker-like process, ABBA), teperf's estimate and the
# fits; PLANT_TRUTH_ARGS for the full curve (docs/statistics.md has the command).
CALIBRATE_ARGS ?= --runs 2
PLANT_TRUTH_ARGS ?= --sizes 0,50,100,200 --kinds thread,arith --max-s 5 --min-blocks 20 --processes 4 \
	--schedule "--rounds 1 --trials 4 --iters 30 --warmup 10"
calibrate: setup
	$(BIN)/python benchmarks/calibration.py $(CALIBRATE_ARGS) --markdown results/calibration.md
	$(BIN)/python benchmarks/plant_truth.py $(PLANT_TRUTH_ARGS) --out results/plant-truth

clean:
	rm -rf $(VENV) site .pytest_cache

# Parallel lanes (--lanes 1, 2, 4, 8 as the cores allow): A/A false changes, a planted change, half-width per
# minute, per-lane agreement, and whether lanes slow each other's steps. Figures, not asserts.
bench-lanes: setup
	$(BIN)/python benchmarks/lanes_calibration.py --runs 4 --budget 60s

# --spawn fresh vs forkserver: pairs in the same budget, the planted change, A/A false changes. Figures, not asserts.
bench-spawn: setup
	$(BIN)/python benchmarks/spawn_calibration.py --runs 3 --budget 60s

# Bisect on histories whose answer is known: culprits by time, shares, probes, wall time (vq needs einops, einx; x-transformers loguru too).
bench-bisect: setup
	$(BIN)/pip install -q einops einx loguru
	$(BIN)/python benchmarks/bisect_calibration.py --results results/bench-bisect
