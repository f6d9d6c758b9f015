"""Fixtures on a real kube-apiserver: a client, a fresh namespace, the fake kubelet."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

import pytest
from apiserver import ApiServer, require
from kubelet import FakeKubelet

from lowcostgpu.adapters.kubernetes import Kube

_serial = itertools.count(1)


@pytest.fixture(scope="session")
def k8s() -> ApiServer:
    return require()


@pytest.fixture
def kube(k8s: ApiServer) -> Iterator[Kube]:
    client = Kube.from_kubeconfig(k8s.kubeconfig)
    yield client
    client.close()


@pytest.fixture
def namespace(kube: Kube) -> str:
    name = f"t{os.getpid()}-{next(_serial)}"
    kube.core.create_namespace({"metadata": {"name": name}})
    return name


@pytest.fixture
def kubelet(kube: Kube) -> Iterator[FakeKubelet]:
    fake = FakeKubelet(kube.api).start()
    yield fake
    fake.stop()
