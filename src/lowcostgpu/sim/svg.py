"""Hand-written inline SVG charts: the report works offline, with no library and no script."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

W, H, PAD_L, PAD_B, PAD_T, PAD_R = 640, 240, 56, 30, 14, 12
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2")


def _frame(title: str, y_max: float, x_label: str) -> list[str]:
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
        f'role="img" aria-label="{escape(title)}">',
        f'<rect x="{PAD_L}" y="{PAD_T}" width="{W - PAD_L - PAD_R}" '
        f'height="{H - PAD_T - PAD_B}" fill="none" stroke="#999"/>',
        f'<text x="{PAD_L}" y="{H - 8}" font-size="11">{escape(x_label)}</text>',
    ]
    for frac in (0, 0.5, 1):
        y = H - PAD_B - frac * (H - PAD_T - PAD_B)
        parts.append(
            f'<text x="{PAD_L - 4}" y="{y + 4:.1f}" font-size="10" text-anchor="end">'
            f"{_num(y_max * frac)}</text>"
        )
    return parts


def _num(value: float) -> str:
    if value >= 1000:
        return f"{value / 1000:.1f}k"
    return f"{value:.3g}"


def _legend(names: Sequence[str]) -> list[str]:
    return [
        f'<text x="{PAD_L + 8 + 130 * i}" y="{PAD_T + 14}" font-size="11" '
        f'fill="{COLOURS[i % len(COLOURS)]}">■ {escape(name)}</text>'
        for i, name in enumerate(names)
    ]


def line_chart(
    title: str, xs: Sequence[float], series: dict[str, Sequence[float]], x_label: str
) -> str:
    """Lines over a shared x axis (e.g. time in days)."""
    y_max = max((max(v, default=0) for v in series.values()), default=0) or 1
    x_min, x_max = (min(xs), max(xs)) if xs else (0, 1)
    span = (x_max - x_min) or 1
    parts = _frame(title, y_max, x_label)
    inner_w, inner_h = W - PAD_L - PAD_R, H - PAD_T - PAD_B
    for i, values in enumerate(series.values()):
        points = " ".join(
            f"{PAD_L + (x - x_min) / span * inner_w:.1f},{H - PAD_B - v / y_max * inner_h:.1f}"
            for x, v in zip(xs, values, strict=False)
        )
        colour = COLOURS[i % len(COLOURS)]
        parts.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="1.2" points="{points}"/>'
        )
    parts += _legend(list(series))
    parts.append("</svg>")
    return "".join(parts)


def bar_chart(title: str, bars: dict[str, dict[str, float]], y_label: str) -> str:
    """Grouped bars: one group per key of `bars`, one bar per series inside it."""
    series = sorted({s for group in bars.values() for s in group})
    y_max = max((v for group in bars.values() for v in group.values()), default=0) or 1
    parts = _frame(title, y_max, y_label)
    inner_w, inner_h = W - PAD_L - PAD_R, H - PAD_T - PAD_B - 18
    group_w = inner_w / max(1, len(bars))
    bar_w = group_w * 0.8 / max(1, len(series))
    for g, (group, values) in enumerate(bars.items()):
        x0 = PAD_L + g * group_w + group_w * 0.1
        for s, name in enumerate(series):
            v = values.get(name, 0)
            h = v / y_max * inner_h
            parts.append(
                f'<rect x="{x0 + s * bar_w:.1f}" y="{H - PAD_B - h:.1f}" width="{bar_w:.1f}" '
                f'height="{h:.1f}" fill="{COLOURS[s % len(COLOURS)]}"><title>{escape(group)} '
                f"{escape(name)}: {v:g}</title></rect>"
            )
        parts.append(
            f'<text x="{x0 + group_w * 0.4:.1f}" y="{H - PAD_B + 12}" font-size="10" '
            f'text-anchor="middle">{escape(group)}</text>'
        )
    if len(series) > 1:
        parts += _legend(series)
    parts.append("</svg>")
    return "".join(parts)
