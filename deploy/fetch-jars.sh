#!/usr/bin/env bash
# Copies each jar set of deploy/pom.xml into its own folder:
#   fetch-jars.sh [DEST] [SET...]     (default DEST .cache/jars, every set)
# A set whose folder holds a .complete stamp newer than the pom is left as it
# is, so a second run downloads nothing and works offline.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dest="${1:-$here/../.cache/jars}"
shift || true
sets=("$@")
[ ${#sets[@]} -gt 0 ] || sets=(spark-kafka kafka-broker iceberg-oracle s3proxy rest-catalog)
mkdir -p "$dest"
dest="$(cd "$dest" && pwd)"  # Maven resolves relative paths against the pom's folder
settings="${FLOE_MAVEN_SETTINGS:-$here/maven-settings.xml}"
for set in "${sets[@]}"; do
  out="$dest/$set"
  if [ -f "$out/.complete" ] && [ "$out/.complete" -nt "$here/pom.xml" ]; then
    continue
  fi
  echo "fetch-jars: resolving '$set' into $out" >&2
  rm -rf "$out.tmp"
  mvn -q -B -s "$settings" -f "$here/pom.xml" -P "$set" \
    org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$out.tmp"
  rm -rf "$out"
  mv "$out.tmp" "$out"
  touch "$out/.complete"
done
