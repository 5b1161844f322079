"""SVG line charts for the benchmark (no plotting library needed): time against a size, on linear axes, so that a
straight line means linear cost."""

from __future__ import annotations

from pathlib import Path

COLOURS = ("#c0392b", "#2874a6", "#27ae60", "#8e44ad")


def write_plot(rows: list[dict], out: Path, x: str, series: tuple[str, ...], title: str, x_label: str) -> None:
    """A chart of rows[i][key] (seconds) for each key of `series` against rows[i][x]."""
    width, height, pad = 520, 320, 60
    right = max(r[x] for r in rows) or 1
    top = max(r[key] for r in rows for key in series) * 1.15 or 1

    def px(v: float) -> float:
        return pad + v / right * (width - 2 * pad)

    def py(v: float) -> float:
        return height - pad - v / top * (height - 2 * pad)

    lines = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
             f'font-size="12"><rect width="100%" height="100%" fill="white"/>',
             f'<text x="{width / 2}" y="20" text-anchor="middle">{title}</text>',
             f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="black"/>',
             f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="black"/>']
    for key, colour in zip(series, COLOURS[:len(series)], strict=True):
        points = " ".join(f"{px(r[x]):.0f},{py(r[key]):.0f}" for r in rows)
        lines.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="2"/>')
        lines += [f'<circle cx="{px(r[x]):.0f}" cy="{py(r[key]):.0f}" r="3" fill="{colour}"/>' for r in rows]
        lines.append(f'<text x="{width - pad + 5}" y="{py(rows[-1][key]):.0f}" fill="{colour}">{key}</text>')
    for r in rows:
        lines.append(f'<text x="{px(r[x]):.0f}" y="{height - pad + 18}" text-anchor="middle">{r[x]:g}</text>')
    for fraction in (0, 0.5, 1):
        lines.append(f'<text x="{pad - 6}" y="{py(top * fraction):.0f}" text-anchor="end">{top * fraction:.2f}s</text>')
    lines.append(f'<text x="{width / 2}" y="{height - 14}" text-anchor="middle">{x_label}</text></svg>')
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
