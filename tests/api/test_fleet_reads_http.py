"""The fleet figures through HTTP, read off the snapshot and the window's events: a workload's
interruption statistics (metadata endpoint, its instance token) and the `/metrics` gauges."""

from __future__ import annotations

import httpx
from api_server import Api

HOLD = ["sleep", "3600"]


def test_a_workload_reads_its_gpu_types_interruption_statistics(api: Api) -> None:
    _, user = api.account("metadata-fleet")
    inst = user.launch(gpu="a100-sxm4", type="interruptible", gpus=1, command=HOLD)
    allocation_id = api.running.wired.plane.store.instance(inst["id"]).state.allocation_id
    assert allocation_id is not None  # one free GPU: placed by the launch itself
    token = api.running.wired.tokens.mint(inst["id"], allocation_id)
    got = httpx.get(f"{api.url}/v1/metadata/fleet", headers={"Authorization": f"Bearer {token}"})
    assert got.status_code == 200
    body = got.json()
    assert body["gpu_type"] == "a100-sxm4" and body["interruptions"] == 0
    assert body["interruptions_per_hour"] == 0.0
    assert body["median_time_between_interruptions_s"] is None
    user.stop(inst["id"])


def test_metrics_count_live_instances_and_the_windows_interruptions(api: Api) -> None:
    _, user = api.account("metrics-live")
    inst = user.launch(gpu="a100-sxm4", type="interruptible", gpus=1, command=HOLD)
    metrics = httpx.get(f"{api.url}/metrics").text
    assert "# TYPE lowcostgpu_instances gauge" in metrics
    assert "# TYPE lowcostgpu_interruptions gauge" in metrics
    assert 'lowcostgpu_interruptions{gpu_type="a100-sxm4"} 0.0' in metrics
    assert 'lowcostgpu_queue_depth{gpu_type="a100-sxm4",region="eu-west"}' in metrics
    user.stop(inst["id"])
