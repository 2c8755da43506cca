# Floe: multi-stage image. The build stage runs the same set-up as the README
# (a virtualenv with Floe installed, and the JVM jars resolved by deploy/pom.xml).
# The base images are build arguments: by default the public Python image;
# `make image` passes a stand-in built from Debian's packages
# (deploy/base-image.sh) where Docker Hub cannot be reached.
ARG BUILD_BASE=python:3.11-slim-bookworm
ARG RUNTIME_BASE=python:3.11-slim-bookworm

FROM ${BUILD_BASE} AS build
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jdk-headless maven \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md ./
COPY service service
COPY ingest ingest
COPY commit commit
COPY compaction compaction
COPY table table
COPY runtime runtime
COPY deploy deploy
RUN python -m venv /opt/floe/venv
RUN /opt/floe/venv/bin/pip install --quiet --upgrade pip
RUN /opt/floe/venv/bin/pip install --quiet .
# bytecode in Spark's pyspark.zip, as make setup does (runtime/pyspark_bytecode.py)
RUN /opt/floe/venv/bin/python -m runtime.pyspark_bytecode
RUN deploy/fetch-jars.sh /opt/floe/jars spark-kafka kafka-broker

FROM ${RUNTIME_BASE}
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --create-home floe \
    && mkdir -p /var/lib/floe && chown floe:floe /var/lib/floe
COPY --from=build /opt/floe /opt/floe
COPY --chmod=0755 deploy/entrypoint.sh /opt/floe/bin/entrypoint
ENV PATH=/opt/floe/venv/bin:$PATH \
    FLOE_JARS_DIR=/opt/floe/jars \
    FLOE_CLASS_ARCHIVE_DIR=/opt/floe/jvm
# Spark's classes, parsed and verified once here with this stage's Java, and
# mapped by every driver the image starts, as make setup does (runtime/class_archive.py)
RUN python -m runtime.class_archive
USER floe
# `floe …` for Floe's commands; `executor` when Spark on Kubernetes runs this
# image as an executor pod (deploy/kubernetes/spark-on-kubernetes).
ENTRYPOINT ["/opt/floe/bin/entrypoint"]
