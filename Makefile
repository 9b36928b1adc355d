# The two commands: `make run` serves everything, `make test` runs every test.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: run test test-cluster test-slow lint schema messages bench sale chaos mutants clean

$(BIN)/.installed: requirements.txt requirements-dev.txt
	@$(PYTHON) -c 'import sys; sys.exit("Python 3.11+ is needed, found " + sys.version.split()[0]) if sys.version_info < (3, 11) else None'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements-dev.txt
	@touch $@

# V=1 shows every log line on the terminal (else warnings and errors; all in var/log/stack.log).
run: $(BIN)/.installed
	$(BIN)/python -m ticketing.devstack serve $(if $(V),--verbose)

# Every test on one Redis and, beside it, the Redis tests again on a local Redis
# Cluster of three primaries that the run starts and removes (REDIS_CLUSTER=true);
# but the slow ones (marked slow, minutes each), which `make test-slow` runs. The
# cluster run (testsupport/suites.py) leaves out the tests that need a single
# redis-server (marked single_redis) or RabbitMQ itself; `make test-cluster` runs it alone.
test: lint
	$(BIN)/python -m testsupport.suites $(PYTEST_ARGS)

test-cluster: $(BIN)/.installed
	$(BIN)/python -m testsupport.suites --cluster $(PYTEST_ARGS)

# The tests marked slow (two million joins and the ticks after them: minutes), on a
# Redis and a Postgres of their own, as make test.
test-slow: $(BIN)/.installed
	$(BIN)/python -m ticketing.devstack exec -- $(BIN)/python -m pytest -m slow $(PYTEST_ARGS)

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/python manage.py makemigrations --check --dry-run
	@# docs/openapi.yaml is the schema the DRF declarations generate: they may not drift apart.
	$(BIN)/python manage.py spectacular --validate --fail-on-warn --file var/openapi.yaml
	diff -u docs/openapi.yaml var/openapi.yaml || (echo "docs/openapi.yaml is stale: make schema" && exit 1)

# Write the OpenAPI schema of the DRF declarations to docs/openapi.yaml.
schema: $(BIN)/.installed
	$(BIN)/python manage.py spectacular --validate --fail-on-warn --file docs/openapi.yaml

# Compile the translations of locale/ (not those of the packages in .venv).
messages: $(BIN)/.installed
	$(BIN)/python manage.py compilemessages --ignore=.venv

# Measures the service as production runs it against a baseline (docs/benchmarks.md).
# BENCH_ARGS=--quick for a fast check.
bench: $(BIN)/.installed
	$(BIN)/python -m pip install --quiet -r requirements-bench.txt
	$(BIN)/python bench/run.py $(BENCH_ARGS)

# A scaled-down sale against the real stack, per component, checked against the
# capacity model (docs/scaling.md). SALE_ARGS=--units-only for the unit costs alone.
sale: $(BIN)/.installed
	$(BIN)/python -m pip install --quiet -r requirements-bench.txt
	$(BIN)/python bench/sale.py $(SALE_ARGS)

# The fault-injection soak (docs/reliability.md); each seed picks its scenario. CHAOS_SEEDS=1-50
# (or 3,17,40-45) runs those seeds; else CHAOS_RUNS seeds from CHAOS_FIRST_SEED (random when
# unset). The seeds are printed with each run's summary and the totals. CHAOS_SEED=<n> replays
# one; CHAOS_SCENARIO=<name> puts every seed in that scenario.
CHAOS_RUNS ?= 50
chaos: $(BIN)/.installed
	CHAOS_RUNS=$(CHAOS_RUNS) CHAOS_SEEDS=$(CHAOS_SEEDS) CHAOS_FIRST_SEED=$(CHAOS_FIRST_SEED) \
	CHAOS_SEED=$(CHAOS_SEED) CHAOS_SCENARIO=$(CHAOS_SCENARIO) $(BIN)/python -m ticketing.devstack exec -- \
		$(BIN)/python -m pytest booking_app/tests/test_chaos.py -p no:randomly -q -s --durations=0 $(PYTEST_ARGS)

# Proof that the suite can fail (docs/reliability.md): each safeguard broken in a copy
# of the tree, one at a time, and the suite must fail on each. MUTANTS="<name> ..."
# runs some (`$(BIN)/python -m ticketing.tests.mutants --list`). On a throw-away Redis
# and Postgres, as make test.
mutants: $(BIN)/.installed
	$(BIN)/python -m ticketing.devstack exec -- $(BIN)/python -m ticketing.tests.mutants $(MUTANTS)

clean:
	rm -rf $(VENV) var
