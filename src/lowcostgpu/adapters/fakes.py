"""In-memory `Runtime` and `Volumes` with the local adapters' semantics; tests drive the workloads.

A fake workload runs from `start` until the test ends it (`finish`, `lose`) or the runtime kills
it: `signal` only records the SIGTERM (a real workload decides what to do with it), `kill` ends it
with 137 (128 + SIGKILL, as `LocalRuntime` reports a death by signal). Reports are level-triggered
exactly like the real runtime's: every `observe` returns every workload until `forget`, and
`changes_since` the ones whose report changed (`ports.runtime.ChangeReporting`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Literal

from lowcostgpu.adapters.local.state import check_allocation_id
from lowcostgpu.adapters.local.volumes import check_volume_request
from lowcostgpu.domain.capacity import Timestamp
from lowcostgpu.domain.errors import Conflict, InvalidRequest, NotFound
from lowcostgpu.ports.runtime import VolumeMount, WorkloadReport, WorkloadStart, check_command

SIGKILL_EXIT_CODE = 128 + 9


@dataclass
class _Workload:
    start: WorkloadStart
    report: WorkloadReport
    signals: list[str] = field(default_factory=list)
    start_calls: int = 1


class FakeRuntime:
    """`Runtime` in memory. `missing_commands`: argv[0]s whose start fails as a missing file."""

    def __init__(
        self, *, now: Callable[[], Timestamp] = lambda: 0, missing_commands: Iterable[str] = ()
    ) -> None:
        self._now = now
        self._missing = frozenset(missing_commands)
        self._workloads: dict[str, _Workload] = {}
        self._logs: dict[str, str] = {}
        self._seq = 0  # bumped at each change of a report
        self._changed: dict[str, int] = {}  # allocation → seq of its last change, oldest first

    # -- the port ----------------------------------------------------------------------------

    def start(self, start: WorkloadStart) -> None:
        check_allocation_id(start.allocation_id)
        check_command(start)
        known = self._workloads.get(start.allocation_id)
        if known is not None:
            known.start_calls += 1
            return
        report = WorkloadReport(start.allocation_id, start.instance_id, "running", at=self._now())
        if start.argv[0] in self._missing:
            reason = f"cannot start command {start.argv[0]!r}: no such file or directory"
            report = replace(report, phase="start_failed", reason=reason)
        self._workloads[start.allocation_id] = _Workload(start, report)
        self._logs.setdefault(start.allocation_id, "")
        self._touch(start.allocation_id)

    def signal(self, allocation_id: str, signal: Literal["SIGTERM"]) -> None:
        if signal != "SIGTERM":
            raise InvalidRequest(f"signal {signal!r} is not supported", hint="send 'SIGTERM'")
        workload = self._workloads.get(allocation_id)
        if workload is not None and workload.report.phase == "running":
            workload.signals.append(signal)

    def kill(self, allocation_id: str) -> None:
        workload = self._workloads.get(allocation_id)
        if workload is not None and workload.report.phase == "running":
            workload.signals.append("SIGKILL")
            self._end(allocation_id, SIGKILL_EXIT_CODE, "")

    def observe(self) -> list[WorkloadReport]:
        return [self._workloads[a].report for a in sorted(self._workloads)]

    def changes_since(self, cursor: int | None) -> tuple[list[WorkloadReport], int]:
        if cursor is None:
            return self.observe(), self._seq
        changed = []
        for allocation_id, seq in reversed(self._changed.items()):  # newest first: O(changes)
            if seq <= cursor:
                break
            changed.append(allocation_id)
        return [self._workloads[a].report for a in sorted(changed)], self._seq

    def forget(self, allocation_id: str) -> None:
        workload = self._workloads.get(allocation_id)
        if workload is None:
            return
        if workload.report.phase in ("starting", "running"):
            raise Conflict(
                f"workload {allocation_id} is still {workload.report.phase}; "
                "it cannot be forgotten yet",
                hint="signal or kill it, and forget it once observe() reports it exited",
            )
        del self._workloads[allocation_id]
        self._changed.pop(allocation_id, None)

    def logs(self, allocation_id: str, tail_bytes: int = 65536) -> str:
        if allocation_id not in self._logs:
            raise NotFound(f"no workload {allocation_id} on this runtime")
        data = self._logs[allocation_id].encode()
        return data[max(0, len(data) - max(0, tail_bytes)) :].decode(errors="replace")

    # -- what the test does to the workloads -------------------------------------------------

    def finish(self, allocation_id: str, exit_code: int) -> None:
        """The workload exits by itself with `exit_code`."""
        self._end(allocation_id, exit_code, "")

    def lose(self, allocation_id: str) -> None:
        """The workload is gone without a recorded exit (its shim was killed): code unknown."""
        reason = "exit status unknown: the workload and its shim are gone without a record"
        self._end(allocation_id, None, reason)

    def write_log(self, allocation_id: str, text: str) -> None:
        self._logs[allocation_id] = self._logs.get(allocation_id, "") + text

    def signals_of(self, allocation_id: str) -> list[str]:
        """The signals the workload received, in order ('SIGTERM', 'SIGKILL')."""
        return list(self._workload(allocation_id).signals)

    def started(self, allocation_id: str) -> WorkloadStart:
        return self._workload(allocation_id).start

    def start_calls(self, allocation_id: str) -> int:
        return self._workload(allocation_id).start_calls

    def phase_of(self, allocation_id: str) -> str | None:
        """The workload's phase, or None for one never started or forgotten."""
        workload = self._workloads.get(allocation_id)
        return None if workload is None else workload.report.phase

    def running(self) -> list[str]:
        return [a for a, w in sorted(self._workloads.items()) if w.report.phase == "running"]

    def _workload(self, allocation_id: str) -> _Workload:
        workload = self._workloads.get(allocation_id)
        if workload is None:
            raise NotFound(f"no workload {allocation_id} on this fake runtime")
        return workload

    def _end(self, allocation_id: str, exit_code: int | None, reason: str) -> None:
        workload = self._workload(allocation_id)
        if workload.report.phase != "running":
            raise Conflict(f"workload {allocation_id} is {workload.report.phase}, not running")
        workload.report = replace(
            workload.report, phase="exited", exit_code=exit_code, reason=reason, at=self._now()
        )
        self._touch(allocation_id)

    def _touch(self, allocation_id: str) -> None:
        """The allocation's report changed: it moves to the newest end of `_changed`."""
        self._seq += 1
        self._changed.pop(allocation_id, None)
        self._changed[allocation_id] = self._seq


