"""The shapes of the API's answers the CLI reads (instances, events, accounts), as typed dicts.

Apart from the `Client` because its callers (the CLI's commands, the tests) name these shapes
without making a call, and the sub-clients share `Json` with it.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict


class Queue(TypedDict):
    position: int
    gpus_ahead: int
    eta_at: int | None
    eta_s: int | None


class Instance(TypedDict):
    id: str
    status: str
    gpu: str
    region: str
    gpus: int
    type: str
    price_per_hour: str
    restart_count: int
    interruption_count: int
    last_checkpoint_step: int | None
    host_id: str | None
    gpu_indices: list[int]
    queue_position: int | None
    queue: Queue | None
    notice_at: int | None
    deadline: int | None
    exit_code: int | None
    failure_reason: str | None
    volume: str | None
    created_at: int
    volume_checkpoint_step: NotRequired[int | None]  # the launch answer: what the volume held


class Event(TypedDict):
    seq: int | None
    at: int
    type: str
    reason: str
    object_kind: str
    object_id: str
    message: str
    data: dict[str, Any]


class Account(TypedDict):
    id: str
    name: str
    created_at: int
    balance: str


class CreatedAccount(Account):
    api_key: str


Json = dict[str, Any]
