"""`VolumeApi` and `Volume`: the volume endpoints, a sub-client on a `Client`'s connection.

Its own module because volumes are their own resource with their own calls and answer shape,
used by the CLI's volume commands.
"""

from __future__ import annotations

from typing import TypedDict, cast
from urllib.parse import quote

from lowcostgpu.client.api import Client


class Volume(TypedDict):
    name: str
    size_gb: int
    created_at: int
    resized_at: int | None
    in_use_by: list[str]
    checkpoint_step: int | None


class VolumeApi:
    """The volume endpoints, on the same connection and error translation as `Client`."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def list(self) -> list[Volume]:
        return cast(list[Volume], self._client._call("GET", "/v1/volumes"))

    def get(self, name: str) -> Volume:
        return cast(Volume, self._client._call("GET", f"/v1/volumes/{quote(name, safe='')}"))

    def resize(self, name: str, size_gb: int) -> Volume:
        path = f"/v1/volumes/{quote(name, safe='')}"
        return cast(Volume, self._client._call("PATCH", path, json={"size_gb": size_gb}))

    def delete(self, name: str) -> Volume:
        return cast(Volume, self._client._call("DELETE", f"/v1/volumes/{quote(name, safe='')}"))
