"""The launch templates the CLI shows (`lowcostgpu templates`) and the argv each one runs.

A template is a Python module run as `python -m MODULE ARGS...`; the runtime execs that argv
directly (no shell), so arguments are never re-split or expanded. `shell` is the escape hatch:
the user's own argv, unchanged.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Template:
    name: str
    summary: str
    module: str | None  # None for `shell`: the user's own command
    extras_needed: tuple[str, ...] = ()


class UnknownTemplate(KeyError):
    """No template has that name; the message lists the ones that exist."""

    def __str__(self) -> str:
        return str(self.args[0])


_TEMPLATES = (
    Template(
        "pytorch",
        "Small PyTorch training run (synthetic data) with bit-identical resume",
        "lowcostgpu.templates.pytorch",
        ("torch",),
    ),
    Template(
        "axolotl",
        "LLM fine-tuning from an Axolotl-style YAML config, checkpointed on the volume",
        "lowcostgpu.templates.axolotl",
        ("torch", "ml"),
    ),
    Template(
        "batch-embed",
        "Sentence embeddings of a text file (all-MiniLM-L6-v2, offline), per chunk, resumable",
        "lowcostgpu.templates.batch_embed",
        ("torch", "ml"),
    ),
    Template(
        "render",
        "NumPy ray-traced frames, each written exactly once, resumable",
        "lowcostgpu.templates.render",
        ("torch",),  # NumPy comes with the torch extra
    ),
    Template("shell", "Your own command, run as given (use the SDK to make it resumable)", None),
)


def list_templates() -> list[Template]:
    return list(_TEMPLATES)


def get_template(name: str) -> Template:
    for template in _TEMPLATES:
        if template.name == name:
            return template
    known = ", ".join(t.name for t in _TEMPLATES)
    raise UnknownTemplate(f"no template named {name!r}; choose one of: {known}")


def command_for(name: str, args: Sequence[str] = ()) -> list[str]:
    """The argv to exec for template `name` with the user's `args`."""
    template = get_template(name)
    if template.module is None:
        if not args:
            raise ValueError("the shell template needs a command, e.g. ['python', 'train.py']")
        return list(args)
    return [sys.executable, "-m", template.module, *args]
