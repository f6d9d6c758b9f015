"""Settings for the whole suite, and the folder of the shared test helpers (`waiting`) on the path.

pytest puts the folder of each conftest.py first on `sys.path` (rootdir import mode "prepend"),
so every test folder can `from waiting import wait_until`.

Hypothesis: no per-example deadline and no "too slow" health check. Both measure wall time,
which on a loaded machine (CI, the suite run under `scripts/test-under-load`) says nothing about
the code: they failed tests that are correct. What a property checks is never its speed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("lowcostgpu", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("lowcostgpu")


# --- pytest-xdist: what must share one worker -------------------------------------------------
# `make unit` runs the suite on two workers (`-n 2 --dist loadgroup`: most tests wait on
# processes, servers and browsers, not on the CPU). Two kinds of test use a service of the whole
# session, and each kind is kept on one worker, in order, as in a serial run:
# - "slurm": the session's Slurm lab (`slurm_lab.shared()`); a second worker's lab would look for
#   a free port base at the same moment and could take the same one;
# - "kubernetes": the session's kube-apiserver and etcd (one per worker would be two of each).
# Every other test keeps to its own temporary folder, ports, database or schema, and processes
# (a test that looks for processes machine-wide knows its own by its folder or instance ids).
# Without xdist the marks change nothing.


def xdist_group_of(item: pytest.Item) -> str | None:
    """The group `item` must run in on one worker, or None: any worker will do."""
    path = Path(str(item.path))
    harness = getattr(getattr(item, "callspec", None), "params", {}).get("harness")
    if "slurm" in path.parts or path.stem.endswith("_slurm") or harness == "slurm":
        return "slurm"
    if "kubernetes" in path.parts or "k8s" in item.fixturenames or harness == "kubernetes":
        return "kubernetes"
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        group = xdist_group_of(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
