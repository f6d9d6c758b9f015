"""The JSON codec of stored dataclasses: exact round trips, strict and clear refusals."""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from store_support import launch, rich_state, state

from lowcostgpu.adapters.store import StoreDataError, codec
from lowcostgpu.core.instance_state import Member
from lowcostgpu.core.lifecycle import InstanceState, Run
from lowcostgpu.domain.capacity import CapacityClass, PoolKey
from lowcostgpu.domain.status import InstanceStatus
from lowcostgpu.ports.store_records import LaunchRecord


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
        "gpus": None,  # the instance's own GPUs (a survivor hold's run says how many it holds)
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


# --- every field at every value: a property; the refusals, word for word -----------------------

texts = st.text(max_size=12)
maybe_times = st.none() | st.integers(-(2**40), 2**40)
runs = st.builds(
    Run, allocation_id=texts, started_at=st.integers(0, 2**40), billed_until=maybe_times
)
instance_states = st.builds(
    InstanceState,
    id=texts,
    account_id=texts,
    pool=st.builds(PoolKey, texts, texts),
    gpus=st.integers(1, 2**31),
    capacity_class=st.sampled_from(CapacityClass),
    status=st.sampled_from(InstanceStatus),
    auto_requeue=st.booleans(),
    grace_period_s=st.integers(0, 300),
    enqueued_at=maybe_times,
    restart_count=st.integers(0, 2**31),
    allocation_id=st.none() | texts,
    gpu_indices=st.lists(st.integers(0, 15), max_size=8).map(tuple),
    waiting_for=st.frozensets(texts, max_size=5),
    drain_reason=st.sampled_from([None, "reclaim", "stop"]),
    stop_requested=st.booleans(),
    last_checkpoint_step=st.none() | st.integers(0, 2**40),
    exit_code=st.none() | st.integers(-255, 255),
    failure_reason=st.none() | st.text(max_size=40),
    runs=st.lists(runs, max_size=4).map(tuple),
)


