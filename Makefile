# Floe's two entry points (see README.md):
#   make demo   set up, then run Floe's main job on embedded defaults
#   make test   set up, then run the whole test suite
# Set-up is incremental: a second run downloads nothing.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
JARS   := .cache/jars
PYTEST_ARGS ?=

.PHONY: setup venv jars postgres test demo clean

setup: venv jars

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[test]'
	touch $@

jars:
	deploy/fetch-jars.sh $(JARS)

# The catalog tests start a real PostgreSQL server from Debian's package.
postgres:
	@ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || command -v postgres >/dev/null 2>&1 || \
	  { echo "installing PostgreSQL (Debian package) for the catalog tests"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql; }

test: setup postgres
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS)

demo: setup
	$(VENV)/bin/floe demo

clean:
	rm -rf $(VENV) .cache build *.egg-info
