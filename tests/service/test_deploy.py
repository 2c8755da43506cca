"""deploy/: Kubernetes manifests, compose stack, Prometheus, Grafana, example config, Dockerfile.

The Kubernetes manifests are validated offline against the Kubernetes JSON
schemas shipped in the ``kubernetes-validate`` package (strict: unknown
fields are errors), as the real ``kubectl kustomize`` renders the base and
each overlay (skipped, saying why, where neither kubectl nor kustomize is installed). Custom resources (ServiceMonitor, PrometheusRule) have no
schema there and are checked structurally: the ServiceMonitor against the
Service it selects, the PrometheusRule against deploy/prometheus/alerts.yaml.
"""

from __future__ import annotations

import copy
import json
import re
import shlex
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any, Iterator

import kubernetes_validate.utils as kubernetes_validate  # test extra: kubernetes-validate ships the schemas
import pytest
import yaml

from service.config import FloeConfig, env_overrides, load_config

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S_ROOT = DEPLOY / "kubernetes"
K8S = K8S_ROOT / "base"
K8S_VERSION = "1.33"
NOT_APPLIED = {"secrets.example.yaml", "kustomization.yaml"}
HISTOGRAM_SUFFIXES = ("_bucket", "_count", "_sum")


# ----------------------------------------------------------------------------- helpers


@cache
def documented_metrics() -> dict[str, tuple[str, frozenset[str]]]:
    """docs/metrics.md tables: name -> (type, labels)."""
    rows = re.finditer(r"^\| `(floe_\w+)` \| (\w+) \| ([^|]+) \|", (ROOT / "docs" / "metrics.md").read_text(), re.M)
    return {m[1]: (m[2], frozenset(label.strip() for label in m[3].split(","))) for m in rows}


_PROMQL_KEYWORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
}


def promql_metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression: identifiers that are not functions, keywords or labels."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for m in re.finditer(r"(?<![\w$.])[A-Za-z_:][\w:]*", text):
        if m[0] not in _PROMQL_KEYWORDS and not text[m.end() :].lstrip().startswith("("):
            names.add(m[0])
    return names


def promql_labels(expr: str) -> set[str]:
    """Label names in selectors and in by/on/without/ignoring lists."""
    labels = set()
    for matchers in re.findall(r"\{([^}]*)\}", re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)):
        labels |= set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", matchers))
    for group in re.findall(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)", expr):
        labels |= {label.strip() for label in group.split(",") if label.strip()}
    return labels


def check_promql(expr: str, where: str) -> set[str]:
    """Assert every metric and label of ``expr`` is in docs/metrics.md; returns the base metric names."""
    docs = documented_metrics()
    found = set()
    for name in promql_metric_names(expr):
        base = name
        if name not in docs:
            base = next((name[: -len(s)] for s in HISTOGRAM_SUFFIXES if name.endswith(s)), name)
            assert docs.get(base, ("",))[0] == "histogram", f"{where}: {name} is not in docs/metrics.md ({expr})"
        found.add(base)
    allowed = set().union(*(docs[name][1] for name in found)) | {"le"} if found else set()
    assert promql_labels(expr) <= allowed, f"{where}: labels {promql_labels(expr) - allowed} not documented ({expr})"
    return found


def k8s_documents() -> Iterator[tuple[str, dict[str, Any]]]:
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                yield path.name, doc


def k8s(kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for _, d in k8s_documents() if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def containers() -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in k8s("Deployment")["spec"]["template"]["spec"]["containers"]}


def configmap_config(tmp_path: Path) -> FloeConfig:
    """The ConfigMap's config, loaded with the FLOE_* variables the Deployment sets (dummy values)."""
    path = tmp_path / "config.yaml"
    path.write_text(k8s("ConfigMap", "floe-config")["data"]["config.yaml"])
    env = {e["name"]: "dummy" for c in containers().values() for e in c.get("env", [])}
    return load_config(path, env, check_files=False)


def compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def example_config() -> FloeConfig:
    return load_config(DEPLOY / "example-config.yaml", {})


# ----------------------------------------------------------------------------- metrics contract


