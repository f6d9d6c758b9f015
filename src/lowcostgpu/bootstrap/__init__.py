"""Wiring: the one place that knows every adapter."""
