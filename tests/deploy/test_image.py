"""Floe's image, run by podman the way the Compose file and the Kubernetes Deployment run it (issue 31).

The image is ``make image``'s (``localhost/floe:dev``, or ``FLOE_IMAGE``).
Each container runs it as the deployment does (:data:`DEPLOYMENT`): the
image's entrypoint and user, the configuration read-only at
``/etc/floe/config.yaml``, the data volume at ``/var/lib/floe`` (SQLite
catalog, warehouse, checkpoints), the HTTP ports 9464 and 9465, a read-only
root file system with a writable ``/tmp``. The host network reaches the
session's broker on loopback, and the tests reach the containers' ports.

Inside the containers the table's files are at ``/var/lib/floe``. Iceberg Java
reads them on the host in a mount namespace of its own, where the test's
``varlib`` directory (which holds the volume, ``floe``) is bound at
``/var/lib``: the same paths, and nothing written outside the test's directory.

Without a container engine, or without the image, every test here is skipped
with one line that says which.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import pytest
import yaml

from service.ingest_command import EXIT_STOPPED
from tests.ingest.e2e_support import REPO, change_events, expected_table, json_log_records, normalized
from tests.service.test_demo import summary_value
from tests.service.test_ingest_command import events_config, http_get
from tests.support.iceberg_oracle import IcebergOracle

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.oracle]

PODMAN = str(REPO / "deploy" / "podman" / "podman")
IMAGE = os.environ.get("FLOE_IMAGE", "localhost/floe:dev")
TABLE = "db.events"


@dataclass(frozen=True)
class Deployment:
    """How Floe's containers are run: what deploy/compose.yaml and deploy/kubernetes declare too
    (tests/service/test_deploy.py holds them to it)."""

    user: int = 10001
    config_dir: str = "/etc/floe"
    config: str = "/etc/floe/config.yaml"
    data: str = "/var/lib/floe"
    ingest_port: int = 9464
    compact_port: int = 9465
    spark_local_dirs: str = "/tmp/spark"


DEPLOYMENT = Deployment()


# ----------------------------------------------------------------------------- the engine


def engine_problem() -> Optional[str]:
    """Why no container of the image can run here, in one line; None when one can."""
    if shutil.which("podman") is None:
        return "no container engine: podman is not installed (make podman installs it)"
    info = subprocess.run([PODMAN, "info", "--format", "{{.Host.OCIRuntime.Name}}"], capture_output=True, text=True,
                          timeout=120)
    if info.returncode != 0:
        return f"no container engine runs here: podman info: {(info.stderr.strip().splitlines() or ['?'])[-1]}"
    if subprocess.run([PODMAN, "image", "exists", IMAGE], timeout=120).returncode != 0:
        return f"no image {IMAGE} (make image builds it)"
    return None


@pytest.fixture(scope="module")
def image() -> str:
    problem = engine_problem()
    if problem:
        pytest.skip(problem)
    return IMAGE


def podman(*args: str, timeout_s: float = 300, check: bool = True) -> str:
    done = subprocess.run([PODMAN, *args], capture_output=True, text=True, timeout=timeout_s)
    if check and done.returncode != 0:
        raise AssertionError(f"podman {' '.join(args[:2])} failed ({done.returncode}): {done.stderr[-2000:]}")
    return done.stdout


@dataclass
class Container:
    """One Floe container, created once and started, stopped, killed and started again by name."""

    name: str

    @classmethod
    def run(cls, image: str, command: str, etc: Path, volume: Path) -> "Container":
        d = DEPLOYMENT
        name = f"floe-{command}-{uuid.uuid4().hex[:8]}"
        podman("run", "--detach", "--name", name, "--read-only", "--tmpfs", "/tmp:rw,mode=1777",
               "--volume", f"{etc}:{d.config_dir}:ro", "--volume", f"{volume}:{d.data}",
               "--env", f"SPARK_LOCAL_DIRS={d.spark_local_dirs}", "--stop-timeout", "120",
               image, command, "--config", d.config)
        return cls(name)

    def running(self) -> bool:
        return podman("inspect", "--format", "{{.State.Running}}", self.name).strip() == "true"

    def exit_code(self) -> int:
        return int(podman("inspect", "--format", "{{.State.ExitCode}}", self.name).strip())

    def logs(self) -> str:
        done = subprocess.run([PODMAN, "logs", self.name], capture_output=True, text=True, timeout=120)
        return done.stdout + done.stderr

    def records(self) -> list[dict[str, Any]]:
        return json_log_records(self.logs())

    def stop(self) -> int:
        """SIGTERM (podman stop), then the exit code once the container ended."""
        podman("stop", "--time", "180", self.name, timeout_s=240)
        return self.exit_code()

    def kill(self) -> int:
        podman("kill", "--signal", "KILL", self.name)
        podman("wait", self.name, timeout_s=120)
        return self.exit_code()

    def start(self) -> None:
        podman("start", self.name)

    def exec(self, *command: str) -> str:
        return podman("exec", self.name, *command).strip()

    def remove(self) -> None:
        podman("rm", "--force", "--time", "0", self.name, check=False)


# ----------------------------------------------------------------------------- waits


def wait_for(what: str, condition: Callable[[], bool], container: Container, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if not container.running():
            raise AssertionError(f"{container.name} ended (exit {container.exit_code()}) waiting for {what}:\n"
                                 f"{container.logs()[-4000:]}")
        assert time.monotonic() < deadline, f"not within {timeout_s:.0f}s: {what}:\n{container.logs()[-4000:]}"
        time.sleep(0.2)


def answers(port: int, path: str, status: int = 200) -> bool:
    try:
        return http_get(f"http://127.0.0.1:{port}{path}")[0] == status
    except OSError:
        return False


def metric(port: int, name: str) -> Optional[float]:
    """The sum of the table's samples of ``name`` (the lag has one per partition); None when there are none."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        _, text = http_get(f"http://127.0.0.1:{port}/metrics")
    except OSError:
        return None
    values = [s.value for f in text_string_to_metric_families(text) for s in f.samples
              if s.name == name and s.labels.get("table") == TABLE]
    return sum(values) if values else None


