"""The checkpoint report through HTTP: the save claim (`save_s`, `saves_on_notice`) is checked
strictly at the edge, kept with the instance, and an old client that sends neither still works."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from api_server import Api

HOLD = ["sleep", "3600"]


@pytest.fixture(scope="module")
def running(api: Api) -> tuple[str, str]:
    """(instance id, the token of its current run) of an interruptible instance that runs."""
    _, user = api.account("checkpoint-claims")
    inst = user.launch(gpu="a100-sxm4", type="interruptible", gpus=1, command=HOLD)
    allocation_id = api.running.wired.plane.store.instance(inst["id"]).state.allocation_id
    assert allocation_id is not None  # placed by the launch itself
    return inst["id"], api.running.wired.tokens.mint(inst["id"], allocation_id)


def _report(api: Api, token: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        f"{api.url}/v1/metadata/checkpoint",
        json=body,
        headers={"Authorization": f"Bearer {token}"},
    )


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"step": 1, "save_s": -0.001}, "save_s", "greater than or equal to 0"),
        ({"step": 1, "save_s": 86_400.5}, "save_s", "less than or equal to 86400"),
        ({"step": 1, "save_s": "30"}, "save_s", "valid number"),
        ({"step": 1, "save_s": True}, "save_s", "valid number"),
        ({"step": 1, "save_s": 3, "saves_on_notice": "yes"}, "saves_on_notice", "valid boolean"),
        ({"step": 1, "save_s": 3, "saves_on_notice": 1}, "saves_on_notice", "valid boolean"),
        ({"step": 1, "saves_on_notice": True}, "save_s is missing", "seconds the save took"),
    ],
)
def test_a_bad_save_claim_is_refused_saying_which_field_and_why(
    api: Api, running: tuple[str, str], body: dict[str, Any], field: str, words: str
) -> None:
    answer = _report(api, running[1], body)
    assert answer.status_code == 422, answer.text
    assert field in answer.text and words in answer.text


# In order, on one instance: each report adds its time to the last three kept.
REPORTS: list[tuple[dict[str, Any], tuple[int, ...], bool]] = [
    ({"step": 2, "save_s": 0}, (0,), False),  # the lowest time, no claim
    ({"step": 3, "save_s": 86_400, "saves_on_notice": False}, (0, 86_400), False),
    ({"step": 4, "save_s": 29.2, "saves_on_notice": True}, (0, 86_400, 30), True),  # rounded up
    ({"step": 5, "save_s": 1, "saves_on_notice": True}, (86_400, 30, 1), True),  # the last three
    ({"step": 6}, (86_400, 30, 1), False),  # an old client: the claim lapses, the times stay
]


def test_a_save_claim_is_kept_with_the_instance_and_an_old_report_still_works(
    api: Api, running: tuple[str, str]
) -> None:
    instance_id, token = running
    for body, reports, saves in REPORTS:
        answer = _report(api, token, body)
        assert answer.status_code == 204, answer.text
        state = api.running.wired.plane.store.instance(instance_id).state
        kept = (state.last_checkpoint_step, state.save_s_reports, state.saves_on_notice)
        assert kept == (body["step"], reports, saves), body
