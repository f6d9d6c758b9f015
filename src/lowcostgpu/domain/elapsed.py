"""The one way elapsed time is written: mm:ss, or h:mm:ss once past an hour (`00:18`, `3:12:00`).

Why one function: the live timeline (`cli.timeline`) and the simulated demo (`bootstrap.demo`)
once printed `# 03:12` meaning mm:ss in one and hh:mm in the other. Both layers may import this.
"""

from __future__ import annotations


def elapsed(seconds: int) -> str:
    """`00:18`, `59:59`, `1:00:00`, `27:46:40`; a negative span (clock skew) is `00:00`."""
    seconds = max(0, seconds)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"
