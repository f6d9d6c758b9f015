"""`logs --previous` and `logs --run N` through the real HTTP stack and the local runtime: an
interruptible run reclaimed by on-demand work restarts, and both runs' logs stay readable."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import httpx
import pytest
from api_server import Api
from typer.testing import CliRunner

from lowcostgpu.api.log_follow import run_allocation
from lowcostgpu.cli.main import app
from lowcostgpu.client.api import Client
from lowcostgpu.client.records import Instance
from lowcostgpu.core.instance_state import InstanceState, Run
from lowcostgpu.domain.capacity import CapacityClass, PoolKey
from lowcostgpu.domain.errors import InvalidRequest, NotFound
from waiting import wait_until

SAYS_ITS_RUN = ["sh", "-c", 'echo "run $LOWCOSTGPU_RESTART_COUNT"; exec sleep 3600']


def _state(placements: int, started: tuple[str, ...], current: str | None = None) -> InstanceState:
    return InstanceState(
        id="i-1",
        account_id="acme",
        pool=PoolKey("eu-west", "a100-sxm4"),
        gpus=1,
        capacity_class=CapacityClass.INTERRUPTIBLE,
        placement_count=placements,
        restart_count=max(0, placements - 1),
        allocation_id=current,
        runs=tuple(Run(a, 100 + i) for i, a in enumerate(started)),
    )


# Placed 4 times: run 2 was reclaimed before its start was seen (in no `runs`), yet it ran.
THREE_RUNS = _state(4, ("i-1@100", "i-1@200.1", "i-1@400.3"), current="i-1@400.3")
PLACED = (100, 200, 300, 400)  # the `at` of its four Scheduled events


@pytest.mark.parametrize(
    ("state", "run", "previous", "scheduled", "allocation"),
    [
        (THREE_RUNS, None, False, PLACED, "i-1@400.3"),
        (THREE_RUNS, None, True, PLACED, "i-1@300.2"),  # the run never seen starting
        (THREE_RUNS, None, True, (), "i-1@200.1"),  # without its events: the runs seen
        (THREE_RUNS, 0, False, PLACED, "i-1@100"),
        (THREE_RUNS, 1, False, PLACED, "i-1@200.1"),
        (THREE_RUNS, 2, False, PLACED, "i-1@300.2"),
        (THREE_RUNS, 3, False, (), "i-1@400.3"),
        (_state(2, ("i-1@100",), current="i-1@300.1"), None, True, (), "i-1@100"),  # 1 starting
        (_state(0, ()), None, False, (), None),  # queued, never placed: no run yet
    ],
)
def test_a_logs_request_names_the_run_of_its_restart_count(
    state: InstanceState,
    run: int | None,
    previous: bool,
    scheduled: tuple[int, ...],
    allocation: str | None,
) -> None:
    assert run_allocation(state, run, previous, scheduled) == allocation


@pytest.mark.parametrize(
    ("state", "run", "previous", "words", "hint"),
    [
        (THREE_RUNS, 4, False, "instance i-1 has no run 4", "0, 1, 2, 3"),
        (_state(1, ("i-1@100",), current="i-1@100"), None, True, "no run before its latest", ""),
        (_state(0, ()), 0, False, "instance i-1 has no run 0", "none yet"),
    ],
)
def test_a_run_that_does_not_exist_is_not_found_saying_which_do(
    state: InstanceState, run: int | None, previous: bool, words: str, hint: str
) -> None:
    with pytest.raises(NotFound) as info:
        run_allocation(state, run, previous, PLACED[: state.placement_count])
    assert words in info.value.message
    assert info.value.hint and hint in info.value.hint


def _wait_log(user: Client, instance_id: str, text: str) -> None:
    wait_until(lambda: text in user.logs(instance_id), what=f"{text!r} in the log")


class Restarted(NamedTuple):
    user: Client
    inst: Instance
    key: str


@pytest.fixture(scope="module")
def restarted(api: Api) -> Iterator[Restarted]:
    """An instance in its second run (restart 1), its first reclaimed by on-demand work."""
    with api.admin() as admin:
        created = admin.create_account("runs")
        admin.topup(created["id"], "10.00")
    user = Client(api.url, created["api_key"])
    inst = user.launch(gpu="a100", gpus=2, grace_period_s=1, command=SAYS_ITS_RUN)
    _wait_log(user, inst["id"], "run 0\n")
    user.launch(gpu="a100-sxm4", type="on-demand", gpus=2, command=["true"])
    _wait_log(user, inst["id"], "run 1\n")
    yield Restarted(user, inst, created["api_key"])
    user.stop(inst["id"])


def test_the_latest_previous_and_numbered_runs_each_show_their_own_log(
    restarted: Restarted,
) -> None:
    user, inst, _ = restarted
    assert user.logs(inst["id"]) == "run 1\n"
    assert user.logs(inst["id"], run=1) == "run 1\n"
    assert user.logs(inst["id"], previous=True) == "run 0\n"
    assert user.logs(inst["id"], run=0) == "run 0\n"


@pytest.mark.parametrize(
    ("params", "error", "words"),
    [
        ({"run": 7}, NotFound, "has no run 7"),
        ({"run": 0, "previous": True}, InvalidRequest, "run or previous, not both"),
    ],
)
def test_a_wrong_run_is_one_clear_error(
    restarted: Restarted, params: dict[str, object], error: type[Exception], words: str
) -> None:
    user, inst, _ = restarted
    with pytest.raises(error, match=words):
        user.logs(inst["id"], **params)  # type: ignore[arg-type]


def test_follow_streams_the_latest_run_only(restarted: Restarted) -> None:
    answer = httpx.get(
        f"{restarted.user.url}/v1/instances/{restarted.inst['id']}/logs",
        params={"follow": "true", "run": 0},
        headers={"authorization": f"Bearer {restarted.key}"},
    )
    assert answer.status_code == 422 and "latest run only" in answer.json()["message"]


@pytest.fixture
def cli(
    api: Api, restarted: Restarted, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> CliRunner:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("LOWCOSTGPU_URL", api.url)
    monkeypatch.setenv("LOWCOSTGPU_API_KEY", restarted.key)
    return CliRunner()


@pytest.mark.parametrize(
    ("flags", "code", "output"),
    [
        ([], 0, "run 1\n"),
        (["--previous"], 0, "run 0\n"),
        (["--run", "0"], 0, "run 0\n"),
        (["--run", "1"], 0, "run 1\n"),
        (["--run", "9"], 2, "error: instance {id} has no run 9 (its runs, by restart count"),
        (["--previous", "-f"], 2, "error: --follow streams the latest run only"),
    ],
)
def test_cli_logs_reads_the_run_asked_for(
    cli: CliRunner,
    restarted: Restarted,
    flags: list[str],
    code: int,
    output: str,
) -> None:
    inst = restarted.inst
    result = cli.invoke(app, ["logs", *flags, inst["id"]])
    assert result.exit_code == code, result.output
    assert result.output.startswith(output.format(id=inst["id"])), result.output
    assert "Traceback" not in result.output


def test_the_events_say_there_were_two_runs_as_the_logs_do(restarted: Restarted) -> None:
    def reasons() -> list[str]:
        return [e["reason"] for e in restarted.user.timeline(restarted.inst["id"])]

    # "Restarted" follows the run's start as the loop sees it, which may be after its first line
    wait_until(lambda: "Restarted" in reasons(), what="the Restarted event")
    assert reasons().count("Scheduled") == 2
