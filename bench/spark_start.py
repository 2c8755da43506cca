"""What one Spark driver costs to start: with and without the class archive, with the JVM's C2 compiler or C1 alone.

Each round starts a fresh Python process per variant, interleaved (none, archive,
archive + C1, none + C1), which builds Floe's session and runs one shuffle and
one Python task, then stops. CPU is the machine's whole busy time while the
process ran (from /proc/stat; the JVM outlives its Python parent's rusage), so
run it on a quiet machine. Figures: docs/performance.md.

    .venv/bin/python bench/spark_start.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
C1_ONLY = "-XX:TieredStopAtLevel=1"
NO_ARCHIVE = {"FLOE_CLASS_ARCHIVE_DIR": "/nonexistent/floe-bench"}
VARIANTS = {
    "no archive (JVM defaults)": NO_ARCHIVE,
    "class archive": {},
    "class archive + C1 only (the tests)": {"SPARK_SUBMIT_OPTS": C1_ONLY},
    "no archive + C1 only": {**NO_ARCHIVE, "SPARK_SUBMIT_OPTS": C1_ONLY},
}
DRIVER = """
import time
from runtime.spark_session import build_spark_session
started = time.monotonic()
session = build_spark_session("bench-spark-start")
session.range(0, 200_000).selectExpr("id % 7 AS k").groupBy("k").count().collect()
session.sparkContext.parallelize(range(1_000), 2).map(lambda n: n * 2).sum()
print(f"{time.monotonic() - started:.2f}")
session.stop()
"""


def busy_seconds() -> float:
    """The machine's busy CPU seconds so far (all but idle and iowait)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def one_start(extra_env: dict[str, str]) -> tuple[float, float, float]:
    """(busy CPU s, wall s of the process, s from the session request to the jobs' end)."""
    env = {key: value for key, value in os.environ.items() if key != "SPARK_SUBMIT_OPTS"}
    env.update({"PYTHONPATH": str(ROOT), **extra_env})
    cpu, wall = busy_seconds(), time.monotonic()
    done = subprocess.run([sys.executable, "-c", DRIVER], env=env, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"the driver failed:\n{done.stderr[-2000:]}")
    return busy_seconds() - cpu, time.monotonic() - wall, float(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    rounds = parser.parse_args().rounds
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in VARIANTS}
    for round_number in range(1, rounds + 1):
        for name, env in VARIANTS.items():
            results[name].append(one_start(env))
            cpu, wall, session = results[name][-1]
            print(f"round {round_number}: {name}: {cpu:.1f} CPU s, {wall:.1f} s wall, {session:.1f} s in the session",
                  flush=True)
    print("\n| driver start | CPU s (median) | wall s (median) | session to jobs' end, s (median) |")
    print("| --- | --- | --- | --- |")
    for name, runs in results.items():
        cpu, wall, session = (statistics.median(column) for column in zip(*runs))
        print(f"| {name} | {cpu:.1f} | {wall:.1f} | {session:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
