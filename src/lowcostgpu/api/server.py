"""Running the API server: the control plane built by `bootstrap`, its loop, and uvicorn."""

from __future__ import annotations

import threading
from collections.abc import Callable

from lowcostgpu.api.app import create_app
from lowcostgpu.bootstrap.serve import ServeOptions, build


def serve(options: ServeOptions, say: Callable[[str], None]) -> None:
    import uvicorn

    wired, loop, runtime = build(options)
    thread = threading.Thread(target=loop.run, name="reconcile-loop", daemon=True)
    thread.start()
    api = create_app(wired.plane, runtime, wired.tokens, lambda: loop.leading)
    say(f"lowcostgpu is serving at {options.url} (data in {options.data_dir})")
    say("Try:")
    say(
        f"  curl -s -X POST {options.url}/v1/instances -H 'content-type: application/json' "
        """-d '{"gpu": "a100-sxm4", "type": "interruptible", "template": "pytorch", """
        """"volume": "ckpts:1GB"}'"""
    )
    say(f"  curl -s {options.url}/v1/instances")
    try:
        uvicorn.run(api, host=options.host, port=options.port, log_level="warning")
    finally:
        loop.stop()
        thread.join(timeout=10)
        wired.plane.store.close()