@settings(max_examples=100, deadline=None)
@given(instance_states)
def test_any_instance_state_round_trips_and_encodes_canonically(s: InstanceState) -> None:
    text = codec.dumps(s)
    got = codec.loads(InstanceState, text)
    assert got == s and codec.dumps(got) == text
    assert text == json.dumps(
        json.loads(text), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    assert json.loads(text)["waiting_for"] == sorted(s.waiting_for, key=json.dumps)


def _rich(**changes: object) -> dict[str, object]:
    raw: dict[str, object] = json.loads(codec.dumps(rich_state()))
    raw.update(changes)
    return raw


def _rich_without(*names: str) -> dict[str, object]:
    raw = _rich()
    for name in names:
        del raw[name]
    return raw


RUN = {"allocation_id": "a", "started_at": 1, "billed_until": None}
NEWER = "the row was written by a newer lowcostgpu; upgrade this one"
STATUSES = (
    "['queued', 'starting', 'running', 'interrupting', 'interrupted', 'stopping', 'stopped', "
    "'succeeded', 'failed', 'deleted']"
)


class _Colour(enum.Enum):
    RED = "red"
    BLUE = 2


@dataclass(frozen=True)
class _Box:
    """Hints InstanceState has not: a union, a fixed tuple, a float, itself."""

    a: int | str
    b: tuple[int, str] = (1, "x")
    c: Mapping[str, int] = field(default_factory=dict)
    d: _Colour | None = None
    e: float = 0.0
    f: _Box | None = None
    i: Literal[1, "x"] | int = 1


# The messages of the reflective decoder this one replaced (run on these inputs, then frozen).
REFUSALS: list[tuple[object, object, str, str | None]] = [
    (
        InstanceState,
        _rich(runs=[RUN, {"allocation_id": "a", "started_at": "x"}]),
        "InstanceState.runs[1].started_at: expected int, found 'x' in the store",
        None,
    ),
    (
        InstanceState,
        _rich(runs=[RUN, RUN, {"allocation_id": "a", "started_at": 1, "billed_until": "soon"}]),
        "InstanceState.runs[2].billed_until: expected int, found 'soon' in the store",
        None,
    ),
    (
        InstanceState,
        _rich(colour="red", zeta=1),
        "InstanceState: unknown field(s) colour, zeta in a stored InstanceState",
        NEWER,
    ),
    (
        InstanceState,
        _rich(runs=[{**RUN, "x": 2}]),
        "InstanceState.runs[0]: unknown field(s) x in a stored Run",
        NEWER,
    ),
    (
        InstanceState,
        _rich_without("account_id"),
        "InstanceState: field account_id is missing from a stored InstanceState",
        None,
    ),
    (
        InstanceState,
        _rich_without("id", "gpus"),
        "InstanceState: field id is missing from a stored InstanceState",
        None,
    ),
    (
        InstanceState,
        _rich(runs=[{"allocation_id": "a"}]),
        "InstanceState.runs[0]: field started_at is missing from a stored Run",
        None,
    ),
    (
        InstanceState,
        _rich(status="exploded"),
        f"InstanceState.status: expected one of {STATUSES}, found 'exploded' in the store",
        None,
    ),
    (
        InstanceState,
        _rich(capacity_class=None),
        "InstanceState.capacity_class: expected one of ['on-demand', 'interruptible'], "
        "found None in the store",
        None,
    ),
    (
        InstanceState,
        _rich(drain_reason="boredom"),
        "InstanceState.drain_reason: expected one of ['reclaim', 'stop'], found 'boredom' in the "
        "store",
        None,
    ),
    (
        InstanceState,
        _rich(gpus=True),
        "InstanceState.gpus: expected int, found True in the store",
        None,
    ),
    (
        InstanceState,
        _rich(gpus="4" * 100),
        f"InstanceState.gpus: expected int, found '{'4' * 76}... in the store",
        None,
    ),
    (
        InstanceState,
        _rich(gpu_indices=[1, "x"]),
        "InstanceState.gpu_indices[1]: expected int, found 'x' in the store",
        None,
    ),
    (
        InstanceState,
        _rich(waiting_for=[1]),
        "InstanceState.waiting_for[0]: expected str, found 1 in the store",
        None,
    ),
    (
        InstanceState,
        _rich(pool="eu/H100"),
        "InstanceState.pool: expected an object (PoolKey), found 'eu/H100' in the store",
        None,
    ),
    (
        InstanceState,
        _rich(pool={"region": "r", "gpu_type": 1}),
        "InstanceState.pool.gpu_type: expected str, found 1 in the store",
        None,
    ),
    (
        InstanceState,
        _rich(gpus=0),
        "InstanceState: the stored InstanceState is not valid: instance i-rich: gpus must be ≥ 1, "
        "got 0",
        None,
    ),
    (
        InstanceState,
        _rich(enqueued_at=1.5),
        "InstanceState.enqueued_at: expected int, found 1.5 in the store",
        None,
    ),
    (
        InstanceState,
        _rich(runs=[None]),
        "InstanceState.runs[0]: expected an object (Run), found None in the store",
        None,
    ),
    (
        InstanceState,
        [],
        "InstanceState: expected an object (InstanceState), found [] in the store",
        None,
    ),
    (
        LaunchRecord,
        {**json.loads(codec.dumps(launch())), "env": {"A": "1", "B": 2}},
        "LaunchRecord.env.B: expected str, found 2 in the store",
        None,
    ),
    (
        _Box,
        {"a": 1.5},
        "_Box.a: _Box.a: expected int, found 1.5 in the store; "
        "_Box.a: expected str, found 1.5 in the store",
        None,
    ),
    (_Box, {"a": 1, "b": [1]}, "_Box.b: expected a list of 2 items, found [1] in the store", None),
    (_Box, {"a": 1, "b": [1, 2]}, "_Box.b[1]: expected str, found 2 in the store", None),
    (_Box, {"a": 1, "c": {"k": "v"}}, "_Box.c.k: expected int, found 'v' in the store", None),
    (
        _Box,
        {"a": 1, "d": "green"},
        "_Box.d: expected one of ['red', 2], found 'green' in the store",
        None,
    ),
    (_Box, {"a": 1, "e": True}, "_Box.e: expected float, found True in the store", None),
    # through an optional field, the refusal keeps its message and loses its hint
    (
        _Box,
        {"a": 1, "f": {"a": 1, "f": {"a": [], "zz": 1}}},
        "_Box.f.f: unknown field(s) zz in a stored _Box",
        None,
    ),
    (
        _Box,
        {"a": 1, "i": "y"},
        "_Box.i: _Box.i: expected one of [1, 'x'], found 'y' in the store; "
        "_Box.i: expected int, found 'y' in the store",
        None,
    ),
    (dict[str, Any], [], "dict: expected an object, found [] in the store", None),
    (bytes, "x", "bytes: expected bytes, found 'x' in the store", None),
    (
        Callable[[], int],
        1,
        "Callable: the store cannot decode values of type collections.abc.Callable[[], int]",
        None,
    ),
]


@pytest.mark.parametrize(("tp", "raw", "message", "hint"), REFUSALS)
def test_a_refusal_names_the_path_in_the_same_words(
    tp: Any, raw: object, message: str, hint: str | None
) -> None:
    with pytest.raises(StoreDataError) as refused:
        codec.decode(tp, raw, getattr(tp, "__name__", repr(tp)))
    assert (refused.value.message, refused.value.hint) == (message, hint)


@pytest.mark.parametrize(
    ("tp", "raw", "expected"),
    [
        (_Box, {"a": 1, "e": 3}, _Box(1, e=3.0)),  # an integral float, as JSON writes it
        (_Box, {"a": 1, "d": 2}, _Box(1, d=_Colour.BLUE)),
        (_Box, {"a": "1", "i": True}, _Box("1", i=True)),  # Literal compares by ==, as before
        (_Box, {"a": 1, "f": {"a": "x"}}, _Box(1, f=_Box("x"))),
        (int | str, 1, 1),
        (str | int, 1, 1),  # unions are tried in their own order, whatever typing caches
        (float | int, 1, 1.0),
        (int | float, 1, 1),
    ],
)
def test_decoding_keeps_the_hints_order_and_conversions(
    tp: Any, raw: object, expected: object
) -> None:
    got = codec.decode(tp, raw, "x")
    assert got == expected and type(got) is type(expected)


def test_a_gang_round_trips_and_a_row_written_before_gangs_reads_as_one_host() -> None:
    gang = state(
        nodes=2,
        allocation_id="i-1@5",
        host_id="h1",
        gpu_indices=(0,),
        members=(Member("i-1@5:r1", "h2", (0,)),),
        exited_ranks=frozenset({1}),
    )
    assert codec.loads(InstanceState, codec.dumps(gang)) == gang
    older = json.loads(codec.dumps(rich_state()))
    fields = ("nodes", "members", "exited_ranks", "hold_survivors_s", "held_hosts", "held_until")
    for name in (*fields, "held_runs"):
        del older[name]
    for run in older["runs"]:
        del run["gpus"]
    read = codec.loads(InstanceState, json.dumps(older))
    assert read == rich_state()  # every field it lacks takes its default
