"""`GET /v1/instances` a page at a time, through the real HTTP stack, the client and the CLI.

The instances are written straight into the server's store (finished ones, which the control
plane does not act on), with chosen launch times, so the pages, the ties on `created_at` and the
cursors are known exactly.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import httpx
import pytest
from api_server import Api
from typer.testing import CliRunner

from lowcostgpu.cli.main import app
from lowcostgpu.client import api as client_api
from lowcostgpu.core.lifecycle import InstanceState
from lowcostgpu.domain.capacity import CapacityClass, PoolKey
from lowcostgpu.domain.errors import InvalidRequest
from lowcostgpu.domain.status import InstanceStatus
from lowcostgpu.ports.store_records import Commit, InstanceWrite, LaunchRecord

S = InstanceStatus
# n, created_at, status: ties at 1001 and 1003; one deleted.
ROWS = [
    (1, 1000, S.SUCCEEDED),
    (2, 1001, S.STOPPED),
    (3, 1001, S.FAILED),
    (4, 1002, S.DELETED),
    (5, 1003, S.SUCCEEDED),
    (6, 1003, S.STOPPED),
    (7, 1004, S.FAILED),
]


def seed(api: Api, account_id: str, prefix: str, rows: list[tuple[int, int, S]]) -> list[str]:
    """The instances written, newest first: by (created_at, id) descending, deleted ones too."""
    writes = []
    for n, at, status in rows:
        iid = f"i-{prefix}{n}"
        state = InstanceState(
            id=iid,
            account_id=account_id,
            pool=PoolKey("eu-west", "a100-sxm4"),
            gpus=1,
            capacity_class=CapacityClass.INTERRUPTIBLE,
            status=status,
        )
        launch = LaunchRecord(iid, account_id, ("true",), created_at=at)
        writes.append(InstanceWrite(state, None, launch))
    api.running.wired.plane.store.commit(Commit(instances=writes))
    order = sorted(((at, f"i-{prefix}{n}") for n, at, _ in rows), reverse=True)
    return [iid for _, iid in order]


@pytest.fixture(scope="module")
def accounts(api: Api) -> dict[str, tuple[str, list[str]]]:
    """Two accounts, each with its instances (ids newest first, deleted ones included)."""
    out = {}
    for name, prefix in (("pages-a", "pa"), ("pages-b", "pb")):
        account_id, client = api.account(name)
        out[name] = (client_key(client), seed(api, account_id, prefix, ROWS))
        client.close()
    return out


def client_key(client: client_api.Client) -> str:
    return str(client._http.headers["authorization"])


def get(api: Api, key: str, **params: object) -> httpx.Response:
    return httpx.get(f"{api.url}/v1/instances", params=params, headers={"authorization": key})


def test_pages_follow_the_cursor_newest_first_and_the_last_has_no_next(
    api: Api, accounts: dict[str, tuple[str, list[str]]]
) -> None:
    key, everything = accounts["pages-a"]
    shown = [i for i in everything if i != "i-pa4"]  # deleted: left out without `all`
    first = get(api, key, limit=4)
    assert first.status_code == 200
    assert [i["id"] for i in first.json()] == shown[:4]
    cursor = first.headers["x-next-cursor"]
    link = first.headers["link"]
    assert link.endswith('>; rel="next"') and f"cursor={cursor}" in link and "limit=4" in link
    second = httpx.get(link[1 : link.index(">")], headers={"authorization": key})
    assert [i["id"] for i in second.json()] == shown[4:]  # exactly 2 left: the last page
    assert "x-next-cursor" not in second.headers and "link" not in second.headers
    # A page exactly full that is the last says so: no cursor to an empty page.
    full = get(api, key, limit=len(shown))
    assert len(full.json()) == len(shown) and "x-next-cursor" not in full.headers
    assert [i["id"] for i in get(api, key).json()] == shown  # the default limit: 50


@pytest.mark.parametrize("limit", [1, 2, 3])
def test_every_page_size_reads_every_instance_once_deleted_with_all(
    api: Api, accounts: dict[str, tuple[str, list[str]]], limit: int
) -> None:
    key, everything = accounts["pages-a"]
    seen: list[str] = []
    params: dict[str, object] = {"limit": limit, "all": "true"}
    while True:
        page = get(api, key, **params)
        assert len(page.json()) <= limit
        seen += [i["id"] for i in page.json()]
        if "x-next-cursor" not in page.headers:
            break
        params["cursor"] = page.headers["x-next-cursor"]
    assert seen == everything


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ("stopped", ["i-pa6", "i-pa2"]),
        ("stopped,failed", ["i-pa7", "i-pa6", "i-pa3", "i-pa2"]),
        (["stopped", "failed"], ["i-pa7", "i-pa6", "i-pa3", "i-pa2"]),
        ("deleted", ["i-pa4"]),
        ("running", []),
    ],
)
def test_a_status_filter(
    api: Api, accounts: dict[str, tuple[str, list[str]]], status: object, expected: list[str]
) -> None:
    key, _ = accounts["pages-a"]
    assert [i["id"] for i in get(api, key, status=status).json()] == expected
    first = get(api, key, status=status, limit=1)
    if len(expected) > 1:  # the cursor keeps the filter
        after = get(api, key, status=status, limit=10, cursor=first.headers["x-next-cursor"])
        assert [i["id"] for i in after.json()] == expected[1:]


def _b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"cursor": "not a cursor!"}, "is not a cursor of GET /v1/instances"),
        ({"cursor": _b64("1003")}, "is not a cursor of GET /v1/instances"),
        ({"cursor": _b64("soon:i-pa5")}, "is not a cursor of GET /v1/instances"),
        ({"cursor": _b64("1003:")}, "is not a cursor of GET /v1/instances"),
        ({"cursor": "_-8"}, "is not a cursor of GET /v1/instances"),
        ({"status": "runing"}, "unknown status runing"),
        ({"status": "queued,nope"}, "unknown status nope"),
        ({"limit": 0}, "limit"),
        ({"limit": 501}, "limit"),
    ],
)
def test_bad_parameters_are_clear_errors(
    api: Api, accounts: dict[str, tuple[str, list[str]]], params: dict[str, object], message: str
) -> None:
    key, _ = accounts["pages-a"]
    answer = get(api, key, **params)
    assert answer.status_code == 422
    body = answer.json()
    assert body["code"] == "invalid_request" and message in body["message"]
    if "status" in params:
        assert "valid statuses: queued, starting, running" in body["hint"]


def test_a_cursor_made_from_another_accounts_row_shows_only_ones_own(
    api: Api, accounts: dict[str, tuple[str, list[str]]]
) -> None:
    key_a, ids_a = accounts["pages-a"]
    key_b, ids_b = accounts["pages-b"]
    a_cursor = get(api, key_a, limit=1, all="true").headers["x-next-cursor"]  # after i-pa7
    from_a = get(api, key_b, cursor=a_cursor, all="true", limit=500)
    assert [i["id"] for i in from_a.json()] == ids_b[1:]  # B's rows after (1004, "i-pa7")
    forged = get(api, key_b, cursor=_b64("9999:i-pa9"), all="true")
    assert [i["id"] for i in forged.json()] == ids_b
    for answer in (from_a, forged, get(api, key_b, all="true", limit=1)):
        assert not any(i in answer.text for i in ids_a)
        assert not any(i in answer.headers.get("link", "") for i in ids_a)


def test_the_client_follows_every_page_or_stops_at_its_limit(
    api: Api, accounts: dict[str, tuple[str, list[str]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    key, everything = accounts["pages-a"]
    shown = [i for i in everything if i != "i-pa4"]
    with client_api.Client(api.url, key.removeprefix("Bearer ")) as user:
        pages = list(user.instance_pages(page_size=2))
        assert [len(p) for p in pages] == [2, 2, 2]
        monkeypatch.setattr(client_api, "PAGE_MAX", 2)  # every list is several pages
        assert [i["id"] for i in user.instances()] == shown
        assert [i["id"] for i in user.instances(include_deleted=True)] == everything
        assert [i["id"] for i in user.instances(limit=3)] == shown[:3]
        assert [i["id"] for i in user.instances(statuses=["failed"])] == ["i-pa7", "i-pa3"]
        with pytest.raises(InvalidRequest):
            user.instances(limit=0)


@pytest.fixture
def cli(api: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("LOWCOSTGPU_URL", api.url)
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.delenv("LOWCOSTGPU_ADMIN_KEY", raising=False)
    return CliRunner()


def ls(cli: CliRunner, *args: str) -> list[str]:
    result = cli.invoke(app, ["ls", "--json", *args])
    assert result.exit_code == 0, result.output
    return [i["id"] for i in json.loads(result.output)]


def test_ls_shows_every_page_and_passes_limit_and_status(
    api: Api,
    accounts: dict[str, tuple[str, list[str]]],
    cli: CliRunner,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key, everything = accounts["pages-a"]
    shown = [i for i in everything if i != "i-pa4"]
    monkeypatch.setenv("LOWCOSTGPU_API_KEY", key.removeprefix("Bearer "))
    monkeypatch.setattr(client_api, "PAGE_MAX", 2)
    assert ls(cli) == shown
    assert ls(cli, "--all") == everything
    assert ls(cli, "--limit", "3") == shown[:3]
    assert ls(cli, "--status", "stopped", "--status", "failed") == [
        "i-pa7",
        "i-pa6",
        "i-pa3",
        "i-pa2",
    ]
    assert ls(cli, "--status", "succeeded,deleted", "--limit", "2") == ["i-pa5", "i-pa4"]
    table = cli.invoke(app, ["ls"])
    assert table.exit_code == 0 and all(i in table.output for i in shown)
    bad = cli.invoke(app, ["ls", "--status", "nope"])
    assert bad.exit_code == 2 and "unknown status nope" in bad.output
