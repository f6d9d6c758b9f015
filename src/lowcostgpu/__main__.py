"""`python -m lowcostgpu …` is the `lowcostgpu` command."""

from lowcostgpu.cli.main import app

app(prog_name="lowcostgpu")
