"""Implementations of the ports: stores, runtimes, the real clock.

The only place that reads wall time.
"""
