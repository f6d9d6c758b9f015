"""What changed among the local runtime's workloads, without reading every allocation's files.

`LocalRuntime.observe` reads each allocation's records (and `/proc`) at every poll: O(workloads)
file reads, which at 10,000 workloads is most of a core. A running workload's report changes
only when its shim ends (the shim records the exit, kills what is left of the group, and exits),
so an exit is an event: each running workload's shim is watched through a pidfd in one epoll set
(`_PidWatch`), and a look at what changed reads only

- the allocations whose shim ended (the epoll set says which, in O(ended));
- those still starting (few, and briefly), and those started or forgotten since the last look;
- the live ones no pidfd watches (no pidfd on this system, the descriptor limit reached, a shim
  whose pid is not known): these are read at every look, as `observe` would.

Each report read is compared with the last one kept; a different one is a change, numbered
(`_seq`), so that `since(cursor)` returns the changes a caller has not seen in O(changes).
Allocations created by another process on the same state directory are found by a full look
(`seen_all`, after `observe`), which the control plane makes when it takes the lead and every
few minutes.
"""

from __future__ import annotations

import contextlib
import os
import resource
import select
import threading
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path

from lowcostgpu.adapters.local.state import report, shim_alive
from lowcostgpu.ports.runtime import WorkloadReport

ENDED = ("exited", "start_failed")
FDS_KEPT_FREE = 1024  # descriptors left to the rest of the server (sockets, files, the store)


class Changes:
    """The last report of each allocation this runtime knows, and which of them changed when."""

    def __init__(self, state_dir: Path, shim_pid: Callable[[str], int | None]) -> None:
        self._dir = state_dir
        self._shim_pid = shim_pid
        self._lock = threading.Lock()  # starts come from request threads, looks from the loop
        self._known: dict[str, WorkloadReport] = {}
        self._seq = 0
        self._changed: dict[str, int] = {}  # allocation → seq of its last change, oldest first
        self._again: set[str] = set()  # started or to be read again at the next look
        self._polled: set[str] = set()  # starting, or live without a watch: read at every look
        self._watch = _PidWatch()

    def seen_all(self, reports: Sequence[WorkloadReport]) -> int:
        """`reports` are every workload now (a full look): keep them; the cursor after them."""
        with self._lock:
            seen = {r.allocation_id for r in reports}
            for gone in [a for a in self._known if a not in seen]:
                self._drop(gone)
            for r in reports:
                self._record(r)
            return self._seq

    def look_again(self, allocation_id: str) -> None:
        """The allocation was just started: read it at the next look."""
        with self._lock:
            self._again.add(allocation_id)

    def forgotten(self, allocation_id: str) -> None:
        with self._lock:
            self._drop(allocation_id)

    def refresh(self) -> list[str]:
        """Read again what may have changed (see the module docstring); returns the allocations
        whose shim was seen to end. Cost: O(changed + starting + unwatched)."""
        with self._lock:
            ended = self._watch.ended()
            look = self._again | self._polled
            look.update(ended)
            self._again = set()
            for allocation_id in sorted(look):
                found = report(self._dir / allocation_id)
                if found is None:
                    self._drop(allocation_id)
                else:
                    self._record(found)
            return ended

    def since(self, cursor: int) -> tuple[list[WorkloadReport], int]:
        """The reports that changed after `cursor`, in allocation order; and the cursor now."""
        with self._lock:
            changed = []
            for allocation_id, seq in reversed(self._changed.items()):  # newest first
                if seq <= cursor:
                    break
                changed.append(allocation_id)
            return [self._known[a] for a in sorted(changed)], self._seq

    def _record(self, found: WorkloadReport) -> None:
        allocation_id = found.allocation_id
        if self._known.get(allocation_id) != found:
            self._known[allocation_id] = found
            self._seq += 1
            self._changed.pop(allocation_id, None)
            self._changed[allocation_id] = self._seq
        if found.phase in ENDED:
            self._watch.drop(allocation_id)
            self._polled.discard(allocation_id)
        elif found.phase == "starting":
            self._polled.add(allocation_id)  # until it runs: its workload record is awaited
        elif self._watch.watching(allocation_id) or self._watch.add(
            allocation_id, self._shim_pid(allocation_id), self._dir / allocation_id
        ):
            self._polled.discard(allocation_id)
        else:
            self._polled.add(allocation_id)

    def _drop(self, allocation_id: str) -> None:
        self._known.pop(allocation_id, None)
        self._changed.pop(allocation_id, None)
        self._again.discard(allocation_id)
        self._polled.discard(allocation_id)
        self._watch.drop(allocation_id)


class _PidWatch:
    """Shims watched through pidfds in one epoll set: which ended, in O(ended)."""

    def __init__(self) -> None:
        self._fds: dict[int, str] = {}  # pidfd → allocation
        self._by_allocation: dict[str, int] = {}
        self._epoll = select.epoll() if hasattr(select, "epoll") else None
        self._room = _descriptors_to_spare() if hasattr(os, "pidfd_open") else 0
        weakref.finalize(self, _close_all, self._fds, self._epoll)

    def watching(self, allocation_id: str) -> bool:
        return allocation_id in self._by_allocation

    def add(self, allocation_id: str, pid: int | None, alloc_dir: Path) -> bool:
        """Watch the allocation's shim; False when it cannot be (it is then polled)."""
        if pid is None or self._epoll is None or len(self._fds) >= self._room:
            return False
        try:
            fd = os.pidfd_open(pid)
        except OSError:  # gone already, or no descriptor left: polled
            return False
        if not shim_alive(alloc_dir):  # ended before the watch (or the pid is another's now)
            os.close(fd)
            return False
        self._epoll.register(fd, select.EPOLLIN)
        self._fds[fd] = allocation_id
        self._by_allocation[allocation_id] = fd
        return True

    def ended(self) -> list[str]:
        """The allocations whose shim has ended since the last call (no longer watched)."""
        if self._epoll is None or not self._fds:
            return []
        out = []
        for fd, _ in self._epoll.poll(0):
            allocation_id = self._fds.get(fd)
            if allocation_id is not None:
                self.drop(allocation_id)
                out.append(allocation_id)
        return out

    def drop(self, allocation_id: str) -> None:
        fd = self._by_allocation.pop(allocation_id, None)
        if fd is None:
            return
        del self._fds[fd]
        if self._epoll is not None:
            with contextlib.suppress(OSError, ValueError):
                self._epoll.unregister(fd)
        os.close(fd)


def _descriptors_to_spare() -> int:
    """How many pidfds may be open: the soft limit on descriptors (raised to the hard one, as
    servers that hold many connections do) less `FDS_KEPT_FREE`."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        with contextlib.suppress(ValueError, OSError):
            wanted = 1 << 20 if hard == resource.RLIM_INFINITY else hard
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
    return max(0, soft - FDS_KEPT_FREE)


def _close_all(fds: dict[int, str], epoll: select.epoll | None) -> None:
    for fd in list(fds):
        with contextlib.suppress(OSError):
            os.close(fd)
    fds.clear()
    if epoll is not None:
        epoll.close()
