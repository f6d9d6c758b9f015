"""The manifests in deploy/kubernetes say what the code does: the Deployment runs `lowcostgpu
serve` with options that exist (an unknown one would crash-loop the pod at start), and every
manifest is valid against Kubernetes' strict schemas."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from typer.main import get_command

from lowcostgpu.cli.main import app

DEPLOY = Path(__file__).parent.parent / "deploy" / "kubernetes"


def documents(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def serve_options() -> set[str]:
    serve = get_command(app).commands["serve"]  # type: ignore[attr-defined]
    return {opt for param in serve.params for opt in param.opts}


def test_the_deployment_runs_serve_with_options_that_exist() -> None:
    (deployment,) = [d for d in documents("deployment.yaml") if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["lowcostgpu", "serve"]
    flags = {arg.split("=", 1)[0] for arg in container["args"]}
    assert "--in-cluster" in flags
    unknown = flags - serve_options()
    assert not unknown, f"deployment.yaml passes options serve does not have: {unknown}"


OBJECTS = sorted(p.name for p in DEPLOY.glob("*.yaml") if p.name != "kustomization.yaml")


@pytest.mark.parametrize("name", OBJECTS)
def test_every_manifest_is_valid_kubernetes(name: str) -> None:
    for document in documents(name):
        kubernetes_validate.validate(document, "1.25", strict=True)
