"""Every input is checked at the edge: what the API accepts can run, what it refuses says why.

From an attack on the API: `gpus=true`, volume specs with whitespace, full-width digits or no
unit, argv with NUL, env names with `=`, top-ups `"1_000"`, `" 5 "`, `"1e-30"`, 10 MB bodies and
integers past what the store holds were accepted (or were a 500). Each is refused here with a
4xx whose body says which field and what to do, next to the accepted neighbour of each limit.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from api_server import ADMIN_KEY, Api

from lowcostgpu.api.models import InstanceIn
from lowcostgpu.api.models_input import (
    ERROR_RESPONSES,
    MAX_ARG_CHARS,
    MAX_ARGS,
    MAX_BODY_BYTES,
    MAX_ENV_VALUE_CHARS,
    MAX_ENV_VARS,
    MAX_INT64,
)
from lowcostgpu.domain.errors import InvalidRequest
from lowcostgpu.domain.volumes import MAX_SIZE_GB, parse_volume_spec

SLEEP = ["sleep", "30"]
ADMIN = {"authorization": f"Bearer {ADMIN_KEY}"}


def _launch(**fields: Any) -> dict[str, Any]:
    return {"gpu": "a100-sxm4", "command": SLEEP, **fields}


REFUSED_LAUNCHES = [
    (_launch(gpus=True), "gpus"),
    (_launch(gpus="1"), "gpus"),
    (_launch(gpus=1.0), "gpus"),
    (_launch(gpus=0), "gpus"),
    (_launch(gpus=65), "gpus"),
    (_launch(grace_period_s=False), "grace_period_s"),
    (_launch(auto_requeue="yes"), "auto_requeue"),
    (_launch(type=1), "type"),
    (_launch(volume="x\n:1GB"), "volume"),
    (_launch(volume="x:1GB\n"), "volume"),
    (_launch(volume=" x:1GB"), "volume"),
    (_launch(volume="x:1GB "), "volume"),
    (_launch(volume="x:０１GB"), "volume"),
    (_launch(volume="x:1 GB"), "volume"),
    (_launch(volume="x:1"), "no unit"),
    (_launch(volume="x:1TB"), "unit"),
    (_launch(volume="x:0GB"), "1 to"),
    (_launch(volume=f"x:{MAX_SIZE_GB + 1}GB"), "1 to"),
    (_launch(volume="../x:1GB"), "not allowed"),
    (_launch(command=["sl\x00eep", "1"]), "NUL"),
    (_launch(command=["sleep", "1\x00"]), "NUL"),
    (_launch(command=[""]), "empty"),
    (_launch(command=["  ", "1"]), "empty"),
    (_launch(command=["x"] * (MAX_ARGS + 1)), "arguments"),
    (_launch(command=["echo", "a" * (MAX_ARG_CHARS + 1)]), "characters"),
    (_launch(command=["sleep", 30]), "command"),
    (_launch(env={"A=B": "1"}), "environment variable name"),
    (_launch(env={"1A": "1"}), "environment variable name"),
    (_launch(env={"": "1"}), "environment variable name"),
    (_launch(env={"A B": "1"}), "environment variable name"),
    (_launch(env={"A": "a\x00b"}), "NUL"),
    (_launch(env={"A": 1}), "env"),
    (_launch(env={f"V{i}": "1" for i in range(MAX_ENV_VARS + 1)}), "at most"),
    (_launch(env={"A": "a" * (MAX_ENV_VALUE_CHARS + 1)}), "longer"),
    (_launch(gpu="a" * 65), "gpu"),
    (_launch(region=""), "region"),
]


@pytest.fixture(scope="module")
def user_key(api: Api) -> Iterator[dict[str, str]]:
    _, user = api.account("validated")
    yield {"authorization": str(user._http.headers["authorization"])}
    user.close()


@pytest.mark.parametrize(("body", "words"), REFUSED_LAUNCHES)
def test_a_malformed_launch_is_a_422_naming_the_field_and_nothing_is_stored(
    api: Api, user_key: dict[str, str], body: dict[str, Any], words: str
) -> None:
    response = httpx.post(f"{api.url}/v1/instances", json=body, headers=user_key)
    assert response.status_code == 422, response.text
    error = response.json()
    assert error["code"] == "invalid_request" and error["hint"]
    assert words in error["message"], error["message"]
    assert "Value error" not in error["message"]
    listed = httpx.get(f"{api.url}/v1/instances", headers=user_key).json()
    assert listed == []


ACCEPTED_LAUNCHES = [
    _launch(gpus=1),
    _launch(gpus=64),
    _launch(grace_period_s=0),
    _launch(volume="x:1GB"),
    _launch(volume="x:1gb"),
    _launch(volume=f"ckpts_2-b:{MAX_SIZE_GB}GB"),
    _launch(volume=f"{'v' * 63}:1GB"),
    _launch(command=["x"] * MAX_ARGS),
    _launch(command=["echo", "a" * MAX_ARG_CHARS, ""]),
    _launch(template="pytorch", command=[""]),  # extra arguments of a template may be empty
    _launch(env={"_A1": "", "B": "é=ok"}),
    _launch(env={f"V{i}": "1" for i in range(MAX_ENV_VARS)}),
    _launch(env={"A": "a" * MAX_ENV_VALUE_CHARS}),
]


@pytest.mark.parametrize("body", ACCEPTED_LAUNCHES)
def test_the_neighbour_of_each_limit_is_accepted(body: dict[str, Any]) -> None:
    InstanceIn.model_validate(body)  # the body model alone: accepted launches would start work


@pytest.mark.parametrize(
    ("spec", "expected"),
    [("a:1GB", ("a", 1)), ("a:1gb", ("a", 1)), (f"a:{MAX_SIZE_GB}GB", ("a", MAX_SIZE_GB))],
)
def test_the_volume_grammar_reads_name_and_size(spec: str, expected: tuple[str, int]) -> None:
    parsed = parse_volume_spec(spec)
    assert (parsed.name, parsed.size_gb) == expected


@pytest.mark.parametrize("spec", ["a:1GB\n", "a:1\tGB", "a:1G", "a:1GiB", "a:" + "9" * 13 + "GB"])
def test_the_volume_grammar_refuses_what_it_does_not_define(spec: str) -> None:
    with pytest.raises(InvalidRequest, match="ckpts:50GB"):
        parse_volume_spec(spec)


@pytest.mark.parametrize(
    ("amount", "words"),
    [
        ("1_000", "digits"),
        (" 5 ", "digits"),
        ("5 ", "digits"),
        ("1e-30", "digits"),
        ("1E2", "digits"),
        ("５", "digits"),
        ("1.001", "digits"),
        ("+5", "digits"),
        ("0.00", "more than"),
        ("1000000.01", "at most"),
        (5, "amount"),
        (5.5, "amount"),
        (True, "amount"),
    ],
)
def test_a_top_up_is_digits_with_at_most_cents(api: Api, amount: object, words: str) -> None:
    account_id, _ = api.account("topped", credit=None)
    url = f"{api.url}/v1/accounts/{account_id}/topup"
    response = httpx.post(url, json={"amount": amount}, headers=ADMIN)
    assert response.status_code == 422, response.text
    assert words in response.json()["message"]
    account = httpx.get(f"{api.url}/v1/accounts", headers=ADMIN).json()
    assert next(a for a in account if a["id"] == account_id)["balance"] == "0.00"


@pytest.mark.parametrize(
    ("amount", "balance"), [("0.01", "0.01"), ("5", "5.00"), ("1000000.00", "1000000.00")]
)
def test_the_neighbours_of_the_top_up_limits_are_credited(
    api: Api, amount: str, balance: str
) -> None:
    account_id, _ = api.account("credited", credit=None)
    url = f"{api.url}/v1/accounts/{account_id}/topup"
    response = httpx.post(url, json={"amount": amount}, headers=ADMIN)
    assert response.status_code == 200, response.text
    assert response.json()["balance"] == balance


def _padded(body: bytes, size: int) -> bytes:
    """A JSON body of exactly `size` bytes: `body` and trailing spaces (JSON allows them)."""
    return body + b" " * (size - len(body))


@pytest.mark.parametrize(("size", "status"), [(MAX_BODY_BYTES, 201), (MAX_BODY_BYTES + 1, 413)])
def test_a_body_over_the_cap_is_a_413_whether_or_not_its_length_is_declared(
    api: Api, size: int, status: int
) -> None:
    body = _padded(b'{"name": "big"}', size)
    headers = {**ADMIN, "content-type": "application/json"}
    declared = httpx.post(f"{api.url}/v1/accounts", content=body, headers=headers)

    def chunks() -> Iterator[bytes]:  # no Content-Length: sent chunked
        for start in range(0, len(body), 65536):
            yield body[start : start + 65536]

    streamed = httpx.post(f"{api.url}/v1/accounts", content=chunks(), headers=headers)
    for response in (declared, streamed):
        assert response.status_code == status, response.text[:200]
        if status == 413:
            error = response.json()
            assert error["code"] == "payload_too_large" and str(MAX_BODY_BYTES) in error["message"]


@pytest.mark.parametrize(
    ("query", "status"),
    [
        (f"start=0&end={MAX_INT64}", 200),
        (f"start=0&end={MAX_INT64 + 1}", 422),
        (f"start={2**64}", 422),
        ("start=-1", 422),
    ],
)
def test_integer_queries_are_bounded_by_what_the_store_holds(
    api: Api, user_key: dict[str, str], query: str, status: int
) -> None:
    response = httpx.get(f"{api.url}/v1/billing?{query}", headers=user_key)
    assert response.status_code == status, response.text
    if status == 422:
        assert "query parameter" in response.json()["message"]


@pytest.mark.parametrize(("after", "status"), [(MAX_INT64, 200), (MAX_INT64 + 1, 422)])
def test_an_instance_timeline_takes_any_seq_the_store_holds(
    api: Api, after: int, status: int
) -> None:
    _, user = api.account("timeline")
    instance = user.launch(gpu="a100-sxm4", command=["true"], gpus=2)
    key = {"authorization": str(user._http.headers["authorization"])}
    url = f"{api.url}/v1/instances/{instance['id']}/events?after={after}"
    response = httpx.get(url, headers=key)
    assert response.status_code == status, response.text
    user.close()


def test_a_long_list_of_problems_is_summed_up_not_echoed(
    api: Api, user_key: dict[str, str]
) -> None:
    body = _launch(command=list(range(10_000)))
    response = httpx.post(f"{api.url}/v1/instances", json=body, headers=user_key)
    assert response.status_code == 422
    message = response.json()["message"]
    assert "and 9995 more" in message and len(message) < 1000


def test_every_operation_declares_the_error_statuses_it_can_answer(api: Api) -> None:
    document = httpx.get(f"{api.url}/openapi.json").json()
    declared = {str(code) for code in ERROR_RESPONSES}
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            missing = declared - set(operation["responses"])
            assert not missing, f"{method.upper()} {path} does not declare {sorted(missing)}"
            error = operation["responses"]["422"]["content"]["application/json"]["schema"]
            assert error == {"$ref": "#/components/schemas/ErrorOut"}


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b'{"gpu": "a100-sxm4",', "body: not valid JSON"),
        (b"[1, 2]", "body: Input should be a valid dictionary"),
        (b"", "body: Field required"),
    ],
)
def test_a_body_that_is_not_a_json_object_is_a_readable_422(
    api: Api, user_key: dict[str, str], content: bytes, words: str
) -> None:
    headers = {**user_key, "content-type": "application/json"}
    response = httpx.post(f"{api.url}/v1/instances", content=content, headers=headers)
    assert response.status_code == 422, response.text
    assert words in response.json()["message"], response.json()
