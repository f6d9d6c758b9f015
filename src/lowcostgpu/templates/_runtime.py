"""What every template does the same way: read the contract, print progress, stop cleanly."""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from lowcostgpu.sdk.env import WorkloadEnv, WorkloadEnvError
from lowcostgpu.sdk.metadata import MetadataClient
from lowcostgpu.sdk.notice import EXIT_INTERRUPTED, StopNotice, install_sigterm_handler

EXIT_BAD_INPUT = 2
__all__ = ["EXIT_BAD_INPUT", "EXIT_INTERRUPTED"]


@dataclass(frozen=True)
class Workload:
    env: WorkloadEnv
    metadata: MetadataClient
    notice: StopNotice

    @property
    def volume(self) -> Path:
        return self.env.volume


def start_workload() -> Workload:
    """Install the SIGTERM handler first (a notice during start-up must not kill us), then parse."""
    notice = install_sigterm_handler()
    try:
        env = WorkloadEnv.from_environ()
    except WorkloadEnvError as error:
        fail(str(error))
    env.volume.mkdir(parents=True, exist_ok=True)
    return Workload(env=env, metadata=MetadataClient.from_env(env), notice=notice)


def say(line: str) -> None:
    """Progress lines go to stdout unbuffered: the runtime's log is all a user sees of a run."""
    print(line, flush=True)


def fail(message: str) -> NoReturn:
    print(f"error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(EXIT_BAD_INPUT)


def exit_now(code: int) -> NoReturn:
    """Exit without the interpreter's teardown, once everything durable is durable.

    With torch imported, tearing the interpreter down takes seconds (measured 2–3 s here) —
    seconds during which the GPUs are held after an interruption notice. Checkpoints and
    outputs are fsynced before we get here, so only stdio and logging need flushing.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(code)
