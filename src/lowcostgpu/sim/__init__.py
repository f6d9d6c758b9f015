"""The fleet simulator: a virtual clock driving the same app and core."""
