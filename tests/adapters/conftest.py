"""Fixtures for the Kubernetes tests (tests/adapters/kubernetes): a real kube-apiserver for the
session, a client, a fresh namespace, the fake kubelet.

They live here, one level up, rather than in a conftest.py next to those tests: the runtime
suite imports its own `conftest` by name, and a sibling conftest module could shadow it."""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "kubernetes"))  # apiserver.py, kubelet.py
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
