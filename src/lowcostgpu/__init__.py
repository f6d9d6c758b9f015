"""lowcostgpu: a control plane for preemptible GPU compute on a fleet its operator owns."""

__version__ = "0.1.0"
