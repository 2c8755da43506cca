#!/usr/bin/env bash
# Builds the stand-in for the public base image (python:3.11-slim-bookworm),
# which cannot be pulled on machines that reach only Debian's mirrors: Debian
# bookworm (minbase) with Python 3.11 and a Java 17 runtime, built by
# mmdebstrap from Debian's packages and imported into podman (deploy/podman).
#   base-image.sh [TAG]        (default localhost/floe-base:bookworm)
# The image is labelled with this script's checksum; while the label matches,
# a second run builds nothing.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
tag="${1:-localhost/floe-base:bookworm}"
podman="$here/podman/podman"
recipe="$(sha256sum "$0" | cut -c1-16)"
if [ "$("$podman" image inspect --format '{{index .Labels "floe.base.recipe"}}' "$tag" 2>/dev/null)" = "$recipe" ]; then
  echo "base image $tag: up to date"
  exit 0
fi
command -v mmdebstrap >/dev/null || { echo "base-image: mmdebstrap is not installed (make podman installs it)" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "base image $tag: building from Debian's packages with mmdebstrap" >&2
# python-is-python3: `python` on PATH, as in the public image; python3.11-venv:
# `python -m venv` with pip; ca-certificates: pip and Maven over TLS. The
# machine's own trust anchors (/usr/local/share/ca-certificates, e.g. a
# TLS-inspecting proxy's) join the system bundle and Java's truststore, and
# pip is pointed at that bundle, so the build trusts what this machine trusts.
mmdebstrap --quiet --variant=minbase \
  --include=python3.11,python3.11-venv,python-is-python3,openjdk-17-jre-headless,ca-certificates \
  --customize-hook='copy-in /usr/local/share/ca-certificates /usr/local/share' \
  --customize-hook='chroot "$1" update-ca-certificates >/dev/null' \
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
  bookworm "$work/rootfs.tar" \
  "deb http://deb.debian.org/debian bookworm main" \
  "deb http://deb.debian.org/debian bookworm-updates main" \
  "deb http://deb.debian.org/debian-security bookworm-security main"
"$podman" import --quiet --change 'ENV LANG=C.UTF-8' --change 'CMD ["python"]' \
  --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
  --change 'ENV REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt' \
  --change "LABEL floe.base.recipe=$recipe" "$work/rootfs.tar" "$tag" >/dev/null
echo "base image $tag: built, $("$podman" image inspect --format "{{.Size}}" "$tag" | numfmt --to=iec)B"
