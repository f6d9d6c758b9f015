from typer.testing import CliRunner

from lowcostgpu import __version__
from lowcostgpu.cli.main import app


def test_version_command_prints_the_package_version() -> None:
    result = CliRunner().invoke(app, ["version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == __version__
