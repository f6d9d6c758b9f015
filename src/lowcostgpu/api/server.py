"""Running the API server: the control plane built by `bootstrap`, its loop, and uvicorn.

`serve` blocks (the `lowcostgpu serve` command); `start` runs the same server in threads of this
process and returns once it answers (the live demo and the tests use it).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx
import uvicorn

from lowcostgpu.api.app import create_app
from lowcostgpu.app.accounts import Accounts
from lowcostgpu.app.loop import ReconcileLoop
from lowcostgpu.bootstrap.serve import ServeOptions, build, webhooks_of
from lowcostgpu.bootstrap.wiring import Wired
from lowcostgpu.domain.errors import Unavailable

START_TIMEOUT_S = 30.0
# At a stop (SIGTERM), requests still running after this are cancelled: a long-poll waits up to
# 60 s and would otherwise hold the exit that long (its client asks again, from its cursor).
SHUTDOWN_GRACE_S = 3


@dataclass
class Running:
    url: str
    admin_key: str | None  # the admin key made at this start, if one was made
    wired: Wired
    loop: ReconcileLoop
    stop: Callable[[], None]


def _prepare(options: ServeOptions) -> tuple[uvicorn.Server, Running]:
    wired, loop, runtime = build(options)
    plane = wired.plane
    accounts = Accounts(plane.store, plane.clock, plane.ids)
    admin_key = accounts.install_admin_key(options.admin_key)
    thread = threading.Thread(target=loop.run, name="reconcile-loop", daemon=True)
    thread.start()
    api = create_app(plane, runtime, wired.tokens, lambda: loop.leading, accounts=accounts)
    api.state.webhooks = webhooks = webhooks_of(options, wired)
    hooks = threading.Thread(
        target=webhooks.run,
        args=(loop.stopping, lambda: loop.leading),
        name="webhooks",
        daemon=True,
    )
    hooks.start()
    config = uvicorn.Config(
        api,
        host=options.host,
        port=options.port,
        log_level="warning",
        timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
    )
    server = uvicorn.Server(config)

    def stop() -> None:
        server.should_exit = True
        loop.stop()
        thread.join(timeout=10)
        hooks.join(timeout=15)
        plane.store.close()

    return server, Running(options.url, admin_key, wired, loop, stop)


def _greet(options: ServeOptions, running: Running, say: Callable[[str], None]) -> None:
    say(f"lowcostgpu is serving at {options.url} (data in {options.data_dir})")
    say(f"console: {options.url}/console/ (sign in with an account's API key, or the admin key)")
    if running.admin_key:
        say(f"admin key (shown once, stored hashed): {running.admin_key}")
    elif options.admin_key is None:
        say("admin key: the one printed at the first start (or restart with --admin-key)")
    say("Try:")
    say(f"  lowcostgpu login --url {options.url} --admin-key ADMIN_KEY --create-account me")
    say("  lowcostgpu topup ACCOUNT_ID 20.00   # the prepaid balance (login prints ACCOUNT_ID)")
    say("  lowcostgpu prices · lowcostgpu launch --gpu a100-sxm4 --template pytorch --wait")
    say("Or watch the whole seed session for real in a throw-away plane: lowcostgpu demo")


def serve(options: ServeOptions, say: Callable[[str], None]) -> None:
    server, running = _prepare(options)
    _greet(options, running, say)
    try:
        server.run()
    finally:
        running.stop()


def start(options: ServeOptions) -> Running:
    """The server in background threads; returns once /healthz answers and the loop leads."""
    server, running = _prepare(options)
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    stop_running = running.stop

    def stop() -> None:
        stop_running()
        thread.join(timeout=10)

    running.stop = stop
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{running.url}/healthz", timeout=1).json().get("leading"):
                return running
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.05)
    stop()
    raise Unavailable(f"the server at {running.url} did not start within {START_TIMEOUT_S:.0f} s")
