"""The deployment files (no Docker engine here): they parse, and what they run and
probe exists — console scripts, CLI commands, ports, metrics."""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

from middleware.cli import COMMAND_MODULES, build_parser
from middleware.server.metrics import Metrics

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
IMAGE = "agency-middleware"

#: Built on other branches of issue 9; the lead empties these when merging them.
PENDING_COMMANDS: set[str] = set()  # `agency` commands that land with other branches
PENDING_PATHS: set[str] = set()  # paths COPY needs that land with other branches
PENDING_ENV: set[str] = set()  # variables config.py reads once other branches land


# ------------------------------------------------------------------ helpers
def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = (DEPLOY / "Dockerfile").read_text()
    text = re.sub(r"\\\n", " ", text)
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), args
    return value


def cli(argv: list[str]):
    """Parse ``agency ARGV`` with the real parser (SystemExit = not a valid command)."""
    rest = argv[2:] if argv[:1] == ["--log-format"] else argv
    sub = rest[0] if rest else ""
    if sub in PENDING_COMMANDS and sub not in {m.rsplit(".", 1)[1] for m in COMMAND_MODULES}:
        pytest.skip(f"'agency {sub}' is built on another branch")
    return build_parser().parse_args(argv)


def port_of(address: str) -> int:
    return int(address.rpartition(":")[2])


def yaml_docs(path: Path) -> list[dict]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    assert docs, f"{path} is empty"
    return docs


def config_env_names() -> set[str]:
    settings = ROOT / "middleware" / "server" / "settings.py"
    return set(re.findall(r'"(AGENCY_[A-Z_]+)"', settings.read_text()))


SERVE = cli(exec_form(dict(dockerfile())["CMD"]))


# ------------------------------------------------------------------ parsing
@pytest.mark.parametrize(
    "path", sorted(p.relative_to(ROOT).as_posix() for p in DEPLOY.rglob("*") if p.suffix in {".yaml", ".yml"})
)
def test_every_yaml_file_parses(path):
    for doc in yaml_docs(ROOT / path):
        assert isinstance(doc, dict)


def test_dashboard_json_parses_and_has_panels():
    dash = json.loads((DEPLOY / "grafana" / "dashboard.json").read_text())
    assert dash["uid"] and dash["panels"]
    assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"])


# ------------------------------------------------------------------ Dockerfile
def test_dockerfile_is_multi_stage_slim_and_runs_as_non_root():
    steps = dockerfile()
    froms = [args for word, args in steps if word == "FROM"]
    assert len(froms) >= 2 and all(f.startswith("python:3.11-slim") for f in froms)
    final = steps[max(i for i, (w, _) in enumerate(steps) if w == "FROM") :]
    users = [args for word, args in final if word == "USER"]
    assert users, "the runtime stage must switch to a non-root USER"
    user = users[-1].split(":")[0]
    assert user.isdigit() and user != "0", "USER must be a numeric non-root uid (hadolint DL3066)"
    created = " ".join(args for word, args in final if word == "RUN")
    assert re.search(rf"useradd\b[^&]*--uid {user}\b", created), f"no user is created with uid {user}"


def test_dockerfile_entrypoint_is_the_console_script_and_cmd_serves():
    steps = dict(dockerfile())
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    entry = exec_form(steps["ENTRYPOINT"])
    assert entry == ["agency"] and entry[0] in scripts
    module, func = scripts["agency"].split(":")
    assert callable(getattr(__import__(module, fromlist=[func]), func))
    assert SERVE.command == "serve"
    assert port_of(SERVE.address) == 50051 and SERVE.address.startswith("0.0.0.0:")
    assert port_of(SERVE.metrics_address) == 9464
    exposed = {int(p) for p in steps["EXPOSE"].split()}
    assert exposed == {port_of(SERVE.address), port_of(SERVE.metrics_address)}


def test_dockerfile_healthcheck_uses_grpc_health_on_the_serving_port():
    args = dict(dockerfile())["HEALTHCHECK"]
    command = exec_form(args.split(" CMD ", 1)[1])
    assert command[0] == "agency"
    health = cli(command[1:])
    assert health.command == "health"
    assert port_of(health.address) == port_of(SERVE.address)


