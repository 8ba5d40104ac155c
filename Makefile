# quorumq: `make run` starts a local cluster with a demo, `make test` runs the tests.
# Every target sets up first; setup is idempotent and takes a second when already done.

PYTHON_BASE ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
# Debian packages the project needs beyond Python itself (nats-server: the benchmark baseline;
# zookeeper: the controllers' consensus; openjdk-17-jre-headless: the JVM under ZooKeeper and PySpark;
# chromium, chromium-driver: the dashboard's browser tests).
# nodejs and npm (for the official Node.js client the tests drive) are installed only when the `node`
# or `npm` command is missing: a NodeSource nodejs brings its own npm and conflicts with Debian's.
DEBIAN_PACKAGES := nats-server zookeeper openjdk-17-jre-headless chromium chromium-driver
SETUP_STAMP := $(VENV)/.setup-done
# The official Node.js client, pinned in tests/node/package.json and its lock.
NODE_DIR := tests/node
NODE_STAMP := $(NODE_DIR)/node_modules/.setup-done

.PHONY: setup run lint test test-proxy chaos chaos-proxy bench bench-replicas bench-failover bench-client-failover bench-replicator bench-topics bench-fifo bench-timers bench-security bench-rpc-servers bench-proxy clean

setup: $(SETUP_STAMP) $(NODE_STAMP)

# Rebuilt when the pinned requirements or the package metadata change.
$(SETUP_STAMP): requirements.txt pyproject.toml Makefile
	@missing=""; \
	command -v $(PYTHON_BASE) >/dev/null || missing="python3.11 python3.11-venv"; \
	command -v node >/dev/null || missing="$$missing nodejs"; \
	command -v npm >/dev/null || missing="$$missing npm"; \
	for package in $(DEBIAN_PACKAGES); do \
		dpkg-query -W -f='$${Status}' $$package 2>/dev/null | grep -q "ok installed" || missing="$$missing $$package"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi
	@test -x $(PY) || $(PYTHON_BASE) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e .
	@touch $@

# Reinstalled exactly as locked when the lock changes (npm ci starts from an empty node_modules).
$(NODE_STAMP): $(NODE_DIR)/package.json $(NODE_DIR)/package-lock.json | $(SETUP_STAMP)
	cd $(NODE_DIR) && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

run: setup
	scripts/demo.sh

# The lint gate: ruff over the code and the tests, mypy over core/ and store/ (pyproject.toml), zero
# findings; the import layers are checked by tests/unit/test_layers.py.
lint: setup
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/mypy

# The transaction tests run a second time with the official client through a proxy: the only place
# `make test` runs a producer's transaction checks relayed by the proxy (proxy/telemetry.py).
test: lint
	$(PY) -m pytest
	QUORUMQ_ACCESS=proxy $(PY) -m pytest tests/integration/test_official_transactions.py

# Every official-client test with every official client through a proxy (QUORUMQ_ACCESS=proxy: each
# cluster a test starts gets `up --proxies 1`; docs/proxy.md), about 4 minutes.
test-proxy: lint
	QUORUMQ_ACCESS=proxy $(PY) -m pytest tests/integration/test_official_*.py

# Seeded fault-injection runs (tests/chaos): COUNT runs of DURATION seconds for each of FAULTS (default:
# every fault kind the nemesis knows); each verdict is appended to the ledger, and docs/reliability.md
# is rebuilt from it.
FAULTS ?=
COUNT ?= 1
DURATION ?= 180
PROFILE ?= durable
WORKLOAD ?= W3
chaos: setup
	$(PY) tests/chaos/run.py $(if $(FAULTS),--faults $(FAULTS)) --count $(COUNT) --duration $(DURATION) --profile $(PROFILE) \
		--workload $(WORKLOAD) \
		--ledger tests/chaos/ledger.jsonl --keep run/chaos; \
	status=$$?; $(PY) tests/chaos/report.py; exit $$status

# The proxy profile (docs/reliability.md): the official clients' workloads through two proxies, under
# a master's kill (F1), a master's pause (F4) and a proxy's kill (F17).
chaos-proxy: setup
	$(MAKE) --no-print-directory chaos FAULTS=F1,F4,F17 PROFILE=proxy WORKLOAD=W6
	$(MAKE) --no-print-directory chaos FAULTS=F1,F4,F17 PROFILE=proxy WORKLOAD=W7

# The settings docs/benchmarks.md reports; each script prints its table and writes bench/results/.
bench: setup
	$(PY) bench/bench_store.py
	$(PY) bench/bench_record_loops.py
	$(PY) bench/bench_foundation.py --repeat 3 --inflight 8 --pull-inflight 4 --wait-quiet 30
	$(MAKE) --no-print-directory bench-replicas
	$(MAKE) --no-print-directory bench-failover
	$(MAKE) --no-print-directory bench-client-failover
	$(MAKE) --no-print-directory bench-replicator
	$(MAKE) --no-print-directory bench-topics
	$(MAKE) --no-print-directory bench-fifo
	$(MAKE) --no-print-directory bench-timers
	$(MAKE) --no-print-directory bench-security
	$(MAKE) --no-print-directory bench-rpc-servers
	$(MAKE) --no-print-directory bench-proxy

