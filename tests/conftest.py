"""Settings for the whole suite, and the folder of the shared test helpers (`waiting`) on the path.

pytest puts the folder of each conftest.py first on `sys.path` (rootdir import mode "prepend"),
so every test folder can `from waiting import wait_until`.

Hypothesis: no per-example deadline and no "too slow" health check. Both measure wall time,
which on a loaded machine (CI, the suite run under `scripts/test-under-load`) says nothing about
the code: they failed tests that are correct. What a property checks is never its speed.

pytest-xdist: `make unit` runs the suite on two workers (`-n 2`: most tests wait on servers,
processes and browsers, not on the CPU), in any order. So every test keeps to its own temporary
folder, ports, database or schema; a test that looks for processes machine-wide knows its own by
its folder or instance ids; and each worker starts its own session services (a Slurm lab,
`slurm_lab.py`; a kube-apiserver, `adapters/kubernetes/apiserver.py`) on ports of its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("lowcostgpu", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("lowcostgpu")


def _slurm_outputs() -> set[str]:
    return {p.name for p in Path.cwd().glob("slurm-*.out")}


@pytest.fixture(autouse=True)
def no_slurm_output_in_the_working_directory() -> Iterator[None]:
    """A Slurm job submitted without `--output` writes `slurm-<job id>.out` into the directory it
    was submitted from (here the repository): every job a test makes writes in its own folder.
    Fails the test after which such a file appeared (with two workers, or the one beside it)."""
    before = _slurm_outputs()
    yield
    new = _slurm_outputs() - before
    assert not new, f"a Slurm job wrote {sorted(new)} into {Path.cwd()}: give it --output"


# The folders of the longest tests (a server killed and restarted, a training run, a bill that
# waits for the meter's minute): run first, so that on two workers they are done while the many
# short tests still keep the other worker busy, instead of one of them running on alone at the end.
FIRST = ("e2e", "templates")


def _rank(item: pytest.Item) -> int:
    parts = item.path.relative_to(item.config.rootpath).parts
    folder = parts[1] if len(parts) > 2 and parts[0] == "tests" else ""
    return FIRST.index(folder) if folder in FIRST else len(FIRST)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_rank)  # stable: each file's tests stay together and in order
