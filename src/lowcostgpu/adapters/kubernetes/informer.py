"""A watch-fed cache of our workload pods: one LIST, then a watch from its resourceVersion.

`observe` runs every loop tick; with the cache it reads memory instead of listing the namespace.
The watch resumes from the last resourceVersion it saw (bookmarks keep it fresh); when the server
has compacted that version away (410 Gone) the cache lists again. Any other failure marks the
cache unsynced, and the runtime lists directly until it has caught up: the cache only ever saves
calls, it never decides. `on_change` lets the control plane's loop wake at once when a pod
changes (a pod that ended, a drain that finished) instead of at its next poll.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from lowcostgpu.adapters.kubernetes.client import Kube

log = logging.getLogger(__name__)
WATCH_TIMEOUT_S = 30  # the server ends each watch after this; it is resumed at once
RETRY_S = 1.0


class PodCache:
    def __init__(
        self,
        kube: Kube,
        namespace: str,
        label_selector: str,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.kube, self.namespace, self.label_selector = kube, namespace, label_selector
        self.on_change = on_change
        self._pods: dict[str, Any] = {}
        self._forgotten: set[str] = set()  # dropped by the runtime; ignored until DELETED
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._watch: watch.Watch | None = None
        self._thread = threading.Thread(target=self._run, name="k8s-pod-watch", daemon=True)

    def start(self) -> PodCache:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop following; the thread (a daemon) ends at the watch's next event or timeout."""
        self._stop.set()
        self._synced.clear()
        if self._watch is not None:
            self._watch.stop()  # type: ignore[no-untyped-call]

    def pods(self) -> list[Any] | None:
        """The pods as last seen, or None while the cache is not in sync (list instead)."""
        if not self._synced.is_set():
            return None
        with self._lock:
            return list(self._pods.values())

    def forget(self, name: str) -> None:
        """The runtime released this pod: it is gone for observers now, not at its DELETED."""
        with self._lock:
            self._forgotten.add(name)
            self._pods.pop(name, None)

    def wait_synced(self, timeout_s: float) -> bool:
        return self._synced.wait(timeout_s)

    def _run(self) -> None:
        version: str | None = None
        while not self._stop.is_set():
            try:
                version = self._follow(version or self._relist())
            except ApiException as exc:
                if exc.status == 410:  # compacted away: list again
                    log.info("pod watch: resourceVersion expired, listing again")
                else:
                    log.warning("pod watch failed (%s), listing again in %s s", exc.status, RETRY_S)
                    self._synced.clear()
                    self._stop.wait(RETRY_S)
                version = None
            except Exception as exc:  # the server is down or the connection broke
                if self._stop.is_set():
                    return
                log.warning("pod watch failed (%s), listing again in %s s", exc, RETRY_S)
                self._synced.clear()
                version = None
                self._stop.wait(RETRY_S)

    def _relist(self) -> str:
        found: Any = self.kube.core.list_namespaced_pod(
            self.namespace, label_selector=self.label_selector, _request_timeout=self.kube.timeout_s
        )
        with self._lock:
            self._pods = {
                p.metadata.name: p for p in found.items if p.metadata.name not in self._forgotten
            }
        self._synced.set()
        self._changed()
        return str(found.metadata.resource_version)

    def _follow(self, version: str) -> str:
        """Watch from `version` until the server ends the watch; the last version seen."""
        self._watch = watch.Watch()  # type: ignore[no-untyped-call]
        for event in self._watch.stream(  # type: ignore[no-untyped-call]
            self.kube.core.list_namespaced_pod,
            self.namespace,
            label_selector=self.label_selector,
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=WATCH_TIMEOUT_S,
        ):
            if event["type"] == "BOOKMARK":  # only a newer resourceVersion (kept by the Watch)
                version = self._watch.resource_version or version
                continue
            pod = event["object"]
            version = pod.metadata.resource_version or version
            name = pod.metadata.name
            with self._lock:
                if event["type"] == "DELETED":
                    self._pods.pop(name, None)
                    self._forgotten.discard(name)
                elif name not in self._forgotten:
                    self._pods[name] = pod
            self._changed()
            if self._stop.is_set():
                break
        return version

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()
