from __future__ import annotations

import os
import signal

from lowcostgpu.sdk.signal_relay import SignalRelay
from waiting import wait_until


def test_the_relay_passes_on_each_signal_in_order_off_the_handler() -> None:
    got: list[int] = []
    relay = SignalRelay(got.append)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGTERM):
        relay.handler(signum, None)
    wait_until(lambda: len(got) == 3, what="the relay to pass on three signals")
    assert got == [signal.SIGTERM, signal.SIGINT, signal.SIGTERM]
    relay.close()


def test_a_closed_relay_drops_signals_and_its_thread_ends() -> None:
    got: list[int] = []
    relay = SignalRelay(got.append)
    relay.close()
    relay.handler(signal.SIGTERM, None)
    assert not relay._thread.is_alive()
    assert got == []


def test_a_forked_childs_signal_never_reaches_the_parents_relay() -> None:
    got: list[int] = []
    relay = SignalRelay(got.append)
    child = os.fork()
    if child == 0:  # the child: its handler must not write to the parent's pipe
        relay.handler(signal.SIGTERM, None)
        os._exit(0)
    os.waitpid(child, 0)
    relay.handler(signal.SIGINT, None)
    wait_until(lambda: got == [signal.SIGINT], what="the parent's own signal only")
    relay.close()
