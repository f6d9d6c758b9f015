"""A Slurm node's preemption-risk mark: its `Comment` (Slurm 22.05 has a free-text comment per
node, shown by `scontrol show node` and `sinfo -N -O NodeList,Comment`).

The core emits `MarkNodeRisk` for a preemptible cluster node among the next victims of on-demand
reclaims, and again with no risk when the pressure ends (`core.risk`); `sinfo -N -O
NodeList,Comment:80` lists the marked nodes. The comment, rather than
a node feature, carries it because features change where Slurm schedules jobs, and advice must
not. A comment the site wrote itself (not starting with `RISK_PREFIX`) is never overwritten or
cleared: the mark is then only in the event. Every call is idempotent: the node is read first,
and written only when its comment differs. Cost: one `sinfo` per call, plus one
`scontrol update` when the comment changes.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from lowcostgpu.adapters.slurm.cli import Slurm

log = logging.getLogger(__name__)
RISK_PREFIX = "lowcostgpu: preemption-risk="


def risk_comment(risk: str, at: int) -> str:
    """The comment of a node warned at `at`: what and since when (UTC)."""
    since = datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"{RISK_PREFIX}{risk} since={since}"


def set_risk_comment(slurm: Slurm, host: str, risk: str, at: int) -> None:
    """Mark `host` (`risk` "next") or clear our mark (`risk` "")."""
    current = slurm.node_comment(host)
    if current and not current.startswith(RISK_PREFIX):
        log.info("Slurm node %s keeps the site's comment %r: no risk mark there", host, current)
        return
    wanted = risk_comment(risk, at) if risk else ""
    if wanted == current:
        return
    what = f"{'marking' if risk else 'unmarking'} Slurm node {host} at risk of reclaim"
    slurm.update("NodeName", {"NodeName": host, "Comment": wanted}, what=what)
