# Beamer: every target installs what it needs into .venv on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
BEAMER := $(VENV)/bin/beamer
STAMP := $(VENV)/.installed
SEEDS ?= 1,2,3,4,5

.PHONY: install system-deps test lint run simulate sweep bench build clean distclean

# Debian tools the emulation needs (namespaces, offload switches); only when root and missing.
system-deps:
	@if [ "$$(id -u)" = 0 ] && ! command -v ethtool >/dev/null 2>&1; then \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ethtool iproute2 >/dev/null) \
		|| echo "warning: could not install ethtool; emulation will run with offloads on"; \
	fi

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e '.[dev,ray]'
	touch $(STAMP)

install: $(STAMP) system-deps

test: install
	$(PY) -m pytest -q

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

build: install
	$(BEAMER) compile p4src/beamer.p4 --out build/

# The main job: the default emulation (needs root for network namespaces).
run: install
	$(BEAMER) emulate --topo bmv2_topos/single_switch.json --policies beamer,fair --seeds 1,2,3 \
		--out out/emulate

simulate: install
	$(BEAMER) simulate --workload hp-tuning --policies beamer,sincronia,varys,aalo,fifo-lm,fair \
		--seeds $(SEEDS) --queues ideal,8 --out out/simulate

# The README's sweep table (resumes an interrupted sweep; see docs/sweep.md).
sweep: install
	$(BEAMER) sweep sweeps/readme.yaml --out out/sweep/readme

bench: install
	$(PY) -m bench

clean: install
	$(BEAMER) clean

distclean:
	rm -rf $(VENV) build out .pytest_cache .mypy_cache .ruff_cache *.egg-info
