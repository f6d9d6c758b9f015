"""Running the API server: the control plane built by `bootstrap`, its loops, and uvicorn.

`serve` blocks (the `lowcostgpu serve` command); `start` runs the same server in threads of this
process and returns once it answers (the live demo and the tests use it).

Background loops (the reconcile loop, the webhook dispatcher) run under a `Supervisor`, which
starts one again if it dies. A stop — SIGTERM, Ctrl-C, or `Running.stop` — ends within
`STOP_DEADLINE_S` whatever the server is doing: requests in flight get `STOP_GRACE_S` (uvicorn's
graceful shutdown; long-polls are cut after it), the loops are told to stop and joined with
bounded waits, and the store is closed. Every thread is a daemon, so one stuck in a hanging call
cannot hold the process; what it had not committed was never promised (a webhook send in flight
stays pending and goes out after the restart).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType

import httpx
import uvicorn

from lowcostgpu.api.app import create_app
from lowcostgpu.app.accounts import Accounts
from lowcostgpu.app.loop import ReconcileLoop
from lowcostgpu.app.supervisor import Supervisor
from lowcostgpu.app.webhook_pool import WebhookPool
from lowcostgpu.bootstrap.serve import ServeOptions, build, webhooks_of
from lowcostgpu.bootstrap.wiring import Wired
from lowcostgpu.domain.errors import ConfigError, Unavailable
from lowcostgpu.sdk.signal_relay import SignalRelay

log = logging.getLogger(__name__)
START_TIMEOUT_S = 30.0
STOP_GRACE_S = 3  # requests in flight when the server stops get this long to finish
STOP_DEADLINE_S = 10.0  # a stop is over within this, whatever the server was doing
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@dataclass
class Running:
    url: str
    admin_key: str | None  # the admin key made at this start, if one was made
    wired: Wired
    loop: ReconcileLoop
    stop: Callable[[], None]
    supervisor: Supervisor
    webhooks: WebhookPool
    server: uvicorn.Server
    http: threading.Thread  # uvicorn's (started by `start` or `serve`)
    http_failure: list[BaseException]  # what ended uvicorn, if it ended on its own


def _prepare(options: ServeOptions) -> Running:
    wired, loop, runtime = build(options)  # checks the port first (`bootstrap.listen`)
    plane = wired.plane
    accounts = Accounts(plane.store, plane.clock, plane.ids)
    admin_key = accounts.install_admin_key(options.admin_key)
    api = create_app(plane, runtime, wired.tokens, lambda: loop.leading, accounts=accounts)
    api.state.webhooks = webhooks = webhooks_of(options, wired)
    pool = WebhookPool(webhooks)
    supervisor = Supervisor(loop.stopping)
    api.state.metrics.count_restarts(supervisor.counts)
    supervisor.start("reconcile", lambda: _reconcile(loop))
    supervisor.start("webhooks", lambda: pool.run(loop.stopping, lambda: loop.leading))
    config = uvicorn.Config(
        api,
        host=options.host,
        port=options.port,
        log_level="warning",
        timeout_graceful_shutdown=STOP_GRACE_S,
    )
    _quiet_cut_requests()
    server = uvicorn.Server(config)
    failure: list[BaseException] = []

    def run_http() -> None:
        try:
            server.run()
        except BaseException as exc:  # uvicorn exits (SystemExit) when it cannot listen
            failure.append(exc)

    http = threading.Thread(target=run_http, name="uvicorn", daemon=True)
    running = Running(
        options.url, admin_key, wired, loop, lambda: None, supervisor, pool, server, http, failure
    )
    running.stop = _stopper(running)
    return running


class _CutRequests(logging.Filter):
    """Drops uvicorn's traceback for each request cut by a stop (a long-poll, say): cutting them
    is the point of the graceful timeout, and uvicorn already logs how many it cut."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, asyncio.CancelledError)


def _quiet_cut_requests() -> None:
    errors = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _CutRequests) for f in errors.filters):
        errors.addFilter(_CutRequests())


def _reconcile(loop: ReconcileLoop) -> None:
    """The reconcile loop; started again after it died, it reloads the live state first."""
    loop.leading = False
    loop.run()


def _stopper(running: Running) -> Callable[[], None]:
    stopped = threading.Event()

    def stop() -> None:
        if stopped.is_set():
            return
        stopped.set()
        deadline = time.monotonic() + STOP_DEADLINE_S

        def left_s() -> float:
            return max(0.0, deadline - time.monotonic())

        running.server.should_exit = True
        running.loop.stop()
        running.webhooks.stop()
        if running.http.ident is not None:
            running.http.join(min(left_s(), STOP_GRACE_S + 2.0))
        stuck = running.supervisor.join(left_s())
        running.webhooks.join(min(left_s(), 1.0))
        if stuck or running.http.is_alive():
            log.warning("stopped without waiting longer for: %s", ", ".join(stuck) or "requests")
        running.wired.plane.store.close()

    return stop


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
    """Serve until SIGTERM or Ctrl-C (a second one exits at once)."""
    with _stop_signals() as stop_asked:
        running = _prepare(options)
        try:
            _listen(options, running, stop_asked)
            if not stop_asked.is_set():
                _greet(options, running, say)
            while running.http.is_alive() and not stop_asked.wait(0.5):
                pass
            if not stop_asked.is_set():
                raise Unavailable(
                    f"the HTTP server stopped on its own: {_failure(running) or 'no reason given'}",
                    hint="see the log above; start it again",
                )
        finally:
            running.stop()


def _listen(options: ServeOptions, running: Running, stop_asked: threading.Event) -> None:
    """Start uvicorn and wait until it listens; a clear error if it cannot."""
    running.http.start()
    while not stop_asked.wait(0.05):
        if running.server.started:
            return
        if not running.http.is_alive():
            why = _failure(running)
            raise ConfigError(
                f"cannot listen on {options.host}:{options.port}" + (f": {why}" if why else ""),
                hint="is another server using that port? choose another with --port",
            )


def _failure(running: Running) -> str:
    """What ended uvicorn's thread (its `SystemExit` says nothing: its log said why)."""
    return ", ".join(str(e) for e in running.http_failure if not isinstance(e, SystemExit))


@contextmanager
def _stop_signals() -> Iterator[threading.Event]:
    """SIGTERM and SIGINT ask for a stop (the event); a second one ends the process at once."""
    asked = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield asked
        return

    def stop(signum: int) -> None:
        log.warning("stopping (signal %d): within %.0f s", signum, STOP_DEADLINE_S)
        asked.set()

    relay = SignalRelay(stop, "lowcostgpu-stop-signals")
    received: list[int] = []  # appended by the handler: no lock (SignalRelay)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if received:
            os._exit(128 + signum)  # asked twice: the operator wants it gone now
        received.append(signum)
        relay.handler(signum, frame)

    previous = {s: signal.signal(s, on_signal) for s in STOP_SIGNALS}
    try:
        yield asked
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        relay.close()


def start(options: ServeOptions) -> Running:
    """The server in background threads; returns once /healthz answers and the loop leads."""
    running = _prepare(options)
    running.http.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline and running.http.is_alive():
        try:
            if httpx.get(f"{running.url}/healthz", timeout=1).json().get("leading"):
                return running
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.05)
    running.stop()
    raise Unavailable(f"the server at {running.url} did not start within {START_TIMEOUT_S:.0f} s")