def test_metrics_doc_parses() -> None:
    docs = documented_metrics()
    assert len(docs) >= 30
    assert docs["floe_ingest_consumer_lag_records"] == ("gauge", frozenset({"table", "topic", "partition"}))
    assert docs["floe_up"] == ("gauge", frozenset({"component"}))


def test_promql_parser_finds_metrics_and_labels() -> None:
    expr = 'histogram_quantile(0.95, sum by (le, table) (rate(floe_x_seconds_bucket{table=~"$t"}[5m]))) > 4 * 3600'
    assert promql_metric_names(expr) == {"floe_x_seconds_bucket"}
    assert promql_labels(expr) == {"le", "table"}
    assert promql_metric_names("up == 0 or absent(floe_up)") == {"up", "floe_up"}
    with pytest.raises(AssertionError, match="up is not in docs"):
        check_promql("up == 0", "test")
    with pytest.raises(AssertionError, match="labels {'pod'} not documented"):
        check_promql("sum by (pod) (floe_up)", "test")


def dashboard_panels() -> list[dict[str, Any]]:
    dashboard = json.loads((DEPLOY / "grafana" / "floe-dashboard.json").read_text())
    return [p for p in dashboard["panels"] if p["type"] != "row"]


def test_dashboard_has_a_panel_for_every_documented_metric_and_no_other() -> None:
    used: set[str] = set()
    for panel in dashboard_panels():
        assert panel["targets"], f"panel {panel['title']!r} has no query"
        for target in panel["targets"]:
            used |= check_promql(target["expr"], f"dashboard panel {panel['title']!r}")
    assert set(documented_metrics()) - used == set()


def test_dashboard_layout_is_well_formed() -> None:
    dashboard = json.loads((DEPLOY / "grafana" / "floe-dashboard.json").read_text())
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["query"] == "prometheus"
    check_promql(variables["table"]["query"]["query"].replace("label_values(", "").split(",")[0], "table variable")
    for panel in dashboard_panels():
        assert panel["datasource"]["uid"] == "${datasource}"


@cache
def alert_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yaml").read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def test_alert_rules_use_only_documented_metrics() -> None:
    used: set[str] = set()
    for rule in alert_rules():
        used |= check_promql(rule["expr"], f"alert {rule['alert']}")
    # the alerts the deployment promises
    assert {
        "floe_ingest_freshness_seconds",
        "floe_ingest_consumer_lag_records",
        "floe_ingest_batches_total",
        "floe_ingest_query_active",
        "floe_compaction_runs_total",
        "floe_compaction_last_success_timestamp_seconds",
    } <= used


def test_alert_rules_are_complete() -> None:
    names = [rule["alert"] for rule in alert_rules()]
    assert len(names) == len(set(names))
    for rule in alert_rules():
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule["alert"]
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
        assert re.fullmatch(r"\d+[smhd]", rule.get("for", "0s")), rule["alert"]
        assert rule["expr"].count("(") == rule["expr"].count(")"), rule["alert"]


# ----------------------------------------------------------------------------- kubernetes


CUSTOM_RESOURCES = {"ServiceMonitor", "PrometheusRule"}
VALIDATED = [(name, doc) for name, doc in k8s_documents() if doc["kind"] not in CUSTOM_RESOURCES | {"Kustomization"}]


@pytest.mark.parametrize("name, doc", VALIDATED, ids=[f"{n}:{d['kind']}:{d['metadata']['name']}" for n, d in VALIDATED])
def test_manifest_validates_against_the_kubernetes_schema(name: str, doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_the_validator_is_strict_and_offline() -> None:
    deployment = copy.deepcopy(k8s("Deployment"))
    deployment["spec"]["template"]["spec"]["containers"][0]["livenessProbes"] = {}
    with pytest.raises(kubernetes_validate.ValidationError, match="livenessProbes"):
        kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)
    deployment = copy.deepcopy(k8s("Deployment"))
    deployment["spec"]["replicas"] = "one"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)


def test_kustomization_applies_every_manifest_but_the_example_secrets() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert kustomization["kind"] == "Kustomization"
    assert set(kustomization["resources"]) == {p.name for p in K8S.glob("*.yaml")} - NOT_APPLIED
    assert kustomization["images"][0]["name"] == containers()["ingest"]["image"]


