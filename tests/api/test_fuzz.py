"""Schemathesis against the served `/openapi.json`: with an account's key and with the admin key,
every operation gets generated valid and invalid requests (bodies, queries, path ids).

Checks on every answer: no server error; its status code is one the OpenAPI document declares for
that operation; its content type is the declared one; a 4xx body is the error shape with a
message that says what was wrong. Derandomized and bounded (`MAX_EXAMPLES` per operation), so a
run is the same every time and takes about a minute on a loaded 2-core machine.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from api_server import ADMIN_KEY, Api
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.generation.modes import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

MAX_EXAMPLES = 25  # per operation and key
REQUEST_TIMEOUT_S = 20.0
LONG_POLL_S = 0.2  # a generated `wait_s` is cut to this: the fuzz tests answers, not waiting


@pytest.fixture(scope="module")
def keys(api: Api) -> Iterator[dict[str, str]]:
    account_id, user = api.account("fuzzed")
    instance = user.launch(gpu="a100-sxm4", command=["sleep", "600"])
    yield {
        "account": str(user._http.headers["authorization"]),
        "admin": f"Bearer {ADMIN_KEY}",
        # Paths are fuzzed with generated ids and again with real ones, to reach owned objects.
        "fixed": {"instance_id": instance["id"], "account_id": account_id},
    }
    user.close()


@pytest.fixture(scope="module")
def api_schema(api: Api) -> Any:
    return schemathesis.openapi.from_url(f"{api.url}/openapi.json")


def errors_say_what_was_wrong(ctx: Any, response: Any, case: Any) -> bool | None:
    """A 4xx carries `code` and a non-empty `message` (and, for bad input, a `hint`)."""
    if not 400 <= response.status_code < 500:
        return None
    try:
        body = json.loads(response.content)
    except ValueError:
        text = response.text[:200]
        raise AssertionError(f"a {response.status_code} that is not JSON: {text!r}") from None
    assert isinstance(body, dict), body
    assert isinstance(body.get("code"), str) and body["code"], body
    assert isinstance(body.get("message"), str) and body["message"].strip(), body
    if response.status_code == 422:
        assert body.get("hint"), body
    return True


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    errors_say_what_was_wrong,
]


def _short_long_polls(case: Any) -> None:
    query = case.query or {}
    wait = query.get("wait_s")
    if isinstance(wait, int | float) and not isinstance(wait, bool) and math.isfinite(wait):
        query["wait_s"] = min(wait, LONG_POLL_S)
    if "follow" in query:  # a followed log streams until its run ends
        query["follow"] = False


FUZZ = settings(
    max_examples=MAX_EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],  # no shrinking: the failure as found is reported
    suppress_health_check=list(HealthCheck),
)


def _fuzz(
    operation: Any, mode: GenerationMode, key: str, fixed: dict[str, str], answered: Counter[int]
) -> str | None:
    """Run one operation's generated cases; the first failure, described, or None."""
    path_parameters = {
        p.name: fixed[p.name] for p in operation.path_parameters if p.name in fixed
    } or None

    @given(case=operation.as_strategy(generation_mode=mode, path_parameters=path_parameters))
    @FUZZ
    def run(case: Any) -> None:
        _short_long_polls(case)
        response = case.call_and_validate(
            headers={"authorization": key}, checks=CHECKS, timeout=REQUEST_TIMEOUT_S
        )
        answered[response.status_code // 100 * 100] += 1

    try:
        run()
    except Unsatisfiable:  # nothing of this operation can be made invalid (string path ids)
        return None
    except (Exception, BaseExceptionGroup) as exc:  # every failure is collected and shown
        return f"{operation.label} ({mode}): {str(exc)[:1500]}"
    return None


def _fuzz_all(schema: Any, key: str, fixed: dict[str, str], answered: Counter[int]) -> list[str]:
    failures = []
    for result in schema.get_all_operations():
        operation = result.ok()
        names = {p.name for p in operation.path_parameters}
        variants = [{}, fixed] if names & set(fixed) else [{}]  # generated ids, then real ones
        modes = [GenerationMode.POSITIVE]
        if len(operation.query) or len(operation.body):  # else nothing to make invalid
            modes.append(GenerationMode.NEGATIVE)
        for ids in variants:
            for mode in modes:
                failure = _fuzz(operation, mode, key, ids, answered)
                if failure:
                    failures.append(failure)
    return failures


@pytest.mark.parametrize("who", ["account", "admin"])
def test_generated_requests_get_declared_answers_and_never_a_server_error(
    api: Api, api_schema: Any, keys: dict[str, str], who: str
) -> None:
    answered: Counter[int] = Counter()
    failures = _fuzz_all(api_schema, keys[who], keys["fixed"], answered)
    assert not failures, "\n\n".join(failures)
    operations = sum(1 for _ in api_schema.get_all_operations())
    assert sum(answered.values()) >= MAX_EXAMPLES * operations, answered  # it did run
    assert answered[200] and answered[400], answered  # accepted and refused requests alike
