"""The workload side: checkpoint and resume on preemptible capacity.

Imports nothing of the control plane: it reads only the workload contract (environment, SIGTERM,
the metadata endpoint).
"""
