"""The CLI's output for people against a real server (Typer's runner): short ids as docker takes
them, within one account only; `ls` at 80 and 200 columns; `--json FIELDS`; cents, `--exact`,
`--month`; `events --since/--object` and `--follow` from now; completion without a server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from api_server import ADMIN_KEY, Api, free_port
from typer.testing import CliRunner

from lowcostgpu.cli import context
from lowcostgpu.cli.main import app
from lowcostgpu.client.api import Client
from waiting import wait_until


@pytest.fixture
def cli(api: Api, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("LOWCOSTGPU_URL", api.url)
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.delenv("LOWCOSTGPU_ADMIN_KEY", raising=False)
    return CliRunner()


def run(cli: CliRunner, *args: str, code: int = 0) -> str:
    result = cli.invoke(app, list(args))
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    return result.output


def key_of(user: Client) -> str:
    return str(user._http.headers["authorization"][7:])


@pytest.fixture
def tenant(api: Api, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Client:
    """A topped-up account whose key the CLI uses."""
    _, user = api.account(f"out-{request.node.name[:40]}")
    monkeypatch.setenv("LOWCOSTGPU_API_KEY", key_of(user))
    return user


def finished(cli: CliRunner, n: int) -> list[str]:
    """`n` short runs launched and finished: their ids, oldest first."""
    ids = []
    for _ in range(n):
        out = run(cli, "launch", "--gpu", "a100-sxm4", "--json", "id", "--", "true")
        ids.append(json.loads(out)["id"])
    for i in ids:
        wait_until(
            lambda i=i: (
                json.loads(run(cli, "show", i, "--json", "status"))["status"] == "succeeded"
            ),
            what=f"{i} succeeded",
        )
    return ids


def test_short_ids_resolve_within_the_account_and_ambiguity_lists_only_its_own(
    api: Api, cli: CliRunner, tenant: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = finished(cli, 2)
    _, other = api.account("out-other")
    theirs = other.launch(gpu="a100-sxm4", command=["true"])["id"]
    for full in mine:
        unique = next(
            full[:n] for n in range(3, 11) if sum(m.startswith(full[:n]) for m in mine) == 1
        )
        assert json.loads(run(cli, "show", unique, "--json", "id")) == {"id": full}
        assert json.loads(run(cli, "show", unique[2:], "--json", "id")) == {"id": full}
    out = run(cli, "show", "i-", code=2)
    assert out.startswith("error: 'i-' names more than one instance:") and out.count("\n") == 1
    assert all(m in out for m in mine) and theirs not in out
    out = run(cli, "show", theirs, code=2)  # another account's whole id: as if it did not exist
    assert out.startswith("error: ") and theirs in out  # the id the user typed, nothing more
    out = run(cli, "show", theirs[:-1], code=2)  # ... and no start of it matches
    assert out.startswith(f"error: no instance of yours starts with '{theirs[:-1]}'")
    out = run(cli, "rm", "i-zz", code=2)
    assert "no instance of yours starts with 'i-zz'" in out
    assert "deleted" in run(cli, "rm", mine[0][:-1])


def test_ls_is_newest_first_with_whole_ids_at_80_and_200_columns(
    cli: CliRunner, tenant: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = finished(cli, 3)
    for columns, titles in ((80, ["ID", "STATUS", "AGE", "GPU", "$/HR"]), (200, ["RESTARTS"])):
        monkeypatch.setenv("COLUMNS", str(columns))
        lines = run(cli, "ls").splitlines()
        assert all(len(line) <= columns for line in lines), lines
        assert all(t in lines[0].split() for t in titles), lines[0]
        shown = [line.split()[0] for line in lines[1:]]
        listed = json.loads(run(cli, "ls", "--json", "id,created_at"))
        assert shown == [i["id"] for i in listed] and sorted(shown) == sorted(ids)
        newest_first = sorted(listed, key=lambda i: (i["created_at"], i["id"]), reverse=True)
        assert listed == newest_first  # ties in one second: by id
        assert all("ago" in line or "just now" in line for line in lines[1:])


def test_json_fields_everywhere_and_unknown_ones_name_the_known(
    cli: CliRunner, tenant: Client
) -> None:
    (i,) = finished(cli, 1)
    listed = json.loads(run(cli, "ls", "--json", "id,status"))
    assert listed == [{"id": i, "status": "succeeded"}]
    assert "gpu_indices" in json.loads(run(cli, "ls", "--json"))[0]  # bare: everything
    assert set(json.loads(run(cli, "balance", "--json", "balance"))) == {"balance"}
    assert set(json.loads(run(cli, "bill", "--json", "total,total_exact"))) == {
        "total",
        "total_exact",
    }
    out = run(cli, "show", i, "--json", "id,colour", code=2)
    assert out.startswith("error: unknown JSON field colour (known fields: ")
    assert "status" in out and out.count("\n") == 1
    events = json.loads(run(cli, "events", i, "--json", "reason"))
    assert {"reason": "Succeeded"} in events and all(set(e) == {"reason"} for e in events)


def test_money_to_the_cent_exact_on_request_and_a_bill_by_month(
    cli: CliRunner, tenant: Client
) -> None:
    finished(cli, 1)
    out = run(cli, "balance")
    first = out.splitlines()[0]
    amount = first.split()[1]
    assert first.startswith("balance $") and len(amount.split(".")[1]) == 2, first
    out = run(cli, "bill")
    total = next(line for line in out.splitlines() if line.startswith("total "))
    assert "exact" not in total and len(total.split()[1].split(".")[1]) == 2
    assert "(exact $" in run(cli, "bill", "--exact")
    assert "2026-11-01 00:00 → 2026-12-01 00:00" in run(cli, "bill", "--month", "2026-11")
    assert "2026-11-15 00:00 →" in run(cli, "bill", "--start", "2026-11-15")
    out = run(cli, "bill", "--month", "2026-13", code=2)
    assert out == "error: --month '2026-13' is not a month (e.g. --month 2026-11)\n"
    out = run(cli, "bill", "--start", "last week", code=2)
    assert "is not a date or time" in out


def test_events_since_and_by_object_with_local_times(
    api: Api, cli: CliRunner, tenant: Client
) -> None:
    a, b = finished(cli, 2)
    out = run(cli, "events", "--object", a)
    assert a in out and b not in out and "Succeeded" in out
    assert out.splitlines()[0][:4].isdigit()  # a local date first, not epoch seconds
    assert b in run(cli, "events", "--since", "1h")
    assert run(cli, "events", "--since", "2000-01-01") == run(cli, "events")
    out = run(cli, "events", "--since", "soon", code=2)
    assert out.startswith("error: --since 'soon' is neither an age nor a time")
    assert "Succeeded" in run(cli, "events", a[:-1])  # a short id, one instance's timeline


@pytest.fixture
def followed(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The seq each `events -f` follows after; the follow itself ends at once (as Ctrl-C)."""
    afters: list[int] = []

    def follow(self: Client, after: int = 0, **_: Any) -> Iterator[Any]:
        afters.append(after)
        raise KeyboardInterrupt
        yield  # a generator, as the real one

    monkeypatch.setattr(Client, "follow_events", follow)
    yield afters


