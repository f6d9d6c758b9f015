"""The JSON codec of stored dataclasses: exact round trips, strict and clear refusals."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from store_support import launch, rich_state, state

from lowcostgpu.adapters.store import StoreDataError, codec
from lowcostgpu.core.lifecycle import InstanceState
from lowcostgpu.ports.store import LaunchRecord


def test_a_rich_state_round_trips_to_an_equal_value() -> None:
    rich = rich_state()
    assert codec.loads(InstanceState, codec.dumps(rich)) == rich


def test_the_encoding_is_canonical_whatever_the_set_order() -> None:
    a = state(waiting_for=frozenset(["b", "a", "c"]))
    b = state(waiting_for=frozenset(["c", "b", "a"]))
    assert codec.dumps(a) == codec.dumps(b)
    assert json.loads(codec.dumps(a))["waiting_for"] == ["a", "b", "c"]


def test_enums_and_pools_are_stored_by_value() -> None:
    raw = json.loads(codec.dumps(rich_state()))
    assert raw["status"] == "interrupting" and raw["capacity_class"] == "on-demand"
    assert raw["pool"] == {"region": "us-east", "gpu_type": "A100-80GB"}
    assert raw["runs"][1] == {
        "allocation_id": "alloc-7",
        "started_at": 1_700_000_100,
        "billed_until": None,
    }


def _edited(**changes: object) -> str:
    raw = json.loads(codec.dumps(rich_state()))
    raw.update(changes)
    return json.dumps(raw)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (_edited(colour="red"), r"unknown field\(s\) colour in a stored InstanceState"),
        (_edited(status="exploded"), "InstanceState.status: expected one of"),
        (_edited(gpus="4"), "InstanceState.gpus: expected int, found '4'"),
        (_edited(gpus=True), "InstanceState.gpus: expected int"),
        (_edited(drain_reason="boredom"), "InstanceState.drain_reason: expected one of"),
        (_edited(gpu_indices=[1, "x"]), r"InstanceState.gpu_indices\[1\]: expected int"),
        (_edited(runs=[{"allocation_id": "a"}]), "field started_at is missing"),
        (_edited(runs=[{"allocation_id": "a", "started_at": 1, "x": 2}]), "unknown field"),
        (_edited(grace_period_s=999), "not valid: .*grace_period_s must be between"),
        (_edited(pool="eu/H100"), "InstanceState.pool: expected an object"),
        ("{not json", "not valid JSON"),
        ("[]", "expected an object"),
    ],
)
def test_a_malformed_stored_state_is_refused_naming_the_field(text: str, message: str) -> None:
    with pytest.raises(StoreDataError, match=message):
        codec.loads(InstanceState, text)


def test_a_missing_field_with_a_default_takes_the_default() -> None:
    raw = json.loads(codec.dumps(state()))
    del raw["restart_count"], raw["runs"]
    assert codec.loads(InstanceState, json.dumps(raw)) == state()


def test_a_missing_required_field_is_refused() -> None:
    raw = json.loads(codec.dumps(state()))
    del raw["account_id"]
    with pytest.raises(StoreDataError, match="field account_id is missing"):
        codec.loads(InstanceState, json.dumps(raw))


def test_launch_records_round_trip_their_argv_and_env() -> None:
    record = launch(argv=("a", "b c"), env={"X": "1"}, volume_size_gb=3)
    got = codec.loads(LaunchRecord, codec.dumps(record))
    assert got == record and got.argv == ("a", "b c")


@pytest.mark.parametrize(
    ("value", "message"),
    [(Decimal("1.5"), "cannot store a value of type Decimal"), ({1: "x"}, "non-text key")],
)
def test_a_value_json_cannot_hold_is_refused_on_write(value: object, message: str) -> None:
    with pytest.raises(StoreDataError, match=message):
        codec.dumps({"payload": value})