# BEFORE=COMMIT: the benchmarks below that take it measure that commit's code, checked out in a git
# worktree at BEFORE_TREE, beside this checkout's in one run (each process's PYTHONPATH picks its tree).
# The tree is removed when the recipe line that checked it out ends, however the bench on it ends (make's
# /bin/sh may be dash, which runs no EXIT trap when a signal ends it: INT and TERM exit, which runs it).
BEFORE ?=
BEFORE_TREE = bench/work/before
with-before-tree = rm -rf $(BEFORE_TREE) && git worktree add --force --detach $(BEFORE_TREE) $(1) >/dev/null && \
	trap 'git worktree remove --force $(BEFORE_TREE)' EXIT && trap 'exit 130' INT TERM &&
BEFORE_AND_AFTER = --code before=$(BEFORE_TREE)/src --code after=src

# Replica groups against NATS JetStream R3, and a slave's SIGKILL (about 7 minutes).
# BEFORE=COMMIT measures that commit's code beside this checkout's, interleaved, in one run.
bench-replicas: setup
	$(if $(BEFORE),$(call with-before-tree,$(BEFORE)),) $(PY) bench/bench_replicas.py --repeat 3 --seconds 3 \
		--wait-quiet 30 $(if $(BEFORE),--parts quorumq --isr 2 --flush ASYNC_FLUSH $(BEFORE_AND_AFTER),)

# Controller mode: 10 master SIGKILLs, 3 SIGSTOPs and 3 preferred-master hand-backs under load (about 5
# minutes). BEFORE=COMMIT makes every fault on that commit's code too, in turn with this checkout's, in
# one run (about twice as long). ARGS adds options of bench/bench_failover.py (e.g. ARGS="--runs 1").
bench-failover: setup
	$(if $(BEFORE),$(call with-before-tree,$(BEFORE)),) $(PY) bench/bench_failover.py --runs 10 --stops 3 \
		--handbacks 3 $(if $(BEFORE),$(BEFORE_AND_AFTER),) $(ARGS)

# Controller mode through the official Python and Node.js clients: 10 master SIGKILLs (about 3 minutes).
bench-client-failover: setup
	$(PY) bench/bench_client_failover.py --runs 10

# The Spark replicator against one Python process that pulls and sends (about 5 minutes).
bench-replicator: setup
	$(PY) bench/bench_replicator.py

# Creating topics and consumer groups on one broker while a producer sends (issue 19): BEFORE's code
# (default dee820f) creating 2,000 topics and groups beside this checkout's creating 10,000 of each,
# in one run. ARGS adds options of bench/bench_topics.py (e.g. ARGS="--topics 300 --groups 300").
bench-topics: setup
	$(call with-before-tree,$(or $(BEFORE),dee820f)) $(PY) bench/bench_topics.py --wait-quiet 30 \
		--before $(BEFORE_TREE)/src $(ARGS)

# FIFO with 1,000 message groups against NORMAL on a 3-replica group (inSyncReplicas 2): produce through
# the official and quorumq's clients, consume through official SimpleConsumers (about 5 minutes).
# ARGS adds options of bench/bench_fifo.py (e.g. ARGS="--seconds 1 --consume-messages 2000").
bench-fifo: setup
	$(PY) bench/bench_fifo.py --repeat 3 --wait-quiet 30 $(ARGS)

# Delay (timer) and transactional messages on a 3-replica group (inSyncReplicas 2), through the official
# client (issue 21): transactional send + commit against plain sends, the delivery lateness of 100,000
# timers due over 60 s, the master's RSS with 1,000,000 timers pending and after its restart (about 15
# minutes). ARGS adds options of bench/bench_timers.py (e.g. ARGS="--fill-timers 100000").
bench-timers: setup
	$(PY) bench/bench_timers.py --wait-quiet 30 $(ARGS)

# What authentication and TLS cost a sending client on one broker (issue 22): off/off, on/off, off/on and
# on/on in turn, 7 rounds, the official client's sync send and quorumq's send_batch (about 10 minutes).
# ARGS adds options of bench/bench_security.py (e.g. ARGS="--base-port 62000 --repeat 1 --seconds 2").
bench-security: setup
	$(PY) bench/bench_security.py --wait-quiet 30 $(ARGS)

# Issue 24: the server CPU of a unary v5 call on grpc.aio, grpc.aio on uvloop and grpc's threaded
# server, 5 rounds (about 3 minutes). ARGS adds options of bench/bench_rpc_servers.py.
bench-rpc-servers: setup
	$(PY) bench/bench_rpc_servers.py --repeat 5 --wait-quiet 30 $(ARGS)

# Issue 24: the official client direct to a 3-replica group, through 2 proxies (up --proxies 2) and
# through 1, and to an empty v5 server: msg/s and the CPU per message of master, slaves and proxies
# (about two minutes). BEFORE=COMMIT runs that commit's cluster too, before this checkout's, in one
# run. ARGS: bench_proxy.py's.
bench-proxy: setup
	$(if $(BEFORE),$(call with-before-tree,$(BEFORE)),) $(PY) bench/bench_proxy.py \
		$(if $(BEFORE),$(BEFORE_AND_AFTER),) $(ARGS)

clean:
	rm -rf run .pytest_cache
