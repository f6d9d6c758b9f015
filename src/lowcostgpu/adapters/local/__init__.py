"""The embedded default runtime: workloads as real process groups, volumes as real directories.

`LocalRuntime` runs each workload through a shim (`shim.py`) that outlives the control plane;
`LocalVolumes` keeps volumes under the data directory, size-limited by loop-mounted ext4 images
when this process may mount them.
"""

from lowcostgpu.adapters.local.runtime import LocalRuntime
from lowcostgpu.adapters.local.volumes import LocalVolumes

__all__ = ["LocalRuntime", "LocalVolumes"]