def latest(directory: Path) -> int:
    ids = [int(p.name) for p in directory.glob("[0-9]*")] if directory.exists() else []
    return max(ids, default=-1)


def wait_mid_batch(ingest: Container, checkpoint: Path, after_commits: int) -> int:
    """The id of a batch in progress (``offsets/N`` written, ``commits/N`` not yet), after ``after_commits``
    commits in this container's log."""
    found: list[int] = []

    def in_progress() -> bool:
        running = latest(checkpoint / "offsets")
        if ingest.logs().count('"result": "committed"') >= after_commits and running > latest(checkpoint / "commits"):
            found.append(running)
        return bool(found)

    wait_for("a batch in progress", in_progress, ingest)
    return found[0]


# ----------------------------------------------------------------------------- reading on the host


def volume_reader(tmp: Path, varlib: Path) -> IcebergOracle:
    """Iceberg Java (and Floe's reader) on the host, seeing ``varlib`` at /var/lib as the containers see their
    volume at /var/lib/floe."""
    bind = 'mount --bind "$0" /var/lib && exec "$@"'
    wrapper = ["unshare", "--mount", "--propagation", "private", "sh", "-c", bind, str(varlib)]
    return IcebergOracle(tmp / "oracle", wrapper=wrapper).start()


def floe_config(bootstrap: str, topic: str) -> dict[str, Any]:
    """The ingest tests' upsert table on format v3, everything in the data volume, the deployment's ports."""
    d = DEPLOYMENT
    raw = events_config(Path(d.data), bootstrap, topic, table={"format_version": 3})
    raw["catalog"] = {"uri": f"sqlite:///{d.data}/catalog.db", "warehouse": f"{d.data}/warehouse"}
    raw["http"] = {"host": "127.0.0.1", "ingest_port": d.ingest_port, "compact_port": d.compact_port}
    raw["log_format"] = "json"
    raw["spark"] = {"master": "local[2]"}
    raw["compaction"] = {"interval": "10s", "jitter": "0s", "rewrite_options": {"min-input-files": "2"}}
    return raw