def test_dockerfile_copies_files_that_exist():
    for word, args in dockerfile():
        if word == "COPY" and not args.startswith("--from"):
            for source in args.split()[:-1]:
                if source in PENDING_PATHS and not (ROOT / source).exists():
                    continue
                assert (ROOT / source).exists(), f"COPY {source}: not in the repository"


# ------------------------------------------------------------------ compose
def compose() -> dict:
    return yaml_docs(DEPLOY / "compose.yaml")[0]


def test_compose_has_two_gateways_redis_prometheus_grafana_and_a_worker():
    services = compose()["services"]
    assert {"gateway-1", "gateway-2", "redis", "prometheus", "grafana", "worker"} <= set(services)
    for name, svc in services.items():
        image = svc.get("image", "")
        assert ":" in image and not image.endswith(":latest"), f"{name}: pin the image tag"
        if "build" in svc:
            assert (DEPLOY / svc["build"]["context"] / svc["build"]["dockerfile"]).is_file()
        for volume in svc.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (DEPLOY / source).exists(), f"{name}: {source} does not exist"


@pytest.mark.parametrize("service", ["gateway-1", "gateway-2", "worker"])
def test_compose_commands_are_real_agency_commands(service):
    svc = compose()["services"][service]
    assert svc["image"].split(":")[0] == IMAGE
    args = cli(svc["command"])
    if args.command == "serve":
        published = {int(p.split(":")[1]) for p in svc["ports"]}
        assert published == {port_of(args.address), port_of(args.metrics_address)}
    node = svc.get("environment", {}).get("AGENCY_NODE_ID")
    if service.startswith("gateway"):
        assert node == service  # each replica writes its own audit log under its node id
    if service == "worker":
        module = args.agent.split(":")[0]
        assert (ROOT / (module.replace(".", "/") + ".py")).is_file(), f"{module} is not in the image"
        gateways = [g for given in args.gateway for g in given.split(",")]
        assert len(gateways) == 2  # every gateway: the worker stays registered through either
        for gateway in (g.rpartition(":") for g in gateways):
            assert gateway[0] in compose()["services"]
            assert int(gateway[2]) == port_of(cli(compose()["services"][gateway[0]]["command"]).address)


@pytest.mark.parametrize("service", ["gateway-1", "gateway-2"])
def test_compose_gateways_keep_their_node_id_and_their_key_off_the_audit_volume(service):
    from middleware.audit.checkpoint import default_key_path
    from middleware.server.definition import definition_from

    svc = compose()["services"][service]
    env = {k: str(v) for k, v in svc["environment"].items()}
    data_dir = {word: args for word, args in dockerfile()}["ENV"]
    env.setdefault("AGENCY_DATA_DIR", re.search(r"AGENCY_DATA_DIR=(\S+)", data_dir).group(1))
    definition = definition_from({}, env=env)
    assert definition.agency.node_id == service  # stable across restarts: its own log again
    mounts = {Path(v.split(":")[1]): v.split(":")[0] for v in svc["volumes"]}
    for source in mounts.values():
        assert source in compose()["volumes"], f"{service}: {source} is not a named volume"

    def volume_of(path: Path) -> str:
        holding = [m for m in mounts if path.is_relative_to(m)]
        assert holding, f"{service}: {path} is on no volume (lost with the container)"
        return mounts[max(holding, key=lambda m: len(m.parts))]

    audit = definition.audit_directory
    key = definition.audit.checkpoint_key or default_key_path(audit, service)
    assert volume_of(key) != volume_of(audit), "the key on the audit log's volume"
    assert sum(mounts[m] == volume_of(audit) for m in mounts) == 1
    # the drain covers the longest contract SLO; compose waits for drain + exit before SIGKILL
    grace = definition.server.grace_seconds
    assert grace >= max(LONGEST_SLO_SECONDS, max(declared_slos_ms()) / 1000)
    stop = compose()["services"][service]["stop_grace_period"]
    assert stop.endswith("s") and float(stop[:-1]) >= grace + 10


