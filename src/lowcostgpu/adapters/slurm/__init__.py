"""The Slurm runtime (`--runtime slurm`): runs as Slurm jobs, cluster nodes as Slurm nodes."""

from lowcostgpu.adapters.slurm.cli import Slurm
from lowcostgpu.adapters.slurm.nodes import SlurmNodes
from lowcostgpu.adapters.slurm.runtime import SlurmRuntime

__all__ = ["Slurm", "SlurmNodes", "SlurmRuntime"]
