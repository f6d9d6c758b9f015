"""Screenshots of the console's main pages for the docs, from a real seeded server.

    .venv/bin/python scripts/console_screenshots.py [--out docs/console] [--only volumes,...]

Starts a throw-away control plane (temp directory, SQLite, the local runtime; an A100 host and
an H100 host), plays the seed session in one account — a real `pytorch` run checkpoints, an
on-demand launch reclaims its GPU, it resumes from its checkpoint and finishes — adds a cluster,
a webhook with a local receiver and some queued work, waits for the meter, and photographs the
pages in Debian's Chromium (`/usr/bin/chromium`) with Playwright, at 1280 px and, for the
`narrow-420` shot, in a 420 px window (a phone). Takes about two minutes.
"""

from __future__ import annotations

import argparse
import secrets
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import sync_playwright

from lowcostgpu.api.server import Running, start
from lowcostgpu.bootstrap.serve import ServeOptions
from lowcostgpu.client.api import Client

FLEET = """
[[region]]
name = "eu-west"
  [[region.hosts]]
  name = "a100-box"
  gpu_type = "a100-sxm4"
  gpus = 1
  [[region.hosts]]
  name = "h100-box"
  gpu_type = "h100-sxm"
  gpus = 4
"""
TRAIN_ARGS = ["--steps", "120", "--every-steps", "20", "--step-delay-s", "0.1"]
PAGES = [  # (file, who, fragment, selector to wait for)
    ("instances", "customer", "#/instances", "#instances"),
    ("volumes", "customer", "#/volumes", "#volumes"),
    ("instance", "customer", "#/instances/{seed}", "svg.timeline"),
    ("cluster", "customer", "#/clusters/{cluster}", "#nodes"),
    ("events", "customer", "#/events", "#events"),
    ("webhook", "customer", "#/webhooks/{webhook}", "#deliveries"),
    ("billing", "customer", "#/billing", "#bill"),
    ("fleet", "operator", "#/fleet", "#pools"),
]
NARROW = ("narrow-420", "customer", "#/instances", "#instances")  # a 420 px window
NARROW_PX = 420


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *_: Any) -> None:
        pass


def seed(running: Running, admin_key: str) -> dict[str, str]:
    """Plays the seed session and adds the rest; the ids and keys the pages need."""
    receiver = ThreadingHTTPServer(("127.0.0.1", free_port()), Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    with Client(running.url, admin_key) as admin:
        acme = admin.create_account("acme-research")
        admin.topup(acme["id"], "25.00")
        other = admin.create_account("beta-labs")
        admin.topup(other["id"], "10.00")
    key = acme["api_key"]
    with Client(running.url, key) as api:
        hook = api.create_webhook(
            f"http://127.0.0.1:{receiver.server_port}/hooks",
            ["Preempted", "Interrupted", "Restarted", "Succeeded"],
        )
        run = api.launch(
            gpu="a100-sxm4",
            type="interruptible",
            template="pytorch",
            command=TRAIN_ARGS,
            volume="ckpts:1GB",
            grace_period_s=10,
        )
        cluster = _post(
            running.url,
            key,
            "/v1/clusters",
            {
                "gpu": "h100-sxm",
                "gpus_per_node": 1,
                "standard_nodes": 1,
                "desired_preemptible_gpus": 2,
            },
        )
        reclaimed = False
        while (inst := api.instance(run["id"]))["status"] != "succeeded":
            if not reclaimed and (inst["last_checkpoint_step"] or 0) >= 40:
                api.launch(gpu="a100-sxm4", type="on-demand", command=["sleep", "6"])
                reclaimed = True
            time.sleep(0.5)
        httpx.patch(
            f"{running.url}/v1/clusters/{cluster['id']}",
            json={"desired_preemptible_gpus": 1},
            headers={"authorization": f"Bearer {key}"},
        ).raise_for_status()
        api.launch(gpu="h100-sxm", type="interruptible", command=["sleep", "600"], gpus=2)
        api.launch(gpu="h100-sxm", type="interruptible", command=["sleep", "600"], gpus=2)
        api.launch(
            gpu="a100-sxm4", type="interruptible", command=["sleep", "600"], volume="data:50GB"
        )
        api.launch(gpu="h100-sxm", type="interruptible", command=["true"], volume="scratch:20GB")
        ended = max(e["at"] for e in api.timeline(run["id"]))
        while (api.usage(run["id"])["metered_through"] or 0) < ended:
            time.sleep(1)  # the meter closes the run's last interval (at most a minute)
    return {"key": key, "seed": run["id"], "cluster": cluster["id"], "webhook": hook["id"]}


def _post(url: str, key: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    answer = httpx.post(f"{url}{path}", json=body, headers={"authorization": f"Bearer {key}"})
    answer.raise_for_status()
    return dict(answer.json())


def photograph(
    url: str, keys: dict[str, str], ids: dict[str, str], out: Path, only: set[str] | None = None
) -> None:
    out.mkdir(parents=True, exist_ok=True)
    shots = [(1280, [p for p in PAGES if only is None or p[0] in only])]
    if only is None or NARROW[0] in only:
        shots.append((NARROW_PX, [NARROW]))
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        for (width, pages), who in ((s, w) for s in shots for w in ("customer", "operator")):
            if not any(owner == who for _, owner, _, _ in pages):
                continue
            page = browser.new_page(viewport={"width": width, "height": 860}, device_scale_factor=1)
            page.goto(f"{url}/console/")
            page.fill("input[name=key]", keys[who])
            page.click("button[type=submit]")
            page.wait_for_selector("nav a.active")
            for name, owner, fragment, selector in pages:
                if owner != who:
                    continue
                page.goto(f"{url}/console/{fragment.format(**ids)}")
                page.wait_for_selector(selector)
                page.wait_for_timeout(600)
                page.screenshot(path=str(out / f"{name}.png"), full_page=name != "events")
                print(f"wrote {out / name}.png")
            page.close()
        browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/console"))
    parser.add_argument("--only", help="comma-separated shots to take (default: every one)")
    args = parser.parse_args()
    only = set(args.only.split(",")) if args.only else None
    tmp = Path(tempfile.mkdtemp(prefix="lowcostgpu-shots-"))
    (tmp / "fleet.toml").write_text(FLEET)
    admin_key = "lcg_admin_" + secrets.token_urlsafe(24)
    options = ServeOptions(
        data_dir=tmp / "data",
        fleet=tmp / "fleet.toml",
        port=free_port(),
        admin_key=admin_key,
        allow_private_webhooks=True,
    )
    running = start(options)
    try:
        ids = seed(running, admin_key)
        keys = {"customer": ids["key"], "operator": admin_key}
        photograph(running.url, keys, ids, args.out, only)
    finally:
        runtime = running.wired.plane.runtime
        for report in runtime.observe():
            runtime.kill(report.allocation_id)
        running.stop()
        subprocess.run(
            ["sh", "-c", f"grep -F '{tmp}' /proc/mounts | cut -d' ' -f2 | xargs -r umount"],
            check=False,
        )
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
