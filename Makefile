# The two commands a newcomer runs: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install run test lint typecheck bench replay clean console-assets chromium slurm-packages slurm-up slurm-down ray-venv ray-up ray-down compose-up compose-down compose-test

install: $(STAMP) console-assets

# The console's and the OpenAPI page's front-end packages, pinned by
# gateway/console/assets/package-lock.json, copied where the gateway serves them: no CDN.
# --ignore-scripts: no package's install script runs (swagger-ui-dist's would phone home).
CONSOLE_ASSETS := gateway/console/assets
VENDOR := gateway/console/static/vendor
console-assets: $(VENDOR)/.built

$(VENDOR)/.built: $(CONSOLE_ASSETS)/package-lock.json
	cd $(CONSOLE_ASSETS) && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	mkdir -p $(VENDOR)/swagger-ui
	cp $(CONSOLE_ASSETS)/node_modules/swagger-ui-dist/swagger-ui-bundle.js \
	   $(CONSOLE_ASSETS)/node_modules/swagger-ui-dist/swagger-ui-standalone-preset.js \
	   $(CONSOLE_ASSETS)/node_modules/swagger-ui-dist/swagger-ui.css \
	   $(CONSOLE_ASSETS)/node_modules/swagger-ui-dist/LICENSE $(VENDOR)/swagger-ui/
	touch $@

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	# The embedded OPA engine (OPA's Go rego package as a shared library). Its metadata
	# claims Python >= 3.14 but it runs on 3.11 (shared/notes/policy-auth.md).
	$(BIN)/python -m pip install --quiet --no-deps --ignore-requires-python \
		opa-golib-python-bindings==0.4.4
	touch $(STAMP)

run: install
	$(BIN)/ignara serve --seed config/ignara.example.yaml

lint: install
	$(BIN)/ruff check .

typecheck: install
	$(BIN)/mypy --strict quota/ tenants/ gateway/

# The Slurm tests run against a real slurmctld/slurmd/slurmrestd from the Debian packages:
# installed here when missing (as root, with apt; otherwise it says why and the Slurm tests
# skip, or fail when CI is set). The tests start and stop the cluster themselves.
slurm-packages: install
	$(BIN)/python -m tests.support.slurm install

# The Ray tests run against a real Ray head from PyPI's ray[default], in its own virtual
# environment (/var/tmp/ignara-ray-venv, or IGNARA_RAY_VENV; never the gateway's .venv:
# the gateway does not depend on Ray), made here once (~25-60 s, ~380 MB) and reused.
ray-venv: install
	$(BIN)/python -m tests.support.ray install

# The console's browser tests drive Debian's Chromium (launched by path, /usr/bin/chromium;
# never a browser build Playwright downloads): installed here with apt when missing.
chromium:
	@test -x /usr/bin/chromium || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -qq chromium; \
	  else echo "chromium: not root, cannot apt-get install chromium; the console's browser tests will skip (fail when CI is set)"; fi; }

test: install slurm-packages ray-venv chromium lint typecheck
	$(BIN)/pytest

# A local Slurm to run gangs on by hand (state, logs and pid files in .slurm/); `up` prints
# IGNARA_SLURM_URL and IGNARA_SLURM_TOKEN for the gateway (see README, Running on Slurm).
slurm-up: install
	$(BIN)/python -m tests.support.slurm up .slurm

slurm-down: install
	$(BIN)/python -m tests.support.slurm down .slurm

# A local Ray head to run gangs on by hand (bound to 127.0.0.1, 8 fake GPUs, state in
# .ray/); `up` prints IGNARA_RAY_URL for the config (see README, Running on Ray).
ray-up: ray-venv
	$(BIN)/python -m tests.support.ray up .ray

ray-down: install
	$(BIN)/python -m tests.support.ray down .ray

# The docker compose stack of deploy/compose/ (README, "Docker compose"): installs the engine
# (Debian docker.io) and the compose v2 plugin when missing, starts dockerd unless one runs,
# builds the base image and the host's wheels, then `up --wait` with compose.local.yaml
# (every image built here). compose-down stops the stack, and dockerd if it started it.
# compose-test: up, tests/compose/ from the host, down, whatever the tests did.
compose-up: install
	$(BIN)/python -m tests.support.compose up

compose-down:
	$(BIN)/python -m tests.support.compose down

compose-test: install
	$(BIN)/python -m tests.support.compose test

bench: install
	$(BIN)/python bench/admission.py --workloads 10000 --queues 100
	$(BIN)/python -m bench.proxy

# The Philly trace replayed under the static, cohort and cohort-fair quota policies at
# two capacity scales (563 and 704 GPUs), then the comparison table (README, Replaying
# a GPU cluster's trace) and per scale two SVG charts, utilization-x{scale}.svg and
# waits-x{scale}.svg. Reports in .artifacts/replay/. Each run stops after
# REPLAY_TIMEOUT wall seconds and says so in the table. The engine runs compiled with
# mypyc (built once into .artifacts/mypyc, about a minute; REPLAY_ENGINE=python for the
# Python modules: the same decisions, about twice the time).
REPLAY_TRACES  ?= ../shared/data/traces
REPLAY_TIMEOUT ?= 900
REPLAY_ENGINE  ?= compiled
replay: install
	$(BIN)/python -m bench.replay --trace $(REPLAY_TRACES)/philly_2017_vc_jobs.csv \
		--sizes $(REPLAY_TRACES)/philly_2017_vc_nodes.csv --scales 0.2,0.25 \
		--timeout $(REPLAY_TIMEOUT) --engine $(REPLAY_ENGINE) --out .artifacts/replay

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache $(VENDOR) $(CONSOLE_ASSETS)/node_modules .artifacts/mypyc .artifacts/huge-arenas
