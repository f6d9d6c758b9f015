"""What a simulation run saw: the records `sim.runner` returns and `sim.metrics` reads."""

from __future__ import annotations

from dataclasses import dataclass, field

from lowcostgpu.core.credits import LostWorkCredit
from lowcostgpu.core.lifecycle import InstanceState
from lowcostgpu.domain.capacity import CapacityClass
from lowcostgpu.sim.eta import EtaLog
from lowcostgpu.sim.jobs import Trace
from lowcostgpu.sim.reclaims import ReclaimLosses
from lowcostgpu.sim.risk_figures import WarningLog
from lowcostgpu.sim.workload import Workload


@dataclass(frozen=True, slots=True)
class Sample:
    at: int
    on_demand_gpus: int
    preemptible_gpus: int
    queued: int
    waiting_on_demand: int


@dataclass(slots=True)
class SimResult:
    """Everything the run saw; `metrics.summarise` turns it into figures."""

    trace: Trace
    policy: str
    end_s: int
    workloads: dict[str, Workload]
    instances: dict[str, InstanceState]  # final instance states, live and archived
    samples: list[Sample]
    busy_gpu_s: dict[CapacityClass, int]
    rejected: dict[str, str] = field(default_factory=dict)
    events: int = 0
    engine_calls: int = 0
    min_runtime_s: int = 300
    reclaims: ReclaimLosses = field(default_factory=ReclaimLosses)
    etas: EtaLog = field(default_factory=EtaLog)  # the ETAs queued jobs were given (`sim.eta`)
    # What `--credit-lost-work` would credit at each drained run's end (`core.credits`, as the
    # server), and what those victims truly lost (their work since their last save, at the notice).
    lost_work_credits: list[LostWorkCredit] = field(default_factory=list)
    credited_true_loss_gpu_s: int = 0
    warnings: WarningLog = field(default_factory=WarningLog)  # `sim.risk_figures`
