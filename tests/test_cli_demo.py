"""`make run` plays the seed scenario through the real engine: its figures come from the meter."""

from typer.testing import CliRunner

from lowcostgpu.cli.main import app


def test_demo_prints_the_seed_session_with_metered_figures() -> None:
    result = CliRunner().invoke(app, ["demo", "--simulated"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "✓ instance i-b3e19d02 running · $0.234/hr" in lines
    assert "# 3:12:40 interrupted — checkpoint step 4200 on volume" in lines
    assert "# 3:57:00 capacity free — auto-restarted, resumed 4200" in lines
    assert "✓ run finished · 9.4 GPU-hrs · $2.20" in lines


def test_demo_with_a_missing_fleet_file_says_what_to_do() -> None:
    result = CliRunner().invoke(app, ["demo", "--simulated", "--fleet", "/nonexistent/fleet.toml"])
    assert result.exit_code == 2
    assert "does not exist" in result.output
    assert "Traceback" not in result.output


def test_templates_lists_the_shipped_templates() -> None:
    result = CliRunner().invoke(app, ["templates"])
    assert result.exit_code == 0
    for name in ("pytorch", "axolotl", "batch-embed", "render", "shell"):
        assert name in result.output
