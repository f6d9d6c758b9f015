"""Template `axolotl`: a LoRA fine-tune from an axolotl-style YAML that survives interruptions.

`python -m lowcostgpu.templates.axolotl --config FILE` (see run.py). Importing this package is
cheap: torch, transformers and peft load only when a run starts.
"""

from __future__ import annotations

from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from lowcostgpu.templates.axolotl.run import main as run_main

    return run_main(argv)


__all__ = ["main"]
