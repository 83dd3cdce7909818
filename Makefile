# Two commands do everything on a fresh machine (each creates .venv and installs what it needs):
#   make quickstart   the main job on the embedded corpus
#   make test         the test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: quickstart test install clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[dev,hf]'
	touch $@

install: $(VENV)/.installed

quickstart: $(VENV)/.installed
	$(BIN)/contextlab quickstart

test: $(VENV)/.installed
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) contextlab-quickstart
