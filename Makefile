# The front door. Every target bootstraps .venv from nothing but python3.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# What the demo needs (the package alone: trio, pyzmq, attrs, trio-util, rich,
# hypercorn): no PySpark, no Java.
BASE_STAMP := $(VENV)/.installed-base
# What the site needs (the docs extra): no PySpark, no Java either.
DOCS_STAMP := $(VENV)/.installed-docs

.PHONY: test lint typecheck pytest java chromium zyre demo bench bench-audit audit docs fuzz chaos chaos-titanic scale clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Reinstall whenever the project's metadata changes.
$(BASE_STAMP): pyproject.toml trizre/transport/_zread.pyx scripts/build_ext.py | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	@# The compiled inbox read (docs/socket.md): optional, so neither a
	@# missing compiler nor a registry out of reach stops the install; without
	@# it trizre reads in pure Python, slower. The test run checks it is built.
	-$(BIN)/python -m pip install --quiet 'cython>=3.0,<4' 'setuptools>=68'
	$(BIN)/python scripts/build_ext.py --optional
	touch $(BASE_STAMP)

# Everything the tests need; it holds the docs extra, so the docs stamp too.
$(STAMP): pyproject.toml $(BASE_STAMP)
	$(BIN)/python -m pip install --quiet -e '.[test,dev,spark,docs]'
	touch $(STAMP) $(DOCS_STAMP)

$(DOCS_STAMP): pyproject.toml $(BASE_STAMP)
	$(BIN)/python -m pip install --quiet -e '.[docs]'
	touch $(DOCS_STAMP)

test: lint pytest docs

lint: $(STAMP)
	$(BIN)/ruff check trizre tests examples benchmarks
	$(BIN)/ruff format --check trizre tests examples benchmarks
	$(BIN)/mypy --strict trizre
	$(BIN)/lint-imports

# The suite as users get it (nodes of one process linked in memory, the
# compiled inbox read, which it fails without), then the node and pattern
# tests again with every link over TCP, as between processes, reading
# their inboxes in pure Python: both paths of each stay covered.
TCP_TESTS := tests/node/test_node.py tests/node/test_node_elections.py tests/node/test_trace.py tests/patterns/test_freelance.py \
	tests/patterns/test_lazy_pirate.py tests/patterns/test_titanic.py \
	tests/patterns/test_services.py tests/patterns/test_bstar.py

# --durations: CI must stay under 30 minutes; its log names the slowest tests.
# -n 2 --dist loadgroup: the namespace tests (mostly waiting) run on a second
# worker beside the loopback tests, which keep to one (tests/conftest.py).
pytest: $(STAMP) java chromium zyre
	TRIZRE_EXPECT_COMPILED=1 $(BIN)/pytest -n 2 --dist loadgroup --durations=30 --durations-min=5 $(PYTEST_ARGS)
	TRIZRE_PURE_PYTHON=1 $(BIN)/pytest --links tcp $(PYTEST_ARGS) $(TCP_TESTS)

# PySpark 4 needs Java 17+. Install it when it is missing and we can (root
# with apt); otherwise say so: the audit's tests then skip, loudly.
java:
	@if command -v java >/dev/null 2>&1 || [ -x "$${JAVA_HOME:-/nonexistent}/bin/java" ]; then \
		true; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing Java 17 for PySpark"; \
		apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless >/dev/null; \
	else \
		echo "warning: no Java found; the PySpark audit tests will be skipped" >&2; \
	fi

# Headless Chromium and its driver for the monitoring page's browser test
# (tests/system/test_watch_browser.py), from Debian, as Java above; elsewhere the
# test skips, saying why.
chromium:
	@if { command -v chromium || [ -x "$${CHROMIUM:-/nonexistent}" ]; } >/dev/null 2>&1 \
		&& { command -v chromedriver || [ -x "$${CHROMEDRIVER:-/nonexistent}" ]; } >/dev/null 2>&1; then \
		true; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing Chromium and chromedriver for the browser test"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
			apt-get install -y -qq chromium chromium-driver >/dev/null; \
	else \
		echo "warning: no chromium/chromedriver; the browser test will be skipped" >&2; \
	fi

# zyre (C) from ../shared/vendor, built once per machine into ~/.cache/trizre/zyre
# with our test driver tests/interop/zyre_agent.c. Where it cannot be built
# (no root or apt), the zyre interop tests skip and say why.
zyre:
	@bash scripts/build-zyre.sh || echo "warning: zyre was not built; the zyre interop tests will be skipped" >&2

demo: $(BASE_STAMP)
	$(BIN)/python examples/bstar_pair.py

