"""Entry point of the `lowcostgpu` command."""

from __future__ import annotations

import typer

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