# ----------------------------------------------------------------------------- the tests


def test_floe_demo_runs_in_the_image_as_its_user(image):
    out = podman("run", "--rm", "--read-only", "--tmpfs", "/tmp:rw,mode=1777", image,
                 "demo", "--work-dir", "/tmp/demo", "--duration", "15", "--rate", "100", timeout_s=600)
    produced = int(summary_value(out, "events produced"))
    assert produced >= 1_000 and int(summary_value(out, "records landed")) == produced, out[-3000:]
    assert summary_value(out, "consumer lag") == "0 records"
    assert summary_value(out, "compaction").startswith("success")
    assert int(summary_value(out, "rows in shop.orders")) > 0
    whoami = podman("run", "--rm", "--entrypoint", "id", image, "-u").strip()
    assert whoami == str(DEPLOYMENT.user), "the image runs as its non-root user"


def test_ingest_and_compact_containers_stop_whole_survive_kill_and_land_exactly(image, kafka_bootstrap, new_topic,
                                                                                paced_producer, tmp_path):
    d = DEPLOYMENT
    topic = new_topic("image", partitions=2)
    varlib, etc = tmp_path / "varlib", tmp_path / "etc"
    volume = varlib / "floe"
    volume.mkdir(parents=True)
    os.chown(volume, d.user, d.user)  # as compose's floe-data-owner and the pod's fsGroup make it
    etc.mkdir()
    (etc / "config.yaml").write_text(yaml.safe_dump(floe_config(kafka_bootstrap, topic)))
    checkpoint = volume / "checkpoints" / TABLE
    # 200 records a second: a batch every trigger until the last kill, and well below what the ingest lands
    # (1,000 a batch) even beside another heavy test, so the backlog left at the end drains in seconds
    producer = paced_producer(kafka_bootstrap, topic, change_events(200_000, 3_000, seed=31), chunk=50, pause_s=0.25)
    containers: list[Container] = []
    try:
        ingest = Container.run(image, "ingest", etc, volume)
        compact = Container.run(image, "compact", etc, volume)
        containers += [ingest, compact]
        wait_for("ingest ready", lambda: answers(d.ingest_port, "/readyz"), ingest)
        wait_for("compact healthy", lambda: answers(d.compact_port, "/healthz"), compact)
        assert answers(d.ingest_port, "/healthz")
        read = lambda: (metric(d.ingest_port, "floe_ingest_records_committed_total") or 0) > 0  # noqa: E731
        wait_for("the first records committed", read, ingest)
        assert "floe_compaction" in http_get(f"http://127.0.0.1:{d.compact_port}/metrics")[1]
        assert ingest.exec("id", "-u") == str(d.user), "Floe runs as the image's non-root user"
        assert "floe" in ingest.exec("cat", "/proc/1/cmdline").replace("\0", " "), "Floe is PID 1"

        wait_mid_batch(ingest, checkpoint, after_commits=2)
        assert ingest.stop() == EXIT_STOPPED, ingest.logs()[-4000:]
        last = ingest.records()[-1]
        assert (last["message"], last["exit_code"]) == ("ingest stopped", EXIT_STOPPED), last
        # The stop may come after in_flight committed and the next batch began (a slow podman stop): at most
        # that running batch commits after it, and no other starts.
        records = ingest.records()
        stop = next(i for i, r in enumerate(records) if r["message"].startswith("stop requested"))
        after = [r for r in records[stop:] if r.get("result") == "committed"]
        assert len(after) <= 1, f"only the running batch ends after the stop, no batch starts: {after}"
        assert compact.stop() == EXIT_STOPPED, compact.logs()[-4000:]

        ingest.start()
        compact.start()
        wait_mid_batch(ingest, checkpoint, after_commits=ingest.logs().count('"result": "committed"') + 1)
        assert ingest.kill() == 137
        ingest.start()
        delivered = producer.stop()
        caught_up = lambda: metric(d.ingest_port, "floe_ingest_consumer_lag_records") == 0  # noqa: E731
        wait_for("every record committed", caught_up, ingest)
        assert ingest.stop() == EXIT_STOPPED and compact.stop() == EXIT_STOPPED
    finally:
        producer.stop()
        for container in containers:
            container.remove()

    foreign = [str(p.relative_to(volume)) for p in volume.rglob("*") if p.lstat().st_uid != d.user]
    assert not foreign, f"files in the volume not owned by the image's user: {foreign[:10]}"
    reader = volume_reader(tmp_path, varlib)
    try:
        batches = reader.call("tests.deploy.volume_reads:committed_batches", catalog=f"sqlite:///{d.data}/catalog.db",
                              warehouse=f"{d.data}/warehouse", table=TABLE)
        rows = reader.call("tests.support.oracle_ops:read_by_metadata_location",
                           metadata_location=batches["metadata_location"])
    finally:
        reader.stop()
    ends = whole_batches(batches["batches"])
    assert sum(ends.values()) == len(delivered), "every record committed, none twice"
    assert normalized(rows) == expected_table(delivered), "Iceberg Java reads exactly the records' final images"


