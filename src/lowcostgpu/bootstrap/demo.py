"""`lowcostgpu demo`: the seed scenario, played by the real engine on a virtual clock.

The product page's terminal session — launch an interruptible fine-tune, an on-demand request
reclaims its GPUs at 3:12:00, it checkpoints and requeues, capacity frees at 3:57:00 and it resumes
from step 4200, the run finishes and is billed — is played on the shipped catalog and demo fleet
through `core.engine`, the same decisions the server takes. Workloads are simulated (no process is
started); what is printed comes from the events and the meter, not from a script of strings.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from lowcostgpu.adapters.files import load_catalog, load_fleet
from lowcostgpu.core import engine
from lowcostgpu.core.effects import EmitEvent, StartWorkload
from lowcostgpu.core.engine import EngineState, EngineStep, LaunchSpec
from lowcostgpu.core.lifecycle import (
    CheckpointReported,
    CompletionReported,
    WorkloadExited,
    WorkloadStarted,
)
from lowcostgpu.core.metering import instance_gpu_spans, meter, volume_span
from lowcostgpu.core.rating import build_invoice
from lowcostgpu.core.snapshot import FleetSnapshot
from lowcostgpu.domain.capacity import CapacityClass, PoolKey
from lowcostgpu.domain.catalog import Catalog
from lowcostgpu.domain.elapsed import elapsed
from lowcostgpu.domain.events import Reason

INSTANCE = "i-b3e19d02"
ACCOUNT = "acct-demo"
POOL = PoolKey("eu-west", "a100-sxm4")
MINUTE, HOUR = 60, 3600


@dataclass
class Demo:
    catalog: Catalog
    state: EngineState
    say: Callable[[str], None]
    now: int = 0
    seen: dict[Reason, EmitEvent] = field(default_factory=dict)

    def apply(self, step: EngineStep) -> None:
        self.state = step.state
        for effect in step.effects:
            if isinstance(effect, EmitEvent) and effect.object_id == INSTANCE:
                self.say(f"  {elapsed(effect.at):>8}  {effect.reason:<18} {effect.message}")
                self.seen[effect.reason] = effect
            if isinstance(effect, StartWorkload):
                # The simulated workload comes up as soon as it is told to start.
                self.apply(
                    engine.report(self.state, effect.subject_id, WorkloadStarted(), self.now)
                )

    def at(self, seconds: int) -> Demo:
        self.now = seconds
        self.apply(engine.tick(self.state, seconds))
        return self


def run_demo(say: Callable[[str], None], fleet: Path | None = None) -> None:
    catalog = load_catalog()
    demo = Demo(catalog, EngineState(FleetSnapshot.build(load_fleet(fleet, catalog))), say)
    rate = catalog.gpu(POOL.gpu_type).interruptible_per_gpu_hour
    say("$ lowcostgpu launch --gpu a100-sxm4 --type interruptible --template axolotl \\")
    say("    --volume ckpts:50GB")
    spec = LaunchSpec(INSTANCE, POOL, 1, CapacityClass.INTERRUPTIBLE, ACCOUNT)
    demo.apply(engine.launch(demo.state, spec, 0))
    say(f"✓ instance {INSTANCE} running · {rate}/hr")
    for step_no, minute in ((1400, 64), (2800, 128), (4200, 190)):
        demo.at(minute * MINUTE).apply(
            engine.report(demo.state, INSTANCE, CheckpointReported(step_no), minute * MINUTE)
        )
    # 3:12:00: an on-demand customer needs all 8 A100s of the host; ours holds one of them.
    od = LaunchSpec("i-ondemand1", POOL, 8, CapacityClass.ON_DEMAND, "acct-other")
    demo.at(192 * MINUTE).apply(engine.launch(demo.state, od, demo.now))
    demo.at(192 * MINUTE + 40).apply(
        engine.report(demo.state, INSTANCE, WorkloadExited(143), demo.now)
    )
    interrupted = demo.seen[Reason.INTERRUPTED]
    say(f"# {elapsed(interrupted.at)} {interrupted.message}")
    # 3:57:00: the on-demand work ends; capacity is free, the instance restarts from its volume.
    demo.at(237 * MINUTE).apply(
        engine.report(demo.state, "i-ondemand1", WorkloadExited(0), demo.now)
    )
    restarted = demo.seen[Reason.RESTARTED]
    resumed = restarted.data["resume_step"]
    say(f"# {elapsed(restarted.at)} capacity free — auto-restarted, resumed {resumed}")
    end = 237 * MINUTE + 372 * MINUTE
    demo.at(end).apply(engine.report(demo.state, INSTANCE, CompletionReported(9000), end))
    demo.apply(engine.report(demo.state, INSTANCE, WorkloadExited(0), end))
    _bill(demo, end, say)


def _bill(demo: Demo, end: int, say: Callable[[str], None]) -> None:
    inst = demo.state.instance(INSTANCE)
    spans = instance_gpu_spans(inst)
    records = meter(spans, {}, end + HOUR, 60)
    gpu_hours = sum(r.quantity_s for r in records) / HOUR
    invoice = build_invoice(ACCOUNT, records, demo.catalog, 0, end + HOUR)
    say(f"✓ run finished · {gpu_hours:.1f} GPU-hrs · ${invoice.total.amount}")
    volume = meter([volume_span("ckpts", ACCOUNT, 50, 0, end)], {}, end + HOUR, 60)
    storage = build_invoice(ACCOUNT, volume, demo.catalog, 0, end + HOUR)
    say("")
    say("Invoice lines (exact amount → rounded half-even at the line):")
    for line in invoice.lines + storage.lines:
        saved = f" (saved ${line.savings.amount} vs on-demand)" if line.kind == "gpu" else ""
        say(f"  {line.description} = {line.amount_exact} → ${line.amount.amount}{saved}")
