"""What every request may carry, checked at the edge: limits, grammars and the error shape.

A request that the API accepts must be one the control plane can carry out; one it cannot must be
refused here, with what was wrong, before anything is stored. An argv with a NUL, an env name
with `=`, or a volume spec with a trailing newline were once accepted and then failed at start
(`exited without an exit code`), so these rules mirror what `execve`, the environment and the
volume grammar (`domain.volumes`) take, with caps that keep every request small.

`ERROR_RESPONSES` declares, once for every operation (`FastAPI(responses=…)`), the error statuses
the API answers, all in the `ErrorOut` shape, so the OpenAPI document lists every status code a
client can get without each route repeating them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from pydantic import BaseModel, Field

from lowcostgpu.domain.errors import InvalidRequest
from lowcostgpu.domain.volumes import parse_volume_spec

MAX_INT64: Final = 2**63 - 1  # what the store's integer columns (SQLite, PostgreSQL) hold
MAX_BODY_BYTES: Final = 2**20  # a request body: the largest launch (command, env) fits easily
MAX_ARGS: Final = 1024
MAX_ARG_CHARS: Final = 32_768
MAX_COMMAND_CHARS: Final = 131_072  # all arguments together (Linux takes ≥ 2 MiB with env)
MAX_ENV_VARS: Final = 128
MAX_ENV_NAME_CHARS: Final = 128
MAX_ENV_VALUE_CHARS: Final = 32_768
MAX_ENV_CHARS: Final = 65_536
MAX_NAME_CHARS: Final = 64  # a GPU type, region or template name
ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)
CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]")
# Text the API echoes (names, references): printable, no control characters, not blank.
PLAIN_TEXT: Final = r"^[^\x00-\x1f\x7f]*[^\s\x00-\x1f\x7f][^\x00-\x1f\x7f]*$"


def check_command(command: Sequence[str], *, runs_alone: bool) -> list[str]:
    """argv as `execve` takes it: no NUL, capped; `runs_alone` (no template): a program first."""
    if len(command) > MAX_ARGS:
        raise ValueError(f"the command has {len(command)} arguments, at most {MAX_ARGS}")
    for i, arg in enumerate(command):
        if "\x00" in arg:
            raise ValueError(f"command argument {i} contains a NUL character")
        if len(arg) > MAX_ARG_CHARS:
            raise ValueError(f"command argument {i} is over {MAX_ARG_CHARS} characters")
    total = sum(len(a) for a in command)
    if total > MAX_COMMAND_CHARS:
        raise ValueError(f"the command has {total} characters, at most {MAX_COMMAND_CHARS}")
    if runs_alone and command and not command[0].strip():
        raise ValueError("the command's first argument (the program to run) is empty")
    return list(command)


def check_env(env: Mapping[str, str]) -> dict[str, str]:
    """Names as a shell exports them, values without NUL, capped in count and size."""
    if len(env) > MAX_ENV_VARS:
        raise ValueError(f"at most {MAX_ENV_VARS} environment variables, got {len(env)}")
    total = 0
    for name, value in env.items():
        if len(name) > MAX_ENV_NAME_CHARS or not ENV_NAME.fullmatch(name):
            shown = name[:40] + ("…" if len(name) > 40 else "")
            raise ValueError(
                f"environment variable name {shown!r} is not allowed: use letters, digits and "
                f"'_', not starting with a digit, at most {MAX_ENV_NAME_CHARS} characters"
            )
        if "\x00" in value:
            raise ValueError(f"the value of {name} contains a NUL character")
        if len(value) > MAX_ENV_VALUE_CHARS:
            raise ValueError(f"the value of {name} is longer than {MAX_ENV_VALUE_CHARS} characters")
        total += len(name) + len(value)
    if total > MAX_ENV_CHARS:
        raise ValueError(f"the environment has {total} characters, at most {MAX_ENV_CHARS}")
    return dict(env)


def check_volume(spec: str | None) -> str | None:
    """The one volume grammar (`domain.volumes`), its message and example kept."""
    if spec is None:
        return None
    try:
        parse_volume_spec(spec)
    except InvalidRequest as exc:
        raise ValueError(f"{exc.message}; {exc.hint}" if exc.hint else exc.message) from None
    return spec


class ErrorOut(BaseModel):
    """Every error answer: a stable `code`, what was wrong, and what to do (`hint`)."""

    code: str = Field(description="stable, to branch on: invalid_request, not_found, …")
    message: str = Field(description="what was wrong")
    hint: str | None = Field(None, description="what to do about it")
    details: dict[str, Any] | None = None


def _error(description: str) -> dict[str, Any]:
    return {"model": ErrorOut, "description": description}


ERROR_RESPONSES: Final[dict[int | str, dict[str, Any]]] = {
    400: _error("a request the server could not read (a malformed header or body)"),
    401: _error("no API key or instance token, or one that does not check out"),
    402: _error("the account's prepaid balance cannot cover a new launch"),
    403: _error("a key that may not do this (an account key on an admin endpoint, or reverse)"),
    404: _error("no such object — or one of another account"),
    409: _error("the request contradicts the current state (or no capacity for on-demand)"),
    413: _error(f"a request body over {MAX_BODY_BYTES} bytes"),
    422: _error("a body or parameter that does not parse or is out of range"),
    429: _error("too many requests of this kind at once: retry later"),
    503: _error("a standby server, or a store that cannot be reached"),
}
