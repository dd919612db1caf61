# Beamer: every target installs what it needs into .venv on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
BEAMER := $(VENV)/bin/beamer
STAMP := $(VENV)/.installed
SEEDS ?= 1,2,3,4,5
# BMv2 and p4c: a user's on PATH, or a build kept beside the repository (P4TOOLS=DIR/bin).
P4TOOLS ?= $(wildcard ../shared/tools/p4/bin)
ifneq ($(P4TOOLS),)
export PATH := $(abspath $(P4TOOLS)):$(PATH)
endif
P4DEPS := $(wildcard $(dir $(abspath $(P4TOOLS)))install-deps)
TARGET ?= embedded

.PHONY: install system-deps p4-deps test lint run run-bmv2 simulate sweep tune bench build clean distclean

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

# Runtime libraries of the BMv2/p4c kept beside the repository, so that the BMv2
# tests run; only as root, and a failure only skips those tests.
p4-deps:
	@if [ -n "$(P4DEPS)" ] && [ "$$(id -u)" = 0 ]; then \
		"$(P4DEPS)" >/dev/null 2>&1 || echo "warning: $(P4DEPS) failed; BMv2 tests will be skipped"; \
	fi

test: install p4-deps
	$(PY) -m pytest -q

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# P4Info and device config for the embedded target; with p4c on PATH also
# build/beamer.json for BMv2 (and a check that p4c's P4Info is the same).
build: install
	$(BEAMER) compile p4src/beamer.p4 --out build/

# The main job: the default emulation (needs root for network namespaces).
# make run TARGET=bmv2 (= make run-bmv2) runs it on simple_switch_grpc.
ifeq ($(TARGET),bmv2)
run: run-bmv2
else
run: install
	$(BEAMER) emulate --topo bmv2_topos/single_switch.json --policies beamer,fair --seeds 1,2,3 \
		--out out/emulate
endif

run-bmv2: build
	@test -f build/beamer.json || { echo "make run-bmv2: build/beamer.json missing (needs p4c on PATH)" >&2; exit 2; }
	$(BEAMER) emulate --topo bmv2_topos/single_switch.json --policies beamer,fair --seeds 1,2,3 \
		--target bmv2 --bmv2-json build/beamer.json --p4info build/beamer.p4info.txtpb \
		--out out/emulate-bmv2

simulate: install
	$(BEAMER) simulate --workload hp-tuning --policies beamer,sincronia,varys,aalo,fifo-lm,fifo,fifo-madd,fair \
		--seeds $(SEEDS) --queues ideal,8 --out out/simulate

# The README's sweep table (resumes an interrupted sweep; see docs/sweep.md).
sweep: install
	$(BEAMER) sweep sweeps/readme.yaml --out out/sweep/readme

# The README's tuner table: Ray Tune's HyperBand trains over the emulated switch (root).
tune: install
	$(BEAMER) tune --topo bmv2_topos/single_switch.json --policy beamer,fair,sincronia \
		--seeds 1,2,3 --out out/tune

bench: install
	$(PY) -m bench

clean: install
	$(BEAMER) clean

distclean:
	rm -rf $(VENV) build out .pytest_cache .mypy_cache .ruff_cache *.egg-info
