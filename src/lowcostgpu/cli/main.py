"""Entry point of the `lowcostgpu` command."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from lowcostgpu.domain.errors import LowcostgpuError

app = typer.Typer(
    help="lowcostgpu: preemptible GPU compute at a fixed half price, on a fleet you own.",
    no_args_is_help=True,
)


@app.callback()
def main() -> None:
    """lowcostgpu: preemptible GPU compute at a fixed half price, on a fleet you own."""


@app.command()
def version() -> None:
    """Print the version."""
    from lowcostgpu import __version__

    typer.echo(__version__)


@app.command()
def demo(
    fleet: Annotated[
        Path | None, typer.Option(help="fleet TOML file (default: the demo fleet)")
    ] = None,
) -> None:
    """Play the seed scenario (interrupt, requeue, resume, bill) on the real engine."""
    from lowcostgpu.bootstrap.demo import run_demo

    with _clear_errors():
        run_demo(typer.echo, fleet)


@app.command()
def templates() -> None:
    """List the launch templates (`--template NAME`)."""
    from rich.console import Console
    from rich.table import Table

    from lowcostgpu.templates.registry import list_templates

    table = Table("template", "what it runs", "needs")
    for t in list_templates():
        table.add_row(t.name, t.summary, ", ".join(t.extras_needed) or "-")
    Console().print(table)


@contextmanager
def _clear_errors() -> Iterator[None]:
    """Our own errors become a message and exit code 2, never a traceback."""
    try:
        yield
    except LowcostgpuError as exc:
        typer.echo(f"error: {exc.message}", err=True)
        if exc.hint:
            typer.echo(f"  {exc.hint}", err=True)
        raise typer.Exit(2) from None
