"""`ClusterApi`: the cluster endpoints, a sub-client on a `Client`'s connection.

Its own module because clusters are their own resource with their own calls (create, target,
convert a node), used only by the CLI's cluster commands.
"""

from __future__ import annotations

from typing import Any, cast

from lowcostgpu.client.api import Client
from lowcostgpu.client.records import Json


class ClusterApi:
    """The cluster endpoints, on the same connection and error translation as `Client`."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def create(self, **body: Any) -> Json:
        return cast(Json, self._client._call("POST", "/v1/clusters", json=body))

    def list(self, id_prefix: str | None = None) -> list[Json]:
        params = {} if id_prefix is None else {"id_prefix": id_prefix}
        return cast(list[Json], self._client._call("GET", "/v1/clusters", params=params))

    def get(self, cluster_id: str) -> Json:
        return cast(Json, self._client._call("GET", f"/v1/clusters/{cluster_id}"))

    def update_target(self, cluster_id: str, desired_preemptible_gpus: int) -> Json:
        body = {"desired_preemptible_gpus": desired_preemptible_gpus}
        return cast(Json, self._client._call("PATCH", f"/v1/clusters/{cluster_id}", json=body))

    def delete(self, cluster_id: str) -> Json:
        return cast(Json, self._client._call("DELETE", f"/v1/clusters/{cluster_id}"))

    def convert_node(self, cluster_id: str, node_id: str, compute_class: str) -> Json:
        path = f"/v1/clusters/{cluster_id}/nodes/{node_id}/convert"
        return cast(Json, self._client._call("POST", path, json={"compute_class": compute_class}))
