from __future__ import annotations

import logging
import socket
import time

import pytest

from lowcostgpu.sdk.env import WorkloadEnv
from lowcostgpu.sdk.metadata import MetadataClient
from lowcostgpu.sdk.testing import FakeMetadata


def client_for(server: FakeMetadata, timeout_s: float = 2.0) -> MetadataClient:
    return MetadataClient(server.url, server.token, timeout_s=timeout_s)


def test_without_a_url_every_call_is_a_quiet_no_op(caplog: pytest.LogCaptureFixture) -> None:
    client = MetadataClient(None, None)
    assert not client.enabled
    assert client.report_checkpoint(10) is False
    assert client.report_complete(10) is False
    assert client.interruption() is None
    assert client.fleet() is None
    assert caplog.records == []


def test_checkpoint_report_posts_json_with_the_bearer_token(metadata_server: FakeMetadata) -> None:
    client = client_for(metadata_server)
    assert client.report_checkpoint(4200, path="/vol/step-4200", duration_s=1.23) is True
    [request] = metadata_server.requests
    assert (request.method, request.path) == ("POST", "/checkpoint")
    assert request.headers["Authorization"] == f"Bearer {metadata_server.token}"
    assert request.body == {"step": 4200, "path": "/vol/step-4200", "duration_s": 1.23}


@pytest.mark.parametrize(
    ("claim", "sent"),
    [
        ({}, {}),  # an old caller: neither field, as before
        ({"save_s": 30}, {"save_s": 30.0}),
        ({"save_s": 0.5, "saves_on_notice": True}, {"save_s": 0.5, "saves_on_notice": True}),
        ({"saves_on_notice": False}, {"saves_on_notice": False}),
    ],
)
def test_checkpoint_report_sends_the_save_claim_only_when_given(
    metadata_server: FakeMetadata, claim: dict[str, object], sent: dict[str, object]
) -> None:
    assert client_for(metadata_server).report_checkpoint(7, **claim) is True  # type: ignore[arg-type]
    assert metadata_server.posted("/checkpoint") == [{"step": 7, **sent}]


def test_complete_report_carries_the_step(metadata_server: FakeMetadata) -> None:
    assert client_for(metadata_server).report_complete(99) is True
    assert metadata_server.posted("/complete") == [{"step": 99}]


def test_interruption_is_none_until_a_notice_exists(metadata_server: FakeMetadata) -> None:
    client = client_for(metadata_server)
    assert client.interruption() is None
    notice = {"action": "stop", "notice_at": 1700000000.0, "deadline": 1700000300.0}
    metadata_server.notice = notice
    assert client.interruption() == notice


def test_fleet_statistics_are_returned(metadata_server: FakeMetadata) -> None:
    metadata_server.fleet = {
        "interruptions_per_hour": 0.5,
        "median_time_between_interruptions_s": 6000.0,
    }
    assert client_for(metadata_server).fleet() == metadata_server.fleet


def test_env_builds_a_client(metadata_server: FakeMetadata) -> None:
    env = WorkloadEnv.from_environ(
        {"LOWCOSTGPU_METADATA_URL": metadata_server.url, "LOWCOSTGPU_TOKEN": metadata_server.token}
    )
    assert MetadataClient.from_env(env).report_checkpoint(1) is True


@pytest.mark.parametrize("status", [401, 500, 503])
def test_server_errors_are_logged_never_raised(
    metadata_server: FakeMetadata, status: int, caplog: pytest.LogCaptureFixture
) -> None:
    metadata_server.status_override = status
    with caplog.at_level(logging.WARNING, logger="lowcostgpu.sdk"):
        assert client_for(metadata_server).report_checkpoint(5) is False
    assert f"HTTP {status}" in caplog.text


def test_a_wrong_token_is_refused_and_reported_as_failure(metadata_server: FakeMetadata) -> None:
    assert MetadataClient(metadata_server.url, "wrong").report_checkpoint(5) is False


def test_an_unreachable_endpoint_fails_fast_and_warns_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = MetadataClient(f"http://127.0.0.1:{port}", "t", timeout_s=0.5)
    with caplog.at_level(logging.WARNING, logger="lowcostgpu.sdk"):
        assert client.report_checkpoint(1) is False
        assert client.interruption() is None
        assert client.fleet() is None
    assert len(caplog.records) == 1
    assert "training continues" in caplog.text


def test_a_hanging_endpoint_is_abandoned_after_the_timeout(metadata_server: FakeMetadata) -> None:
    # The endpoint answers after 60 s: a client that returns within half of that did not wait
    # for the answer (a margin no loaded machine eats; the client's timeout is 0.3 s).
    metadata_server.delay_s = 60.0
    started = time.monotonic()
    assert client_for(metadata_server, timeout_s=0.3).report_checkpoint(1) is False
    assert time.monotonic() - started < 30