class FakeVolumes:
    """`Volumes` in memory; the test sets usage with `set_usage`."""

    def __init__(self, *, root: str = "/volumes") -> None:
        self._root = root
        self._volumes: dict[tuple[str, str], VolumeMount] = {}
        self._usage: dict[tuple[str, str], int] = {}

    def check_fits(
        self, account_id: str, name: str, size_gb: int | None, *, region: str | None = None
    ) -> None:
        check_volume_request(account_id, name, size_gb)

    def ensure(
        self, account_id: str, name: str, size_gb: int, *, region: str | None = None
    ) -> VolumeMount:
        check_volume_request(account_id, name, size_gb)
        key = (account_id, name)
        if key not in self._volumes:
            path = f"{self._root}/{account_id}/{name}"
            self._volumes[key] = VolumeMount(name=name, size_gb=size_gb, path=path)
            self._usage[key] = 0
        return self._volumes[key]

    def usage_bytes(self, account_id: str, name: str) -> int:
        check_volume_request(account_id, name)
        if (account_id, name) not in self._volumes:
            raise NotFound(f"volume {name} of account {account_id} does not exist")
        return self._usage[(account_id, name)]

    def delete(self, account_id: str, name: str) -> None:
        check_volume_request(account_id, name)
        self._volumes.pop((account_id, name), None)
        self._usage.pop((account_id, name), None)

    def resize(self, account_id: str, name: str, size_gb: int) -> None:
        check_volume_request(account_id, name, size_gb)
        found = self._volumes.get((account_id, name))
        if found is not None and size_gb > found.size_gb:
            self._volumes[(account_id, name)] = replace(found, size_gb=size_gb)

    def set_usage(self, account_id: str, name: str, used_bytes: int) -> None:
        if (account_id, name) not in self._volumes:
            raise NotFound(f"volume {name} of account {account_id} does not exist")
        self._usage[(account_id, name)] = used_bytes

    def names(self) -> list[tuple[str, str]]:
        return sorted(self._volumes)
