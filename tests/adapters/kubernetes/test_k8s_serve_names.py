"""The operator's own names (`--kube-label-prefix`, `--kube-preemptible-taint`) are what the API
shows on a cluster's nodes, and what the Nodes carry: a customer copies the API's labels and
taint into a nodeSelector and a toleration, and they must match."""

from __future__ import annotations

from pathlib import Path

import httpx
from apiserver import ApiServer, free_port, register_host

from lowcostgpu.adapters.kubernetes import Kube
from lowcostgpu.api.server import start
from lowcostgpu.bootstrap.serve import ServeOptions
from waiting import wait_until

ADMIN_KEY = "lcg_admin_k8s-names-0123456789abcdef"


def test_the_api_shows_the_operators_labels_and_taint_as_the_nodes_carry_them(
    k8s: ApiServer, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    hosts = [f"gpu-{namespace}-{n}" for n in (1, 2)]
    for host in hosts:
        register_host(kube.core, host)
    entries = "".join(
        f'  [[region.hosts]]\n  name = "{h}"\n  gpu_type = "a100-sxm4"\n  gpus = 8\n' for h in hosts
    )
    (tmp_path / "fleet.toml").write_text(f'[[region]]\nname = "eu-west"\n{entries}')
    options = ServeOptions(
        tmp_path / "data", fleet=tmp_path / "fleet.toml", port=free_port(), admin_key=ADMIN_KEY,
        runtime="kubernetes", kubeconfig=k8s.kubeconfig, namespace=namespace,
        kube_label_prefix="together.ai",
        kube_preemptible_taint="together.ai/compute-class=preemptible:NoSchedule",
    )  # fmt: skip
    running = start(options)
    try:
        admin = {"authorization": f"Bearer {ADMIN_KEY}"}
        with httpx.Client(base_url=running.url, timeout=30) as http:
            account = http.post("/v1/accounts", json={"name": "names"}, headers=admin).json()
            http.post(f"/v1/accounts/{account['id']}/topup", json={"amount": "10"}, headers=admin)
            user = {"authorization": f"Bearer {account['api_key']}"}
            body = {"gpu": "a100-sxm4", "gpus_per_node": 8, "desired_preemptible_gpus": 8}
            cluster = http.post("/v1/clusters", json=body, headers=user).json()

            def placed() -> dict[str, dict[str, object]] | None:
                found = http.get(f"/v1/clusters/{cluster['id']}", headers=user).json()
                nodes = {n["compute_class"]: n for n in found["nodes"] if n["host_id"]}
                return nodes if len(nodes) == 2 else None

            nodes = wait_until(placed, what="both nodes placed")
        preemptible = nodes["preemptible"]
        assert preemptible["labels"] == {
            "together.ai/cluster": cluster["id"],
            "together.ai/compute-class": "preemptible",
        }
        assert preemptible["taints"] == [
            {"key": "together.ai/compute-class", "value": "preemptible", "effect": "NoSchedule"}
        ]

        def carried() -> bool:  # the Node has every label and taint the API shows
            node = kube.core.read_node(str(preemptible["host_id"]))
            labels = node.metadata.labels or {}
            taints = [
                {"key": t.key, "value": t.value, "effect": t.effect} for t in node.spec.taints or []
            ]
            return preemptible["labels"].items() <= labels.items() and all(  # type: ignore[union-attr]
                t in taints
                for t in preemptible["taints"]  # type: ignore[union-attr]
            )

        wait_until(carried, what="the Node carrying the API's labels and taint")
    finally:
        running.stop()