bench: $(STAMP) zyre
	$(BIN)/python benchmarks/bench_codec.py
	$(BIN)/python benchmarks/bench_peer_run.py
	$(BIN)/python benchmarks/bench_socket.py --json benchmarks/results/socket.json
	$(BIN)/python benchmarks/trio_floor.py --json benchmarks/results/trio_floor.json
	$(BIN)/python benchmarks/wake_send.py
	$(BIN)/python benchmarks/bench_zre.py --json benchmarks/results/zre.json \
		--update-docs docs/benchmarks.md
	$(BIN)/python benchmarks/bench_lowlat.py --poll 0 100 200 --json benchmarks/results/lowlat.json
	$(BIN)/python benchmarks/bench_receive.py --json benchmarks/results/receive.json
	$(BIN)/python benchmarks/bench_patterns.py --json benchmarks/results/patterns.json
	$(BIN)/python benchmarks/bench_trace.py --json benchmarks/results/trace.json
	$(BIN)/python benchmarks/bench_forged_beacons.py --rate 10000 --seconds 60 --process \
		--json benchmarks/results/forged_beacons_60s.json
	$(BIN)/python benchmarks/bench_forged_beacons.py --rate 10000 --seconds 60 --process \
		--sources 1000 --json benchmarks/results/forged_beacons_1000_sources_60s.json
	$(BIN)/python benchmarks/bench_forged_beacons.py --rate 10000 --seconds 60 --process \
		--sources 1000 --tarpit --json benchmarks/results/forged_beacons_tarpit_60s.json
	$(BIN)/python benchmarks/bench_forged_leave.py --seconds 20 \
		--json benchmarks/results/forged_leave.json
	$(BIN)/python benchmarks/bench_forged_leave.py --seconds 20 --curve \
		--json benchmarks/results/forged_leave_curve.json
	$(BIN)/python benchmarks/bench_elections.py --rounds 20 --json benchmarks/results/elections.json
	$(BIN)/python benchmarks/bench_elections.py --settle --rounds 100 \
		--json benchmarks/results/elections_settle.json
	$(BIN)/python benchmarks/bench_elections.py --settle --rounds 10 --variant split-trizre \
		--variant zyre-lowest --variant trizre-lowest --variant zyre-late --variant trizre-late \
		--json benchmarks/results/elections_settle_variants.json
	$(BIN)/python benchmarks/bench_freelance.py --json benchmarks/results/freelance.json
	$(BIN)/python benchmarks/bench_titanic.py --json benchmarks/results/titanic.json
	$(BIN)/python benchmarks/bench_services_load.py --json benchmarks/results/services_load.json
	$(BIN)/python benchmarks/bench_services_load.py --kill --json benchmarks/results/services_load_kill.json
	$(BIN)/python benchmarks/bench_hostile_peer.py --rate 10000 --seconds 60 \
		--json benchmarks/results/hostile_peer_60s.json
	$(BIN)/python benchmarks/plots.py --results benchmarks/results --out docs/img
	$(BIN)/python benchmarks/targets.py --results benchmarks/results

# Mutation fuzzing, ten times what make test feeds: over a million inputs
# each through the message decoder, and hundreds of thousands through the
# peer protocol, the pattern envelope and the beacon decoder. Prints count,
# time and peak memory per decoder.
fuzz: $(STAMP)
	TRIZRE_FUZZ_SCALE=10 $(BIN)/pytest -q -s -p no:cacheprovider tests/unit/test_wire_fuzz.py \
		-k "mutated"

# Every pattern under faults for 10 minutes, then the titanic profile
# (CHAOS_ARGS="--duration 60" for less), in namespaces of its own, judged
# by the audit on a Spark cluster on 127.0.0.1; prints the verdict table,
# exit 0 only on a pass. Needs root.
# make test runs its 60 s profile (tests/system/test_chaos.py).
chaos: $(STAMP) java
	$(BIN)/python benchmarks/chaos.py --profile default --out chaos-run $(CHAOS_ARGS)
	$(BIN)/python benchmarks/chaos.py --profile titanic --out chaos-titanic-run $(CHAOS_ARGS)

# Titanic alone, kill -9 during 16 concurrent submits (90 s; also the end of
# make chaos): 0 lost, nothing run twice, the store whole (docs/reliability.md).
chaos-titanic: $(STAMP) java
	$(BIN)/python benchmarks/chaos.py --profile titanic --out chaos-titanic-run $(CHAOS_ARGS)

# A big mesh (default 500 nodes over 10 processes) under load and kill -9
# faults, judged by the audit; needs root and, at 500 nodes, ~113,000 file
# descriptors per process (see docs/reliability.md). Not part of CI.
# 500 nodes, default options, fit this machine since the link watch moved to
# each node's inbox (issue 28: ~16.5 GB); --unwatched gives watch_links=False.
SCALE_ARGS ?=
scale: $(STAMP) java
	$(BIN)/python benchmarks/scale.py --out scale-run $(SCALE_ARGS)

# The audit benchmark writes ~2 GB of traces under /tmp.
bench-audit: $(STAMP) java
	$(BIN)/python benchmarks/bench_audit.py --events 10000000 --json benchmarks/results/audit.json

# make audit TRACE_DIR=path [REPORT_DIR=path]
audit: $(STAMP) java
	$(BIN)/trizre audit $(TRACE_DIR) --out $(or $(REPORT_DIR),audit-report)

# The site (mkdocs-material, API reference by mkdocstrings) into site/;
# --strict: a broken link or a docstring griffe cannot read fails the build.
docs: $(DOCS_STAMP)
	@bash scripts/fetch-mermaid.sh
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis site dist
	rm -f trizre/transport/_zread.*.so
