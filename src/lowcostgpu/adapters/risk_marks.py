"""What one node provider process did with `MarkNodeRisk` (`core.effects`): shared by the
Kubernetes and Slurm providers, which mark a node differently but order and own marks alike.

- Order: the outbox retries a failed entry after later ones have been carried out, so a late
  "next" must not undo a later clear: a mark older than the node's latest is skipped.
- Ownership: the warned set is not stored (`core.risk`), so a new leader would never clear the
  marks an earlier process left; at its first look a provider clears every mark on a node this
  process has not marked itself.

Soft, per process; a node is forgotten when it is removed, so the state is O(live nodes).
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


class RiskMarks:
    def __init__(self) -> None:
        self._at: dict[str, int] = {}  # node id → its latest mark's time
        self.checked = False  # the first look (stale marks cleared) is done

    def latest(self, node_id: str, at: int) -> bool:
        """Whether a mark of `at` is not older than the node's last one (then it is the last)."""
        if at < self._at.get(node_id, at):
            log.info("risk mark of %s at %d: a later one was carried out already", node_id, at)
            return False
        self._at[node_id] = at
        return True

    def ours(self, node_id: str | None) -> bool:
        """Whether this process carried out a mark of the node (else one found is stale)."""
        return node_id in self._at

    def forget(self, node_id: str) -> None:
        self._at.pop(node_id, None)
