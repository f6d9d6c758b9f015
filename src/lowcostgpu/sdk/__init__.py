"""The workload side: checkpoint and resume on preemptible capacity.

Imports nothing of the control plane: it reads only the workload contract (environment, SIGTERM,
the metadata endpoint). PyTorch helpers live in `lowcostgpu.sdk.torch` (and, for jobs of several
processes, `lowcostgpu.sdk.torch_distributed`), imported only on demand.
"""

from lowcostgpu.sdk.batch import BatchProgress
from lowcostgpu.sdk.checkpoint import Checkpointer, CheckpointInfo
from lowcostgpu.sdk.env import WorkloadEnv, WorkloadEnvError
from lowcostgpu.sdk.metadata import MetadataClient
from lowcostgpu.sdk.notice import StopNotice, install_sigterm_handler, should_stop

__all__ = [
    "BatchProgress",
    "CheckpointInfo",
    "Checkpointer",
    "MetadataClient",
    "StopNotice",
    "WorkloadEnv",
    "WorkloadEnvError",
    "install_sigterm_handler",
    "should_stop",
]
