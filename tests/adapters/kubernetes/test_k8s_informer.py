"""The watch-fed pod cache: in sync after one LIST, follows changes from its resourceVersion,
wakes its owner, and catches up after the API server itself was killed and restarted."""

from __future__ import annotations

import threading

from apiserver import ApiServer

from lowcostgpu.adapters.kubernetes import Kube
from lowcostgpu.adapters.kubernetes.informer import PodCache
from lowcostgpu.adapters.kubernetes.objects import selector
from waiting import wait_until


def labelled_pod(name: str) -> dict[str, object]:
    labels = dict(part.split("=") for part in selector("workload").split(","))
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }


def names(cache: PodCache) -> set[str] | None:
    pods = cache.pods()
    return None if pods is None else {p.metadata.name for p in pods}


def test_the_cache_follows_creations_and_deletions_and_wakes_its_owner(
    kube: Kube, namespace: str
) -> None:
    kube.core.create_namespaced_pod(namespace, labelled_pod("before"))
    kube.core.create_namespaced_pod(
        namespace, {**labelled_pod("other"), "metadata": {"name": "other"}}
    )
    woken = threading.Event()
    cache = PodCache(kube, namespace, selector("workload"), on_change=woken.set).start()
    try:
        assert cache.wait_synced(10)
        assert names(cache) == {"before"}  # the selector: not the unlabelled pod
        woken.clear()
        kube.core.create_namespaced_pod(namespace, labelled_pod("after"))
        wait_until(lambda: names(cache) == {"before", "after"}, what="the new pod in the cache")
        assert woken.is_set()
        kube.core.delete_namespaced_pod("before", namespace, grace_period_seconds=0)
        wait_until(lambda: names(cache) == {"after"}, what="the deletion in the cache")
    finally:
        cache.stop()


def test_the_cache_catches_up_after_the_api_server_was_killed(
    k8s: ApiServer, kube: Kube, namespace: str
) -> None:
    cache = PodCache(kube, namespace, selector("workload")).start()
    try:
        assert cache.wait_synced(10)
        k8s.kill_apiserver()
        try:
            wait_until(lambda: cache.pods() is None, 30, "the cache out of sync")
        finally:
            k8s.start_apiserver()
        kube.core.create_namespaced_pod(namespace, labelled_pod("while-away"))
        wait_until(lambda: names(cache) == {"while-away"}, 30, "the cache in sync again")
    finally:
        cache.stop()
