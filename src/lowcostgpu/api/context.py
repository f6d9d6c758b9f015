"""What every router needs: the control plane and its services, and who is calling.

Routers are module-level `APIRouter`s; they reach the control plane through `Ctx` (the
`ApiContext` stored on the app) and the caller through `AccountId` (an account's API key: its id)
or `Admin` (the admin key). A new router — `api/clusters.py`, say — imports these and is mounted
by `create_app` (see `api.app.mounted_routers`).

Ownership: `owned_instance` answers 404 for an instance of another account, with the same message
as for one that does not exist, so a key learns nothing about other accounts' objects.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated

import anyio.to_thread
from fastapi import Depends, Header, Request

from lowcostgpu.app.accounts import Accounts, Principal, require_account, require_admin
from lowcostgpu.app.plane import ControlPlane
from lowcostgpu.app.tokens import Tokens
from lowcostgpu.domain import errors
from lowcostgpu.ports.runtime import Runtime
from lowcostgpu.ports.store_records import StoredInstance


@dataclass
class ApiContext:
    plane: ControlPlane
    runtime: Runtime
    tokens: Tokens
    accounts: Accounts
    is_leading: Callable[[], bool]


# Dependencies that do no I/O are `async`: FastAPI runs a sync one in its thread pool, and a hop
# there costs more than the function (three per request, measured in bench/plane.py --http).


async def _context(request: Request) -> ApiContext:
    ctx: ApiContext = request.app.state.ctx
    return ctx


Ctx = Annotated[ApiContext, Depends(_context)]


async def _principal(ctx: Ctx, authorization: Annotated[str | None, Header()] = None) -> Principal:
    """A key seen lately is answered from memory, on the event loop (`Accounts.known`); only
    another one costs a store read, in the thread pool."""
    known = ctx.accounts.known(authorization)
    if known is not None:
        return known
    return await anyio.to_thread.run_sync(ctx.accounts.authenticate, authorization)


async def _account(principal: Annotated[Principal, Depends(_principal)]) -> str:
    return require_account(principal)


async def _admin(principal: Annotated[Principal, Depends(_principal)]) -> Principal:
    require_admin(principal)
    return principal


AccountId = Annotated[str, Depends(_account)]
Admin = Annotated[Principal, Depends(_admin)]


def _instance_token(ctx: Ctx, authorization: Annotated[str | None, Header()] = None) -> str:
    """The instance whose *current* run the token was minted for (`app.tokens`): a token of an
    earlier run, or of an instance that no longer runs, opens nothing. Sync: it reads the store."""
    if not authorization or not authorization.startswith("Bearer "):
        raise errors.Unauthenticated(
            "missing instance token", hint="send Authorization: Bearer $LOWCOSTGPU_TOKEN"
        )
    claim = ctx.tokens.verify(authorization.removeprefix("Bearer ").strip())
    try:
        state = ctx.plane.store.instance(claim.instance_id).state
    except errors.NotFound:
        state = None
    if state is None or state.rank_of(claim.allocation_id) is None:  # any member of the run
        raise errors.Unauthenticated(
            "this instance token belongs to a run that is over",
            hint="each run gets its own LOWCOSTGPU_TOKEN; use the one of the run in progress",
        )
    return claim.instance_id


InstanceToken = Annotated[str, Depends(_instance_token)]


def owned_instance(ctx: ApiContext, instance_id: str, account_id: str) -> StoredInstance:
    try:
        stored = ctx.plane.store.instance(instance_id)
    except errors.NotFound:
        stored = None
    if stored is None or stored.launch.account_id != account_id:
        raise errors.NotFound(f"no instance {instance_id}", hint="`lowcostgpu ls` lists yours")
    return stored
