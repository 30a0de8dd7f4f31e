# The two commands that do all the set-up on a fresh machine:
#   make run    venv + package + Mesa EGL/llvmpipe, then the default scene suite -> a trace
#   make test   the same set-up (+ Xvfb), then ruff, mypy and the whole test suite
# and, while working on the code:
#   make test-quick   the same set-up, then the tests not marked `slow` (under 2 min on 2 cores)
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.stamp-installed

.PHONY: run test test-quick lint typecheck fuzz bench bench-measure bench-noise bench-defaults sysdeps sysdeps-test sysdeps-bench bytecode clean

# setuptools' editable install says "Editable installation. ... be careful with folders ..." through Python's
# warnings, which pip shows even with --quiet; QUIET_EDITABLE ignores warnings whose text starts so, nothing else
QUIET_EDITABLE := PYTHONWARNINGS="ignore:Editable installation"

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(QUIET_EDITABLE) $(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# The project's own modules compiled once, before the many processes of the tests and benches start. pip compiles
# what it installs, but not an editable install's sources; where PYTHONDONTWRITEBYTECODE is set (as on some CI
# machines) every process would otherwise compile them again: 0.2 s of CPU a `katra3d` process, about a fifth of
# the CPU of the suite's command-line tests. Written by the writer a counted run's parent uses (harness/run/
# bytecode.py), so counted runs find them current; only stale files are written (a quarter second at most).
bytecode: $(STAMP)
	$(PY) -c 'from katra3d.harness.run.bytecode import write_canonical_tree; write_canonical_tree(["katra3d", "harness", "katra_trace", "scenes", "bench"])'

# ruff: the linter (pycodestyle, pyflakes, isort, bugbear, pyupgrade) and the formatter, as configured
# in pyproject.toml; `$(VENV)/bin/ruff format .` rewrites what the check finds
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# mypy strict over katra3d (harness/ and scenes/ through its links) and katra_trace, from the
# repository root with pyproject.toml's configuration
typecheck: $(STAMP)
	$(PY) -m mypy

sysdeps:
	bash ci/system-deps.sh

sysdeps-test:
	bash ci/system-deps.sh test

# Mesa as for `make run`, plus glmark2-x11, glmark2-data and Xvfb for the glmark2 parity row where they can be
# installed (root); otherwise the line to run is printed and the row is skipped
sysdeps-bench:
	bash ci/system-deps.sh bench

run: sysdeps $(STAMP)
	$(VENV)/bin/katra3d run --suite default

test: sysdeps-test $(STAMP) bytecode lint typecheck
	$(PY) -m pytest -p no:cacheprovider -n auto --dist loadfile tests

# Every test but those marked `slow` (each over ~5 s: valgrind counts, many captures, the browser), and the
# structure-aware fuzzers for 1 s per consumer (2 in `make test`); `make test` still runs them all.
test-quick: sysdeps-test $(STAMP) bytecode
	KATRA3D_FUZZ_SECONDS=$${KATRA3D_FUZZ_SECONDS:-1} $(PY) -m pytest -p no:cacheprovider -n auto --dist loadfile \
		-m "not slow" tests

# The structure-aware fuzzers (reader, and every consumer on mutated and extreme traces) for longer than
# `make test` gives them: KATRA3D_FUZZ_SECONDS per fuzzer and consumer (60 here; 2-3 in `make test`).
fuzz: sysdeps-test $(STAMP) bytecode
	KATRA3D_FUZZ_SECONDS=$${KATRA3D_FUZZ_SECONDS:-60} $(PY) -m pytest -p no:cacheprovider -n auto \
		tests/test_fuzz_trace.py tests/test_fuzz_consumers.py

# The benches that guard a target: ratios against in-run baselines, one table on stdout, bench/results.json
# (python -m bench --help); the glmark2 parity row needs glmark2-x11, glmark2-data and Xvfb (sysdeps-bench
# installs them where it can). Studies (bench/experiments/) run by name: python -m bench --list
bench: sysdeps-bench $(STAMP) bytecode
	$(PY) -m bench

# Not in `make bench` (valgrind, ~30 min on 2 cores): --measure instructions on the ci suite, docs/measure.md's
# table, counted A/A on small frames (7 processes a scene and size) with the +1 % step on a ci-size frame, and
# a short counted run's cost against the same time run, and what keeping instruction profiles adds to it
bench-measure: sysdeps-test $(STAMP) bytecode
	$(PY) -m bench measure counts-aa counted-cost profile-cost --out .benchmarks/results-measure.json

# A study, not a guard (about 30 min): the noise table (bench/experiments/noise.py), written between
# docs/stats.md's noise-table markers. Smoke test at tiny sizes (not written to the docs):
# $(PY) -m bench --quick noise --out /tmp/noise.json
bench-noise: sysdeps-test $(STAMP) bytecode
	$(PY) -m bench noise --out .benchmarks/results-noise.json
	$(PY) -m bench.experiments.noise --write-doc .benchmarks/results-noise.json docs/stats.md

# Not in `make bench` (about 10 min on 2 cores): the default time metric on software renderers, chosen by evidence
# (docs/stats.md's defaults table), and katra3d ab with its defaults beside a CPU hog
bench-defaults: sysdeps-test $(STAMP) bytecode
	$(PY) -m bench defaults defaults-ab --out .benchmarks/results-defaults.json
	$(PY) -m bench.defaults --write-doc .benchmarks/results-defaults.json docs/stats.md

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .benchmarks