def whole_batches(batches: list[dict[str, Any]]) -> dict[str, int]:
    """Each committed batch starts where the previous one ended, per partition; the end offsets."""
    ends: dict[str, int] = {}
    for batch in batches:
        for partition, (start, end) in batch["offsets"].items():
            assert start == ends.get(partition, 0), f"gap or overlap at {partition}: {start}"
            ends[partition] = end
    assert [b["batch_id"] for b in batches] == sorted(b["batch_id"] for b in batches)
    return ends




def test_compose_and_kubernetes_run_the_image_as_these_tests_do():
    """The entrypoint, user, ports, configuration path and data volume the containers above ran with are the
    ones deploy/compose.yaml and the Kubernetes Deployment declare."""
    from tests.service.test_deploy import compose, containers, example_config, floe_services, k8s

    d = DEPLOYMENT
    dockerfile = (REPO / "Dockerfile").read_text()
    assert f"--uid {d.user} " in dockerfile and re.search(r"^USER floe$", dockerfile, re.M)
    assert re.search(r'^ENTRYPOINT \["/opt/floe/bin/entrypoint"\]$', dockerfile, re.M)
    ports = {"ingest": d.ingest_port, "compact": d.compact_port}
    assert (example_config().http.ingest_port, example_config().http.compact_port) == (d.ingest_port, d.compact_port)
    for name, service in floe_services().items():
        command = service["command"][0]
        assert "entrypoint" not in service and "user" not in service, f"{name} runs the image's entrypoint and user"
        assert service["command"][1:] == ["--config", d.config], name
        assert f"{ports[command]}:{ports[command]}" in service["ports"], name
        mounts = [volume.split(":") for volume in service["volumes"]]
        assert [dst for src, dst, *_ in mounts if src in compose()["volumes"]] == [d.data], name
    owner = compose()["services"]["floe-data-owner"]
    assert owner["entrypoint"] == ["chown", "-R", f"{d.user}:{d.user}", d.data]

    pod = k8s("Deployment")["spec"]["template"]["spec"]
    assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["fsGroup"]) == (d.user, d.user)
    for name, container in containers().items():
        assert "command" not in container, f"{name} runs the image's entrypoint"
        assert container["args"] == [name, "--config", d.config]
        assert [p["containerPort"] for p in container["ports"]] == [ports[name]]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True, "the tests run with --read-only"
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        assert mounts[d.config_dir].get("readOnly") is True and "/tmp" in mounts
    checkpoints = {m["mountPath"] for m in containers()["ingest"]["volumeMounts"]}
    assert any(Path(path).is_relative_to(d.data) for path in checkpoints), f"ingest: no volume under {d.data}"
    env = {e["name"]: e.get("value") for e in containers()["ingest"]["env"]}
    assert env["SPARK_LOCAL_DIRS"] == d.spark_local_dirs
