"""Multi-node launches through HTTP: what cannot run is refused at launch, in words that say what
would (the server's fleet here has one host of 2 GPUs)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from api_server import Api, http_client, serving


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    yield from serving(tmp_path_factory)


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"nodes": 2}, "has only 1 host(s) with 1 GPUs or more"),
        ({"nodes": 2, "type": "on-demand"}, "on-demand instances run on one host"),
        ({"hold_survivors_s": 60}, "hold_survivors_s is for multi-node instances"),
        ({"nodes": 0}, "nodes"),
        ({"nodes": "2"}, "nodes"),
    ],
)
def test_a_multi_node_launch_that_cannot_run_is_a_422_saying_why(
    server: Api, body: dict[str, object], words: str
) -> None:
    with http_client(server, f"gangs-{len(words)}-{body.get('type', 'ir')}") as client:
        answer = client.post(
            "/v1/instances", json={"gpu": "a100-sxm4", "command": ["sleep", "1"], **body}
        )
        assert answer.status_code == 422, answer.text
        assert words in answer.json()["message"]
        assert client.get("/v1/instances").json() == []  # nothing was stored


def test_a_single_host_launch_shows_one_node_and_its_host(server: Api) -> None:
    with http_client(server, "gangs-single") as client:
        answer = client.post(
            "/v1/instances", json={"gpu": "a100-sxm4", "type": "on-demand", "command": ["true"]}
        )
        assert answer.status_code == 201, answer.text
        made = answer.json()
        assert (made["nodes"], made["host_ids"], made["hold_survivors_s"]) == (1, ["gpu-box"], 0)
        assert made["held_hosts"] == [] and made["held_until"] is None
