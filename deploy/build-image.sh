#!/usr/bin/env bash
# Builds Floe's image from the Dockerfile with podman (deploy/podman), on the
# base image deploy/base-image.sh makes from Debian's packages:
#   build-image.sh IMAGE BASE_IMAGE
# The image is labelled with a checksum of everything the build reads (the
# Dockerfile, .dockerignore, the files it copies, the base image's id). While
# the label matches, nothing is built. podman's per-step layer cache is not
# kept: with the vfs storage driver each layer is a full copy of the file
# system (about 36 GB for this Dockerfile's steps), so the finished image alone
# is the cache.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
image="$1" base="$2"
podman="$here/podman/podman"
inputs() {
  cd "$root"
  "$podman" image inspect --format '{{.Id}}' "$base"
  find Dockerfile .dockerignore pyproject.toml README.md service ingest commit compaction table runtime deploy \
    -type f ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 | sort -z | xargs -0 sha256sum
}
recipe="$(inputs | sha256sum | cut -c1-16)"
if [ "$("$podman" image inspect --format '{{index .Labels "floe.image.recipe"}}' "$image" 2>/dev/null)" = "$recipe" ]; then
  echo "image $image: up to date"
  exit 0
fi
start=$(date +%s)
"$podman" build --layers=false --build-arg BUILD_BASE="$base" --build-arg RUNTIME_BASE="$base" \
  --label "floe.image.recipe=$recipe" --tag "$image" "$root"
"$podman" image prune --force >/dev/null  # the image this one replaced, and the build stage
size="$("$podman" image inspect --format '{{.Size}}' "$image" | numfmt --to=iec)"
echo "image $image: built in $(($(date +%s) - start)) s, ${size}B"
