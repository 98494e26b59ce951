"""The deploy files pass the linters of their ecosystems: hadolint (Dockerfile), the Kubernetes
OpenAPI schemas (kubernetes-validate), the Compose Specification schema (check-jsonschema) and
promtool (the Prometheus configuration).

hadolint, kubernetes-validate and check-jsonschema come from PyPI (the dev extra); promtool from
the Debian package ``prometheus`` (``apt-get install prometheus``): its test is skipped, saying
so, where that is not installed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
BIN = Path(sys.executable).parent

#: Kinds defined by tools or operators, not by Kubernetes: no schema in kubernetes-validate.
NOT_KUBERNETES = {"Kustomization", "ServiceMonitor"}


def _tool(name: str) -> str:
    found = BIN / name
    if found.exists():
        return str(found)
    path = shutil.which(name)
    assert path, f"{name} is a dev dependency: pip install -e '.[dev]'"
    return path


def test_the_dockerfile_passes_hadolint() -> None:
    proc = subprocess.run(
        [_tool("hadolint"), "--no-color", str(DEPLOY / "Dockerfile")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0 and not proc.stdout.strip(), proc.stdout + proc.stderr


def test_hadolint_would_catch_a_named_user(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text((DEPLOY / "Dockerfile").read_text().replace("USER 10001:10001", "USER agency"))
    proc = subprocess.run(
        [_tool("hadolint"), "--no-color", str(bad)], capture_output=True, text=True, timeout=60
    )
    assert "DL3066" in proc.stdout


def test_every_kubernetes_object_is_valid_against_its_schema() -> None:
    import kubernetes_validate

    checked = 0
    for path in sorted((DEPLOY / "k8s").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") in NOT_KUBERNETES:
                continue
            kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)
            checked += 1
    assert checked >= 5


def test_the_kubernetes_check_can_fail() -> None:
    import kubernetes_validate

    doc = next(yaml.safe_load_all((DEPLOY / "k8s" / "service.yaml").read_text()))
    doc["spec"]["ports"][0]["port"] = "not a port"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)


def test_the_compose_file_is_valid_compose_v2() -> None:
    """Compose v2 (the Compose Specification, ``docker compose``); v1 is end-of-life and refuses
    the top-level ``name:`` this file uses, as its header says."""
    compose = DEPLOY / "compose.yaml"
    proc = subprocess.run(
        [_tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec", str(compose)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    header = compose.read_text().split("\n\n", 1)[0]
    assert "Compose v2" in header and "version" not in yaml.safe_load(compose.read_text())


@pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="promtool is not installed (Debian: apt-get install prometheus); the Prometheus config is "
    "checked by the YAML tests only",
)
def test_the_prometheus_config_passes_promtool() -> None:
    proc = subprocess.run(
        ["promtool", "check", "config", "--syntax-only", str(DEPLOY / "prometheus.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
