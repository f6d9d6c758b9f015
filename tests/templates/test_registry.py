from __future__ import annotations

import importlib.util
import sys

import pytest

from lowcostgpu.templates.registry import UnknownTemplate, command_for, list_templates


def test_every_template_is_listed_with_a_summary() -> None:
    names = [t.name for t in list_templates()]
    assert names == ["pytorch", "axolotl", "batch-embed", "render", "shell"]
    assert all(t.summary for t in list_templates())


@pytest.mark.parametrize("template", [t for t in list_templates() if t.module], ids=str)
def test_every_module_template_points_at_an_importable_module(template: object) -> None:
    module = template.module  # type: ignore[attr-defined]
    assert importlib.util.find_spec(module) is not None, module


@pytest.mark.parametrize(
    ("name", "args", "expected"),
    [
        (
            "pytorch",
            ["--steps", "10"],
            [sys.executable, "-m", "lowcostgpu.templates.pytorch", "--steps", "10"],
        ),
        ("render", [], [sys.executable, "-m", "lowcostgpu.templates.render"]),
        (
            "batch-embed",
            ["--input", "a b.txt"],
            [sys.executable, "-m", "lowcostgpu.templates.batch_embed", "--input", "a b.txt"],
        ),
        (
            "axolotl",
            ["cfg.yaml"],
            [sys.executable, "-m", "lowcostgpu.templates.axolotl", "cfg.yaml"],
        ),
        ("shell", ["bash", "-c", "echo $HOME; rm -rf x"], ["bash", "-c", "echo $HOME; rm -rf x"]),
    ],
)
def test_command_for_builds_an_exec_argv_without_a_shell(
    name: str, args: list[str], expected: list[str]
) -> None:
    assert command_for(name, args) == expected


def test_unknown_template_names_the_known_ones() -> None:
    with pytest.raises(UnknownTemplate, match="choose one of: pytorch, axolotl"):
        command_for("tensorflow", [])


def test_shell_without_a_command_is_refused() -> None:
    with pytest.raises(ValueError, match="needs a command"):
        command_for("shell", [])
