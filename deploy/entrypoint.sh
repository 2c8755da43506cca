#!/usr/bin/env bash
# The image's entrypoint. `floe …` for Floe's own commands (the Deployment's
# args); `executor` when Spark on Kubernetes starts this image as an executor
# pod (Spark passes that one argument and the SPARK_* variables below, as its
# own images' entrypoint expects). The executor runs pyspark's JVM with the
# spark-kafka jar set; its Python workers run this image's virtualenv, so they
# import Floe.
set -euo pipefail
if [ "${1:-}" != "executor" ]; then
  exec floe "$@"
fi
pyspark_home="$(python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"
java_opts=()
while IFS='=' read -r name value; do
  [[ "$name" == SPARK_JAVA_OPT_* ]] && java_opts+=("$value")
done < <(env | sort -t_ -k4 -n)
cmd=(java "${java_opts[@]}" "-Xms${SPARK_EXECUTOR_MEMORY}" "-Xmx${SPARK_EXECUTOR_MEMORY}"
  -cp "${pyspark_home}/jars/*:${FLOE_JARS_DIR}/spark-kafka/*${SPARK_CLASSPATH:+:$SPARK_CLASSPATH}"
  org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend
  --driver-url "$SPARK_DRIVER_URL" --executor-id "$SPARK_EXECUTOR_ID" --cores "$SPARK_EXECUTOR_CORES"
  --app-id "$SPARK_APPLICATION_ID" --hostname "$SPARK_EXECUTOR_POD_IP"
  --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" --podName "$SPARK_EXECUTOR_POD_NAME")
if [ -n "${FLOE_ENTRYPOINT_DRY_RUN:-}" ]; then
  printf '%s\n' "${cmd[@]}"
  exit 0
fi
exec "${cmd[@]}"