def test_deployment_runs_ingest_and_the_compact_sidecar_from_one_configmap() -> None:
    spec = k8s("Deployment")["spec"]
    assert spec["replicas"] == 1 and spec["strategy"]["type"] == "Recreate"
    pod = spec["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert set(containers()) == {"ingest", "compact"}
    for command, container in containers().items():
        args = container["args"]
        assert args[0] == command and args[1] == "--config"
        mounts = [m for m in container["volumeMounts"] if volumes[m["name"]].get("configMap")]
        assert len(mounts) == 1 and mounts[0]["readOnly"] is True
        config_map = volumes[mounts[0]["name"]]["configMap"]["name"]
        key = Path(args[2]).relative_to(mounts[0]["mountPath"]).as_posix()
        assert key in k8s("ConfigMap", config_map)["data"]
        for kind in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(container["resources"][kind]), f"{command} {kind}"


def test_probes_and_ports_match_the_configured_http_ports(tmp_path: Path) -> None:
    config = configmap_config(tmp_path)
    for command, container in containers().items():
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert list(ports.values()) == [config.http.port_for(command)]
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            if probe in container:
                assert container[probe]["httpGet"]["port"] in ports
    service = k8s("Service", "floe-metrics")
    pod_labels = k8s("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    all_ports = {p["name"]: p["containerPort"] for c in containers().values() for p in c["ports"]}
    assert {p["targetPort"]: p["port"] for p in service["spec"]["ports"]} == all_ports


def test_service_monitor_scrapes_the_service_ports() -> None:
    monitor = k8s("ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    service = k8s("Service", "floe-metrics")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    service_ports = {p["name"] for p in service["spec"]["ports"]}
    endpoints = monitor["spec"]["endpoints"]
    assert {e["port"] for e in endpoints} == service_ports
    for endpoint in endpoints:
        assert set(endpoint) <= {"port", "path", "interval", "scrapeTimeout"}
        assert endpoint["path"] == "/metrics" and re.fullmatch(r"\d+s", endpoint["interval"])


def test_prometheus_rule_carries_the_alert_rules_of_alerts_yaml() -> None:
    rule = k8s("PrometheusRule")
    monitor = k8s("ServiceMonitor")
    assert rule["apiVersion"] == monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(rule) == {"apiVersion", "kind", "metadata", "spec"}
    # the ServiceMonitor's conventions: the same labels, and a namespace only where it has one
    assert set(rule["metadata"]) == set(monitor["metadata"])
    assert rule["metadata"]["labels"] == monitor["metadata"]["labels"]
    assert rule["metadata"].get("namespace") == monitor["metadata"].get("namespace")
    assert set(rule["spec"]) == {"groups"}
    alerts = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yaml").read_text())
    assert rule["spec"]["groups"] == alerts["groups"], "prometheusrule.yaml and alerts.yaml differ: change both"


def test_pod_runs_as_the_images_non_root_user() -> None:
    uid = int(re.search(r"useradd [^\n]*--uid (\d+)", (ROOT / "Dockerfile").read_text())[1])
    pod = k8s("Deployment")["spec"]["template"]["spec"]
    security = pod["securityContext"]
    assert security["runAsNonRoot"] is True and security["runAsUser"] == uid != 0
    assert pod["automountServiceAccountToken"] is False
    for container in containers().values():
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"]["drop"] == ["ALL"]
        if context.get("readOnlyRootFilesystem"):
            assert "/tmp" in {m["mountPath"] for m in container["volumeMounts"]}


def test_every_secret_reference_exists_in_the_example_secrets() -> None:
    secrets = {
        d["metadata"]["name"]: set(d["stringData"]) for name, d in k8s_documents() if name == "secrets.example.yaml"
    }
    pod = k8s("Deployment")["spec"]["template"]["spec"]
    references = [
        (e["valueFrom"]["secretKeyRef"]["name"], e["valueFrom"]["secretKeyRef"]["key"])
        for c in pod["containers"]
        for e in c.get("env", [])
        if "secretKeyRef" in e.get("valueFrom", {})
    ]
    references += [(v["secret"]["secretName"], None) for v in pod["volumes"] if "secret" in v]
    assert references
    for name, key in references:
        assert name in secrets, f"Secret {name} is not in secrets.example.yaml"
        assert key is None or key in secrets[name], f"Secret {name} has no key {key}"
    for container in pod["containers"]:
        assert all("value" not in e or not is_secretish(e["name"]) for e in container.get("env", []))


def is_secretish(name: str) -> bool:
    from runtime.logging import is_secret_key

    return is_secret_key(name)


def test_configmap_config_loads_and_its_files_come_from_mounted_secrets(tmp_path: Path) -> None:
    config = configmap_config(tmp_path)
    assert config.catalog.display_uri.startswith("postgresql://")
    assert config.catalog.password is not None  # from FLOE_CATALOG__PASSWORD (secretKeyRef)
    sasl, ssl = config.kafka.security.sasl, config.kafka.security.ssl
    assert sasl is not None and ssl is not None
    pod = k8s("Deployment")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    secrets = {d["metadata"]["name"]: d for n, d in k8s_documents() if n == "secrets.example.yaml"}
    for container in containers().values():
        for file in (sasl.password_file, ssl.ca_file):
            assert file is not None
            [mount] = [m for m in container["volumeMounts"] if file.parent == Path(m["mountPath"])]
            secret = volumes[mount["name"]]["secret"]["secretName"]
            assert file.name in secrets[secret]["stringData"]
    ingest_mounts = {m["mountPath"]: m for m in containers()["ingest"]["volumeMounts"]}
    checkpoint = ingest_mounts[config.checkpoint_location]
    assert not checkpoint.get("readOnly") and "persistentVolumeClaim" in volumes[checkpoint["name"]]
    claim = volumes[checkpoint["name"]]["persistentVolumeClaim"]["claimName"]
    assert k8s("PersistentVolumeClaim", claim)["spec"]["accessModes"] == ["ReadWriteOnce"]


def test_deployment_env_overrides_are_config_keys(tmp_path: Path) -> None:
    names = {e["name"] for c in containers().values() for e in c.get("env", [])}
    floe_vars = {n for n in names if n.startswith("FLOE_")}
    assert floe_vars and {o.variable for o in env_overrides(dict.fromkeys(names, "x"))} == floe_vars
    configmap_config(tmp_path)  # loads: each override names a real key


# ----------------------------------------------------------------------------- example config and compose


def test_example_config_loads_with_load_config() -> None:
    config = example_config()
    assert [t.identifier for t in config.tables] == ["shop.orders", "web.clicks"]
    assert {t.mode for t in config.tables} == {"append", "upsert"}


def floe_services() -> dict[str, dict[str, Any]]:
    return {
        name: s for name, s in compose()["services"].items() if s.get("command", [None])[0] in ("ingest", "compact")
    }


def test_compose_stack_has_every_service() -> None:
    services = compose()["services"]
    images = {name: s.get("image", "") for name, s in services.items()}
    assert images["kafka"].startswith("apache/kafka:")
    assert images["prometheus"].startswith("prom/prometheus:")
    assert images["grafana"].startswith("grafana/grafana:")
    assert sorted(s["command"][0] for s in floe_services().values()) == ["compact", "ingest"]
    for service in floe_services().values():
        assert service["build"]["dockerfile"] == "Dockerfile"
        assert (DEPLOY / service["build"]["context"] / "Dockerfile").is_file()


def test_compose_mounts_the_example_config_where_the_commands_read_it() -> None:
    config = example_config()
    for name, service in floe_services().items():
        command = service["command"]
        assert command[1] == "--config"
        mounts = dict(v.split(":")[:2] for v in service["volumes"])
        assert (DEPLOY / next(src for src, dst in mounts.items() if dst == command[2])).resolve() == (
            DEPLOY / "example-config.yaml"
        ).resolve()
        port = config.http.port_for(command[0])
        assert f"{port}:{port}" in service["ports"], name
        # every place the config stores state is on the shared named volume
        data = [dst for src, dst in mounts.items() if src in compose()["volumes"]]
        for location in (
            config.catalog.uri.removeprefix("sqlite:///"),
            config.catalog.warehouse,
            config.checkpoint_location,
        ):
            assert any(Path(location).is_relative_to(d) for d in data), f"{name}: {location} is not on a volume"


def test_compose_environment_overrides_are_config_keys() -> None:
    for name, service in floe_services().items():
        environment = {k: str(v) for k, v in service.get("environment", {}).items()}
        assert {o.variable for o in env_overrides(environment)} == {k for k in environment if k.startswith("FLOE_")}
        load_config(DEPLOY / "example-config.yaml", environment)


def test_compose_kafka_listens_where_the_config_points() -> None:
    environment = compose()["services"]["kafka"]["environment"]
    advertised = {listener.split("://")[1] for listener in environment["KAFKA_ADVERTISED_LISTENERS"].split(",")}
    assert set(example_config().kafka.bootstrap_servers) <= advertised
    for service in floe_services().values():
        if service["command"][0] == "ingest":
            assert service["depends_on"]["kafka"]["condition"] == "service_healthy"


def test_prometheus_scrapes_both_floe_containers_and_loads_the_alerts() -> None:
    prometheus = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    targets = {t for job in prometheus["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]}
    config = example_config()
    expected = {f"{name}:{config.http.port_for(s['command'][0])}" for name, s in floe_services().items()}
    assert expected <= targets
    # rule files are relative to the config file, in the repository and in the container alike
    rule_files = [(DEPLOY / "prometheus" / rule).resolve() for rule in prometheus["rule_files"]]
    assert rule_files == [(DEPLOY / "prometheus" / "alerts.yaml").resolve()]
    service = compose()["services"]["prometheus"]
    mounts = {dst: src for src, dst in (v.split(":")[:2] for v in service["volumes"])}

    def on_host(path: str) -> Path:
        """The repository file a container path is mounted from."""
        dst = max((d for d in mounts if Path(path).is_relative_to(d)), key=len)
        return (DEPLOY / mounts[dst] / Path(path).relative_to(dst)).resolve()

    [config_file] = [a.split("=", 1)[1] for a in service["command"] if a.startswith("--config.file=")]
    assert on_host(config_file) == (DEPLOY / "prometheus" / "prometheus.yml").resolve()
    assert [on_host(str(Path(config_file).parent / rule)) for rule in prometheus["rule_files"]] == rule_files


def test_grafana_provisions_the_dashboard_and_the_datasource() -> None:
    grafana = compose()["services"]["grafana"]
    mounts = dict(v.split(":")[:2] for v in grafana["volumes"])
    provider = yaml.safe_load((DEPLOY / "grafana" / "provisioning" / "dashboards" / "floe.yaml").read_text())
    assert Path(mounts["./grafana/floe-dashboard.json"]).parent == Path(provider["providers"][0]["options"]["path"])
    assert mounts["./grafana/provisioning"] == "/etc/grafana/provisioning"
    datasource = yaml.safe_load((DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yaml").read_text())
    assert datasource["datasources"][0]["type"] == "prometheus"
    assert datasource["datasources"][0]["url"].endswith(":9090")


# ----------------------------------------------------------------------------- Dockerfile vs README


def dockerfile_stages() -> list[list[tuple[str, str]]]:
    """Instructions per stage, continuation lines joined, comments dropped; a FROM names its base image as the
    global build arguments (ARG before the first FROM) default it."""
    text = re.sub(r"\\\n\s*", " ", (ROOT / "Dockerfile").read_text())
    defaults: dict[str, str] = {}
    stages: list[list[tuple[str, str]]] = []
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        keyword, _, rest = line.strip().partition(" ")
        if keyword.upper() == "ARG" and not stages:
            name, _, default = rest.strip().partition("=")
            defaults[name] = default
            continue
        if keyword.upper() == "FROM":
            stages.append([])
            rest = re.sub(r"\$\{(\w+)\}", lambda m: defaults[m[1]], rest)
        stages[-1].append((keyword.upper(), rest.strip()))
    return stages


def test_the_dockerfile_takes_its_base_images_as_build_arguments_defaulting_to_the_public_one() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert re.findall(r"^FROM (\S+)", text, re.M) == ["${BUILD_BASE}", "${RUNTIME_BASE}"]
    assert [stage[0][1].split()[0] for stage in dockerfile_stages()] == ["python:3.11-slim-bookworm"] * 2


def setup_step(command: str) -> str | None:
    """A set-up command reduced to what it does, whatever the paths: venv, pip-upgrade, install, jars."""
    words = shlex.split(command)
    program = Path(words[0]).name
    if program.startswith("python") and words[1:3] == ["-m", "venv"]:
        return "venv"
    if program == "pip" and "install" in words:
        if "--upgrade" in words and words[-1] == "pip":
            return "pip-upgrade"
        target = words[-1]
        if target == "." or target.startswith(".["):
            return "install-floe"
        return f"pip-install {target}"
    if program == "fetch-jars.sh":
        return "fetch-jars"
    if program.startswith("python") and words[1:3] == ["-m", "runtime.pyspark_bytecode"]:
        return "pyspark-bytecode"
    if program in ("touch", "apt-get", "rm"):
        return None
    return f"other: {command}"


def makefile_setup() -> list[str]:
    """The commands of the Makefile's set-up targets (venv, then jars), as the README's make runs them."""
    text = (ROOT / "Makefile").read_text()
    steps = []
    for target in (r"\$\(VENV\)/\.installed", r"\$\(VENV\)/\.pyspark-bytecode", r"jars"):
        recipe = re.search(rf"^{target}:[^\n]*\n((?:\t[^\n]*\n)+)", text, re.M)
        assert recipe, f"Makefile has no recipe for {target}"
        for line in recipe[1].splitlines():
            command = (
                line.strip()
                .replace("$(PYTHON)", "python")
                .replace("$(VENV)", ".venv")
                .replace("$(JARS)", ".cache/jars")
            )
            steps.append(command)
    return steps


def dockerfile_build_commands() -> list[str]:
    build = dockerfile_stages()[0]
    return [part.strip() for keyword, rest in build if keyword == "RUN" for part in rest.split("&&")]


def test_dockerfile_build_steps_match_the_readme_setup() -> None:
    docker = [s for s in map(setup_step, dockerfile_build_commands()) if s]
    make = [s for s in map(setup_step, makefile_setup()) if s]
    assert docker == make == ["venv", "pip-upgrade", "install-floe", "pyspark-bytecode", "fetch-jars"]
    readme = (ROOT / "README.md").read_text()
    table = readme.split("## What the set-up installs", 1)[1].split("\n## ", 1)[0]
    steps = ("install-floe", "pyspark-bytecode", "fetch-jars")
    how = [cell for cell in re.findall(r"`([^`]+)`", table) if setup_step(cell) in steps]
    assert {setup_step(c) for c in how} == set(steps), how


def test_dockerfile_fetches_only_runtime_jar_sets_into_floe_jars_dir() -> None:
    [fetch] = [c for c in dockerfile_build_commands() if setup_step(c) == "fetch-jars"]
    _, destination, *sets = shlex.split(fetch)
    readme = (ROOT / "README.md").read_text()
    documented = set(re.findall(r"`([a-z0-9-]+)` \(", readme.split("JVM jars", 1)[1].split("\n", 1)[0]))
    assert documented == {"spark-kafka", "kafka-broker", "iceberg-oracle", "s3proxy", "rest-catalog"}
    assert set(sets) <= documented - {"iceberg-oracle", "s3proxy", "rest-catalog"}  # the README: test-only
    runtime_env = " ".join(rest for keyword, rest in dockerfile_stages()[-1] if keyword == "ENV")
    assert f"FLOE_JARS_DIR={destination}" in runtime_env


def test_make_demo_fetches_only_the_jar_sets_floe_runs_with() -> None:
    makefile = (ROOT / "Makefile").read_text()
    prerequisites = re.search(r"^demo:([^\n]*)$", makefile, re.M)[1].split()
    assert "setup" not in prerequisites and "jars" not in prerequisites, prerequisites
    [target] = [p for p in prerequisites if p.endswith("jars")]
    recipe = re.search(rf"^{target}:[^\n]*\n\t([^\n]*)", makefile, re.M)[1]
    [docker_fetch] = [c for c in dockerfile_build_commands() if setup_step(c) == "fetch-jars"]
    assert shlex.split(recipe)[2:] == shlex.split(docker_fetch)[2:] == ["spark-kafka", "kafka-broker"]


def test_dockerfile_base_images_match_the_readme_prerequisites() -> None:
    readme = (ROOT / "README.md").read_text()
    python = re.search(r"Python (\d+\.\d+)", readme)[1]
    java = re.search(r"Java (\d+)", readme)[1]
    stages = dockerfile_stages()
    for stage in stages:
        assert stage[0][1].startswith(f"python:{python}-"), stage[0]
        packages = " ".join(rest for keyword, rest in stage if keyword == "RUN")
        assert f"openjdk-{java}-" in packages
    assert "maven" in " ".join(rest for keyword, rest in stages[0] if keyword == "RUN")
    assert "Maven" in readme


# ----------------------------------------------------------------------------- kubernetes: Spark on Kubernetes


SPARK_K8S = K8S_ROOT / "spark-on-kubernetes"
KUSTOMIZATIONS = [K8S_ROOT, K8S, SPARK_K8S]


def kustomize_command() -> list[str]:
    """The real Kustomize: kubectl's built-in one, else a standalone ``kustomize``; skips the test without either."""
    if shutil.which("kubectl"):
        return ["kubectl", "kustomize"]
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    pytest.skip("neither kubectl nor kustomize is on the PATH: the Kustomize builds are not checked")


@cache
def kustomize_build(folder: Path) -> tuple[dict[str, Any], ...]:
    """The documents ``kubectl apply -k folder`` would apply, rendered by the real tool."""
    built = subprocess.run([*kustomize_command(), str(folder)], capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, f"kustomize {folder.relative_to(ROOT)}: {built.stderr.strip()}"
    return tuple(d for d in yaml.safe_load_all(built.stdout) if d)


def spark_k8s_documents() -> list[dict[str, Any]]:
    """The variant as `kubectl apply -k` renders it: the base, its patches applied, plus its own resources."""
    return [copy.deepcopy(d) for d in kustomize_build(SPARK_K8S)]


@pytest.mark.parametrize("folder", KUSTOMIZATIONS, ids=lambda f: str(f.relative_to(ROOT)))
def test_each_kustomization_builds_with_the_real_tool_and_validates(folder: Path) -> None:
    docs = kustomize_build(folder)
    base = {(d["kind"], d["metadata"]["name"]) for name, d in k8s_documents() if name not in NOT_APPLIED}
    assert base <= {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert not [d for d in docs if d["kind"] == "Secret"], "the example Secrets must never be applied"
    for doc in docs:
        assert doc["metadata"]["labels"]["app.kubernetes.io/part-of"] == "floe", doc["metadata"]["name"]
        if doc["kind"] not in CUSTOM_RESOURCES:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_the_top_level_kustomization_is_the_base() -> None:
    assert kustomize_build(K8S_ROOT) == kustomize_build(K8S)


def spark_k8s(kind: str, name: str) -> dict[str, Any]:
    [doc] = [d for d in spark_k8s_documents() if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def test_the_spark_on_kubernetes_variant_lists_its_files_and_patches_only_base_resources() -> None:
    kustomization = yaml.safe_load((SPARK_K8S / "kustomization.yaml").read_text())
    listed = {r for r in kustomization["resources"] if r != "../base"} | {p["path"] for p in kustomization["patches"]}
    assert listed == {p.name for p in SPARK_K8S.glob("*.yaml")} - {"kustomization.yaml"}
    base = {(d["kind"], d["metadata"]["name"]) for _, d in k8s_documents() if d["kind"] != "Kustomization"}
    for patch in kustomization["patches"]:
        doc = yaml.safe_load((SPARK_K8S / patch["path"]).read_text())
        assert (doc["kind"], doc["metadata"]["name"]) in base, patch["path"]


@pytest.mark.parametrize("kind", ["Deployment", "ConfigMap", "ServiceAccount", "Role", "RoleBinding", "Service"])
def test_the_spark_on_kubernetes_variant_validates_against_the_kubernetes_schema(kind: str) -> None:
    docs = [d for d in spark_k8s_documents() if d["kind"] == kind]
    assert docs
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_the_spark_on_kubernetes_driver_is_reachable_and_allowed_to_run_executors(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(spark_k8s("ConfigMap", "floe-config")["data"]["config.yaml"])
    deployment = spark_k8s("Deployment", "floe")
    pod = deployment["spec"]["template"]["spec"]
    env = {e["name"]: "dummy" for c in pod["containers"] for e in c.get("env", [])}
    config = load_config(path, env, check_files=False)
    conf = config.spark.conf
    assert config.spark.master.startswith("k8s://https://") and config.checkpoint_location.startswith("s3a://")
    # executors dial the driver through the headless service, on the ports the driver container opens
    service = spark_k8s("Service", "floe-driver")
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert config.spark.driver_host == f"floe-driver.{conf['spark.kubernetes.namespace']}.svc"
    assert config.spark.bind_address == "0.0.0.0"
    ports = {p["port"] for p in service["spec"]["ports"]}
    assert ports == {int(conf["spark.driver.port"]), int(conf["spark.blockManager.port"])}
    ingest_ports = {p["containerPort"] for p in next(c for c in pod["containers"] if c["name"] == "ingest")["ports"]}
    assert ports <= ingest_ports
    # the pod's own service account may create, watch and delete pods, and has its token
    account = conf["spark.kubernetes.authenticate.driver.serviceAccountName"]
    assert pod["serviceAccountName"] == account and pod["automountServiceAccountToken"] is True
    binding = spark_k8s("RoleBinding", account)
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account}]
    pods_rule = next(r for r in spark_k8s("Role", binding["roleRef"]["name"])["rules"] if "pods" in r["resources"])
    assert {"create", "watch", "delete", "list"} <= set(pods_rule["verbs"])
    # executors are the Floe image, with the pod's S3 credentials from the same Secret
    images = yaml.safe_load((K8S / "kustomization.yaml").read_text())["images"][0]
    assert conf["spark.kubernetes.container.image"] == f"{images['name']}:{images['newTag']}"
    refs = {k.rsplit(".", 1)[1]: v for k, v in conf.items() if k.startswith("spark.kubernetes.executor.secretKeyRef.")}
    from_secret = {e["name"]: f"{e['valueFrom']['secretKeyRef']['name']}:{e['valueFrom']['secretKeyRef']['key']}"
                   for c in pod["containers"] if c["name"] == "ingest" for e in c["env"] if e["name"].startswith("AWS_")}
    assert refs == from_secret


def test_the_image_entrypoint_runs_floe_and_starts_a_kubernetes_executor(tmp_path: Path) -> None:
    import sys

    entrypoint = DEPLOY / "entrypoint.sh"
    path = f"{Path(sys.executable).parent}:/usr/bin:/bin"
    version = subprocess.run([str(entrypoint), "--version"], capture_output=True, text=True, env={"PATH": path})
    assert version.returncode == 0 and version.stdout.startswith("floe "), version.stdout + version.stderr
    spark_env = {"SPARK_EXECUTOR_MEMORY": "3g", "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@d:7078",
                 "SPARK_EXECUTOR_ID": "7", "SPARK_EXECUTOR_CORES": "2", "SPARK_APPLICATION_ID": "spark-1",
                 "SPARK_EXECUTOR_POD_IP": "10.1.2.3", "SPARK_EXECUTOR_POD_NAME": "floe-exec-7",
                 "SPARK_JAVA_OPT_10": "-Dlast", "SPARK_JAVA_OPT_2": "-Dfirst", "FLOE_JARS_DIR": "/opt/floe/jars"}
    dry = subprocess.run([str(entrypoint), "executor"], capture_output=True, text=True, check=True,
                         env={"PATH": path, "FLOE_ENTRYPOINT_DRY_RUN": "1", **spark_env}).stdout.splitlines()
    assert dry[:5] == ["java", "-Dfirst", "-Dlast", "-Xms3g", "-Xmx3g"]
    classpath = dry[dry.index("-cp") + 1].split(":")
    assert classpath[0].endswith("pyspark/jars/*") and classpath[1] == "/opt/floe/jars/spark-kafka/*"
    assert "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend" in dry
    assert dry[dry.index("--podName") + 1] == "floe-exec-7" and dry[dry.index("--cores") + 1] == "2"
    stages = dockerfile_stages()
    assert ("ENTRYPOINT", '["/opt/floe/bin/entrypoint"]') in stages[-1]
    assert any(k == "COPY" and "deploy/entrypoint.sh /opt/floe/bin/entrypoint" in rest for k, rest in stages[-1])
