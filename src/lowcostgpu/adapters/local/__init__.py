"""The embedded default runtime: workloads as real process groups, volumes as real directories.

`LocalRuntime` runs each workload through a shim (`shim.py`) that outlives the control plane;
`LocalVolumes` keeps volumes under the data directory, size-limited by loop-mounted ext4 images
when this process may mount them; `PlaceholderNodes` stands for each cluster node by a
placeholder workload.
"""

from lowcostgpu.adapters.local.placeholder_nodes import PLACEHOLDER_ARGV, PlaceholderNodes
from lowcostgpu.adapters.local.runtime import LocalRuntime
from lowcostgpu.adapters.local.volumes import LocalVolumes

__all__ = ["PLACEHOLDER_ARGV", "LocalRuntime", "LocalVolumes", "PlaceholderNodes"]
