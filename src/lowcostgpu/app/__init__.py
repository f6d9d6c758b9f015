"""The reconcile loop.

Read now once, decide with the core, write with expected versions, then act through the outbox.
"""