def test_follow_starts_at_now_unless_since_or_all(
    cli: CliRunner, tenant: Client, followed: list[int]
) -> None:
    finished(cli, 1)
    history = json.loads(run(cli, "events", "--json"))
    latest = max(e["seq"] for e in history)
    assert run(cli, "events", "-f") == ""  # no history replayed
    assert "Succeeded" in run(cli, "events", "-f", "--all")
    assert "Succeeded" in run(cli, "events", "-f", "--since", "1h")
    assert followed == [latest, latest, latest]


def test_completion_of_ids_and_gpu_types_and_silence_without_a_server(
    cli: CliRunner, tenant: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    (i,) = finished(cli, 1)
    assert context.complete_instance_ids(i[2:5]) == [i]
    assert i in context.complete_instance_ids("")
    assert context.complete_gpu_types("a1") == ["a100-sxm4"] or "a100-sxm4" in (
        context.complete_gpu_types("a1")
    )
    monkeypatch.setenv("LOWCOSTGPU_URL", f"http://127.0.0.1:{free_port()}")
    assert context.complete_instance_ids("") == []
    assert context.complete_cluster_ids("") == []
    assert context.complete_gpu_types("") == []


def test_a_refused_stop_or_resume_says_which_states_it_takes(
    cli: CliRunner, tenant: Client
) -> None:
    (i,) = finished(cli, 1)
    out = run(cli, "resume", i, code=2)
    assert out.startswith(f"error: {i} is succeeded: resume takes an instance that is ")
    assert "stopped" in out and "cannot go from" not in out and out.count("\n") == 1
    out = run(cli, "stop", i[:-2], code=2)
    assert out.startswith(f"error: {i} is succeeded: stop takes an instance that is ")


def test_every_command_shows_examples_in_its_help(cli: CliRunner) -> None:
    commands = [
        ["launch"], ["ls"], ["show"], ["logs"], ["stop"], ["resume"], ["rm"], ["events"],
        ["bill"], ["balance"], ["fleet"], ["prices"], ["topup"], ["whoami"], ["login"],
        ["cluster", "create"], ["cluster", "ls"], ["cluster", "show"], ["webhooks", "add"],
        ["webhooks", "ls"], ["accounts", "create"], ["accounts", "ls"], ["keys", "create"],
        ["cluster", "update"], ["cluster", "rm"], ["cluster", "convert"], ["webhooks", "rm"],
        ["webhooks", "test"], ["webhooks", "enable"], ["webhooks", "deliveries"],
        ["webhooks", "replay"], ["version"], ["demo"], ["serve"], ["templates"], ["sim"],
    ]  # fmt: skip
    for command in commands:
        out = run(cli, *command, "--help")
        assert "Examples:" in out and f"$ lowcostgpu {' '.join(command)}" in out, command


def test_an_admin_sees_accounts_to_the_cent(cli: CliRunner, api: Api) -> None:
    created = json.loads(
        run(cli, "accounts", "create", "cents", "--admin-key", ADMIN_KEY, "--credit", "7.5",
            "--json", "id,balance")
    )  # fmt: skip
    assert set(created) == {"id", "balance"}
    assert "$7.50" in run(cli, "accounts", "ls", "--admin-key", ADMIN_KEY)


def test_a_cluster_by_a_short_id_and_its_listing_within_80_columns(
    api: Api, cli: CliRunner, tenant: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    created = json.loads(
        run(cli, "cluster", "create", "--gpu", "a100-sxm4", "--gpus-per-node", "1", "--json", "id")
    )
    cid = created["id"]
    try:
        assert json.loads(run(cli, "cluster", "show", cid[2:6], "--json", "id")) == {"id": cid}
        monkeypatch.setenv("COLUMNS", "80")
        lines = run(cli, "cluster", "ls").splitlines()
        assert lines[1].split()[0] == cid and all(len(line) <= 80 for line in lines)
        monkeypatch.setenv("LOWCOSTGPU_API_KEY", key_of(api.account("out-cluster-other")[1]))
        out = run(cli, "cluster", "show", cid[:-1], code=2)
        assert out.startswith(f"error: no cluster of yours starts with '{cid[:-1]}'")
    finally:
        monkeypatch.setenv("LOWCOSTGPU_API_KEY", key_of(tenant))
        run(cli, "cluster", "rm", cid)


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--nodes", "2"], "only 1 host(s) with 1 GPUs or more"),
        (["--hold-survivors-s", "60"], "hold_survivors_s is for multi-node instances"),
    ],
)
def test_a_multi_node_launch_that_cannot_run_says_what_would(
    cli: CliRunner, tenant: Client, extra: list[str], words: str
) -> None:
    result = cli.invoke(app, ["launch", "--gpu", "a100-sxm4", *extra, "--", "true"])
    assert result.exit_code != 0 and words in result.output, result.output
    assert "Traceback" not in result.output


def test_ls_shows_the_hosts_of_a_multi_node_instance() -> None:
    from lowcostgpu.cli.instances import gpu_column

    one = {"gpu": "a100-sxm4", "gpus": 8, "nodes": 1}
    assert gpu_column(one) == "a100-sxm4 ×8"  # type: ignore[arg-type]
    assert gpu_column({**one, "nodes": 4}) == "a100-sxm4 ×8 ×4 nodes"  # type: ignore[arg-type]