def test_prometheus_scrapes_the_gateways_metrics_port():
    config = yaml_docs(DEPLOY / "prometheus.yml")[0]
    services = compose()["services"]
    targets = [t for job in config["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]]
    assert sorted(t.split(":")[0] for t in targets) == ["gateway-1", "gateway-2"]
    for target in targets:
        host, port = target.split(":")
        assert int(port) == port_of(cli(services[host]["command"]).metrics_address)
    datasource = yaml_docs(DEPLOY / "grafana/provisioning/datasources/prometheus.yaml")[0]
    url = urlparse(datasource["datasources"][0]["url"])
    assert url.hostname == "prometheus" and f"{url.port}:{url.port}" in services["prometheus"]["ports"]


# ------------------------------------------------------------------ Grafana
def registered_metric_names() -> set[str]:
    names = set()
    for family in Metrics().registry.collect():
        if family.type == "counter":
            names.add(family.name + "_total")
        elif family.type == "histogram":
            names |= {family.name + s for s in ("_bucket", "_sum", "_count")}
        else:
            names.add(family.name)
    return names


def test_every_dashboard_expression_uses_registered_metrics_and_every_metric_has_a_panel():
    registered = registered_metric_names()
    families = {re.sub(r"_(bucket|sum|count)$", "", n) for n in registered}
    dash = json.loads((DEPLOY / "grafana" / "dashboard.json").read_text())
    used = set()
    for panel in dash["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            names = set(re.findall(r"\b((?:agency|smf)_[a-z_]+)\b", target["expr"]))
            assert names, f"{panel['title']}: no agency metric in {target['expr']!r}"
            unknown = names - registered
            assert not unknown, f"{panel['title']}: {sorted(unknown)} are not registered by Metrics()"
            used |= {re.sub(r"_(bucket|sum|count)$", "", n) for n in names}
    assert not families - used, f"metrics without a panel: {sorted(families - used)}"


# ------------------------------------------------------------------ Kubernetes
def k8s_objects() -> list[dict]:
    """Every object the manifests apply (not the kustomization that lists them)."""
    paths = sorted(p for p in (DEPLOY / "k8s").glob("*.yaml") if p.name != "kustomization.yaml")
    return [doc for path in paths for doc in yaml_docs(path)]


def k8s_named(kind: str, name: str) -> dict:
    (obj,) = [o for o in k8s_objects() if o["kind"] == kind and o["metadata"]["name"] == name]
    return obj


def gateways() -> dict:
    """The gateways' StatefulSet."""
    return k8s_named("StatefulSet", "agency-gateway")


def gateway_container() -> dict:
    (container,) = gateways()["spec"]["template"]["spec"]["containers"]
    return container


def gateway_env() -> dict[str, str]:
    """The gateway's environment as the pod sees it: the ConfigMap, then the container's env."""
    env = dict(k8s_named("ConfigMap", "agency-gateway")["data"])
    env |= {e["name"]: e.get("value", "") for e in gateway_container()["env"]}
    return env


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return selector.items() <= labels.items()


#: The longest latency SLO a contract of this product's examples and deployments declares, and
#: the one the issue names (20 s): a drain shorter than it cuts tasks short on every rollout.
LONGEST_SLO_SECONDS = 20.0


def declared_slos_ms() -> list[int]:
    """Every ``slo_latency_ms`` in the examples and the deploy files."""
    found = []
    for path in [*(ROOT / "examples").rglob("*"), *DEPLOY.rglob("*")]:
        if path.suffix in {".yaml", ".yml", ".py", ".json"}:
            found += [
                int(v.replace("_", ""))
                for v in re.findall(r"slo_latency_ms\W{1,4}([\d_]+)", path.read_text())
            ]
    return found


def test_kubernetes_has_every_object_and_kustomization_lists_the_files():
    kinds = {(o["kind"], o["metadata"]["name"]) for o in k8s_objects()}
    assert {
        ("StatefulSet", "agency-gateway"),
        ("Service", "agency-gateway"),
        ("Service", "agency-gateway-pods"),
        ("ConfigMap", "agency-gateway"),
        ("PodDisruptionBudget", "agency-gateway"),
        ("ServiceMonitor", "agency-gateway"),
        ("StatefulSet", "redis"),
        ("Service", "redis"),
    } <= kinds
    assert "Deployment" not in {kind for kind, _ in kinds}  # node ids change on every restart
    listed = set(yaml_docs(DEPLOY / "k8s" / "kustomization.yaml")[0]["resources"])
    assert listed == {p.name for p in (DEPLOY / "k8s").glob("*.yaml")} - {"kustomization.yaml"}


def test_kubernetes_probes_and_ports_point_at_the_served_ports():
    container = gateway_container()
    args = cli(container["args"])
    assert args.command == "serve"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"grpc": port_of(args.address), "metrics": port_of(args.metrics_address)}
    labels = gateways()["spec"]["template"]["metadata"]["labels"]
    for name in ("agency-gateway", "agency-gateway-pods"):
        service = k8s_named("Service", name)
        assert selects(service["spec"]["selector"], labels), name
        for port in service["spec"]["ports"]:
            target = port["targetPort"]
            assert (target in ports) if isinstance(target, str) else (target in ports.values())
    assert selects(gateways()["spec"]["selector"]["matchLabels"], labels)
    service = k8s_named("Service", "agency-gateway")
    monitor = k8s_named("ServiceMonitor", "agency-gateway")["spec"]
    assert selects(monitor["selector"]["matchLabels"], service["metadata"]["labels"])
    # the ServiceMonitor must not also pick up the headless Service (every target scraped twice)
    assert not selects(
        monitor["selector"]["matchLabels"], k8s_named("Service", "agency-gateway-pods")["metadata"]["labels"]
    )
    service_ports = {p["name"]: p for p in service["spec"]["ports"]}
    for endpoint in monitor["endpoints"]:
        assert service_ports[endpoint["port"]]["targetPort"] == "metrics"
        assert endpoint["path"] == "/metrics"


def test_kubernetes_probes_use_grpc_health_readiness_the_whole_verdict_liveness_the_process():
    from middleware.server.grpc_api.server import LIVENESS_SERVICE

    container = gateway_container()
    grpc_port = {p["name"]: p["containerPort"] for p in container["ports"]}["grpc"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert set(container[probe]) & {"grpc", "exec", "tcpSocket", "httpGet"} == {"grpc"}, probe
        assert container[probe]["grpc"]["port"] == grpc_port, probe  # native gRPC health probe
    # readiness: service "" (omitted), which is NOT_SERVING while Redis cannot take writes or
    # while draining; liveness and startup: only that the process answers
    assert container["readinessProbe"]["grpc"].get("service", "") == ""
    assert container["livenessProbe"]["grpc"]["service"] == LIVENESS_SERVICE
    assert container["startupProbe"]["grpc"]["service"] == LIVENESS_SERVICE


def test_kubernetes_gateways_are_a_stateful_set_with_a_headless_service_and_a_volume_per_pod():
    spec = gateways()["spec"]
    headless = k8s_named("Service", spec["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"].get("publishNotReadyAddresses", False) is False  # only SERVING gateways
    assert k8s_named("Service", "agency-gateway")["spec"].get("clusterIP") != "None"  # the clients' one
    (claim,) = spec["volumeClaimTemplates"]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]  # one volume per pod, not shared
    mounts = {m["name"]: m for m in gateway_container()["volumeMounts"]}
    assert mounts[claim["metadata"]["name"]]["mountPath"] == "/var/lib/agency"
    pod_volumes = {v["name"] for v in spec["template"]["spec"].get("volumes", [])}
    assert claim["metadata"]["name"] not in pod_volumes  # from the template, not a shared claim
    assert "PersistentVolumeClaim" not in {o["kind"] for o in k8s_objects()}
    retention = spec["persistentVolumeClaimRetentionPolicy"]
    assert retention == {"whenDeleted": "Retain", "whenScaled": "Retain"}  # audit logs outlive pods
    assert spec["replicas"] >= 2
    budget = k8s_named("PodDisruptionBudget", "agency-gateway")["spec"]
    assert selects(budget["selector"]["matchLabels"], spec["template"]["metadata"]["labels"])
    # one pod at a time, whatever the replica count (minAvailable would block a scaled-down set)
    assert budget["maxUnavailable"] == 1 < spec["replicas"] and "minAvailable" not in budget


def test_kubernetes_runs_as_non_root_and_each_replica_has_its_own_stable_node_id():
    pod = gateways()["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    env = {e["name"]: e for e in gateway_container()["env"]}
    # a StatefulSet pod's name is stable (agency-gateway-0 ...): the node id survives restarts
    assert env["AGENCY_NODE_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert "$(AGENCY_NODE_ID)" in env["AGENCY_DATA_DIR"]["value"]
    for name, obj in [("gateway", gateways()), ("redis", k8s_named("StatefulSet", "redis"))]:
        for container in obj["spec"]["template"]["spec"]["containers"]:
            assert container["securityContext"]["readOnlyRootFilesystem"] is True, name
            assert container["securityContext"]["allowPrivilegeEscalation"] is False, name
        assert obj["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True, name


def test_kubernetes_checkpoint_key_comes_from_a_read_only_secret_outside_the_data_volume():
    pod = gateways()["spec"]["template"]["spec"]
    env = gateway_env()
    key = Path(env["AGENCY_CHECKPOINT_KEY"])
    mounts = gateway_container()["volumeMounts"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    holding = [m for m in mounts if key.is_relative_to(m["mountPath"])]
    (mount,) = holding  # exactly one mount holds the key: not the data volume as well
    assert "secret" in volumes[mount["name"]], "the key must come from a Secret"
    assert mount["readOnly"] is True
    mode = volumes[mount["name"]]["secret"]["defaultMode"]
    assert mode & 0o022 == 0, f"mode {mode:o}: the gateway refuses a group- or world-writable key"
    # the data volume (the audit log, and the default key place <data_dir>/keys) does not hold it
    claims = {c["metadata"]["name"] for c in gateways()["spec"]["volumeClaimTemplates"]}
    data = [Path(m["mountPath"]) for m in mounts if m["name"] in claims]
    assert data and not any(key.is_relative_to(d) or d.is_relative_to(mount["mountPath"]) for d in data)
    data_dir = Path(env["AGENCY_DATA_DIR"].replace("$(AGENCY_NODE_ID)", "agency-gateway-0"))
    assert not key.is_relative_to(data_dir)
    # what the gateway itself checks: a checkpoint key under the audit directory stops it
    from middleware.server.definition import definition_from

    definition = definition_from({}, env={"AGENCY_DATA_DIR": str(data_dir)})  # (the key file is not here)
    assert not key.is_relative_to(definition.audit_directory)


def test_kubernetes_drain_covers_the_longest_contract_slo():
    slos = declared_slos_ms()
    assert slos, "no contract SLO found in examples/ or deploy/"
    longest = max(LONGEST_SLO_SECONDS, max(slos) / 1000)
    from middleware.server.definition import definition_from

    env = {k: v for k, v in gateway_env().items() if k != "AGENCY_CHECKPOINT_KEY"}  # (not on this host)
    grace = definition_from({}, env=env).server.grace_seconds
    assert grace >= longest, f"drain {grace:g} s < the longest contract SLO {longest:g} s"
    termination = gateways()["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    # the exit is bounded to 10 s after the drain (docs/operations.md, "Scaling out")
    assert termination >= grace + 10, f"Kubernetes kills at {termination} s, before drain + exit"


def test_kubernetes_redis_url_names_a_redis_service_of_the_manifests():
    url = urlparse(gateway_env()["AGENCY_REDIS_URL"])
    assert url.scheme == "redis"
    service = k8s_named("Service", url.hostname)
    port = {p["port"]: p for p in service["spec"]["ports"]}[url.port or 6379]
    (redis,) = [
        o
        for o in k8s_objects()
        if o["kind"] == "StatefulSet"
        and selects(service["spec"]["selector"], o["spec"]["template"]["metadata"]["labels"])
    ]
    (container,) = redis["spec"]["template"]["spec"]["containers"]
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    target = port["targetPort"]
    assert (named.get(target) if isinstance(target, str) else target) == 6379
    assert container["image"].split(":")[0] == "redis" and not container["image"].endswith(":latest")
    assert "--appendonly" in container["args"]  # a restarted Redis keeps the fleet's state
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    (claim,) = redis["spec"]["volumeClaimTemplates"]
    assert container["args"][container["args"].index("--dir") + 1] == mounts[claim["metadata"]["name"]]


def test_environment_variables_in_deploy_files_are_ones_the_config_reads():
    known = config_env_names() | PENDING_ENV
    used = set(gateway_env())
    for svc in compose()["services"].values():
        used |= {k for k in svc.get("environment", {}) if k.startswith("AGENCY_")}
    unknown = {v for v in used if v.startswith("AGENCY_")} - known
    assert not unknown, f"not read by middleware/server/settings.py: {sorted(unknown)}"


def test_serve_command_in_every_file_is_the_same():
    dock = exec_form(dict(dockerfile())["CMD"])
    services = compose()["services"]
    assert services["gateway-1"]["command"] == dock == services["gateway-2"]["command"]
    assert gateway_container()["args"] == dock
    assert shlex.join(dock)  # printable
