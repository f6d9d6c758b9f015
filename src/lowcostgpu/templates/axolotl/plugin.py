"""axolotl plugin that adds LowcostgpuTrainerCallback; imported by axolotl only (needs axolotl).

The template lists it under `plugins:` of the config it hands to axolotl. Untested here:
axolotl is not installed on our CI machines (see docs/integrations.md).
"""

from __future__ import annotations

from typing import Any

from axolotl.integrations.base import BasePlugin

from lowcostgpu.sdk.integrations import EXIT_INTERRUPTED
from lowcostgpu.sdk.integrations.hf import LowcostgpuTrainerCallback


class LowcostgpuAxolotlPlugin(BasePlugin):  # type: ignore[misc]
    """SIGTERM → checkpoint at the step's end; an interrupted run exits 143, not 0."""

    def __init__(self) -> None:
        super().__init__()
        self.callback: LowcostgpuTrainerCallback | None = None

    def add_callbacks_post_trainer(self, cfg: Any, trainer: Any) -> list[Any]:
        self.callback = LowcostgpuTrainerCallback()
        return [self.callback]

    def post_train(self, cfg: Any, model: Any) -> None:
        if self.callback is not None and self.callback.interrupted:
            print(f"checkpoint step {self.callback.last_saved_step} on volume", flush=True)
            raise SystemExit(EXIT_INTERRUPTED)
