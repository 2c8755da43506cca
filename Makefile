# Floe's two entry points (see README.md):
#   make demo   set up what Floe runs with, then run Floe's main job on embedded defaults
#   make test   set up, then run the whole test suite
# Set-up is incremental: a second run downloads nothing.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
JARS   := .cache/jars
PYTEST_ARGS ?=
# Test worker processes (pytest-xdist); each test file runs whole on one of them. Three on two cores:
# the fault tests (tests/faults) spend most of their time waiting out an outage.
TEST_WORKERS ?= 3
BASE_IMAGE ?= localhost/floe-base:bookworm
IMAGE  ?= localhost/floe:dev

.PHONY: setup venv jars runtime-jars class-archive postgres promtool podman base-image image image-if-engine test demo clean

setup: venv jars class-archive

venv: $(VENV)/.installed $(VENV)/.pyspark-bytecode

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[test]'
	touch $@

# Bytecode beside the sources in Spark's pyspark.zip: each Python process that
# Spark starts (a streaming query's source planner among them) imports pyspark
# from that zip, compiling it anew without (runtime/pyspark_bytecode.py).
$(VENV)/.pyspark-bytecode: $(VENV)/.installed
	$(VENV)/bin/python -m runtime.pyspark_bytecode
	touch $@

jars:
	deploy/fetch-jars.sh $(JARS)

# The jar sets Floe itself runs with (the demo's): the test-only sets are about 200 MB more.
runtime-jars:
	deploy/fetch-jars.sh $(JARS) spark-kafka kafka-broker

# Spark's classes, parsed and verified once, mapped by every Spark driver
# after (runtime/class_archive.py): its start takes about a third less CPU.
class-archive: venv runtime-jars
	$(VENV)/bin/python -m runtime.class_archive

# The catalog tests start a real PostgreSQL server from Debian's package.
postgres:
	@ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || command -v postgres >/dev/null 2>&1 || \
	  { echo "installing PostgreSQL (Debian package) for the catalog tests"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql; }

# The alert rule tests run promtool, from Debian's prometheus package. Its
# postinst asks invoke-rc.d to start a prometheus service; without systemd,
# policy-rc.d (as Debian container images ship it) denies that, and the
# install still succeeds. Recommends (node-exporter) are not needed.
promtool:
	@command -v promtool >/dev/null 2>&1 || \
	  { echo "installing promtool (Debian package prometheus) for the alert rule tests"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus; }

# The image is built with Debian's podman (runc, cgroupfs, vfs, host network:
# deploy/podman/containers.conf), on a base made by mmdebstrap from Debian's
# packages in place of the public Python image (deploy/base-image.sh).
podman:
	@command -v podman >/dev/null 2>&1 && command -v mmdebstrap >/dev/null 2>&1 || \
	  { echo "installing podman and mmdebstrap (Debian packages) for the image"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	      podman runc conmon mmdebstrap >/dev/null; }

base-image: podman
	deploy/base-image.sh $(BASE_IMAGE)

# The Dockerfile as it is, on the local base; rebuilt only when a file it reads
# changed (deploy/build-image.sh).
image: base-image
	deploy/build-image.sh $(IMAGE) $(BASE_IMAGE)

# The image's tests need the image; where podman cannot run containers, they
# are skipped (each says why) and the build is not tried.
image-if-engine: podman
	@if deploy/podman/podman info >/dev/null 2>&1; then $(MAKE) --no-print-directory image; \
	  else echo "no container engine runs here: the image is not built, and its tests will be skipped"; fi

test: setup postgres promtool image-if-engine
	$(VENV)/bin/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

demo: venv runtime-jars class-archive
	$(VENV)/bin/floe demo

clean:
	rm -rf $(VENV) .cache build *.egg-info
