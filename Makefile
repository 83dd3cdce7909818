# Two commands do everything on a fresh machine (each creates .venv and installs what it needs):
#   make quickstart   the main job on the embedded corpus
#   make test         the test suite (self-contained: reads only this repository)
#   make check-fixtures  tests/fixtures against ../shared/data (CI runs it after the tests)
#   make lint         ruff: lint and format check (CI runs it before the tests)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: quickstart test check-fixtures lint install clean browser

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[dev,hf,dense,ray]'
	touch $@

install: $(VENV)/.installed

quickstart: $(VENV)/.installed
	$(BIN)/contextlab quickstart

# the report test renders pages in headless Chromium (Debian packages; installed when missing and possible)
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; } || \
	  echo "note: install chromium for the report test (apt-get install chromium chromium-driver)"

# a test process per core (at most 4, one CPU thread each: tests/conftest.py), a test file per process at a time
test: $(VENV)/.installed browser
	$(BIN)/python -m pytest -n auto --dist loadfile

check-fixtures: $(VENV)/.installed
	$(BIN)/python scripts/check_fixtures.py

lint: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python scripts/check_self_contained.py

clean:
	rm -rf $(VENV) contextlab-quickstart
