"""Plots of ``fpipe view`` as inline SVG made on the server: no script, no plotting library,
nothing fetched by the browser. Every label goes through :func:`~fpipe.view.html.esc`."""

from __future__ import annotations

from collections.abc import Sequence

from fpipe.view.html import esc

__all__ = ["Marks", "PALETTE", "color", "share_plot", "swatch"]

#: Colors of the datasets, by number (then repeated).
PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
)  # fmt: skip

_W, _H, _L, _R, _T, _B = 900, 220, 50, 10, 10, 30  # size and margins, pixels


def color(d: int) -> str:
    return PALETTE[d % len(PALETTE)]


def swatch(d: int) -> str:
    """A small square of dataset ``d``'s color (for legends)."""
    return (
        '<svg width="12" height="12" class="swatch" aria-hidden="true">'
        f'<rect width="12" height="12" fill="{color(d)}"/></svg>'
    )


class Marks:
    """What is marked on the step axis: weight changes (step, label), batch-size changes
    (step, label) and skip ranges ``[a, b)``."""

    def __init__(
        self,
        changes: Sequence[tuple[int, str]] = (),
        sizes: Sequence[tuple[int, str]] = (),
        skips: Sequence[tuple[int, int]] = (),
    ):
        self.changes, self.sizes, self.skips = list(changes), list(sizes), list(skips)


def share_plot(
    title: str, edges: Sequence[int], shares: Sequence[Sequence[float]], marks: Marks
) -> str:
    """A stacked plot of shares (each row of ``shares`` sums to 1 or is all 0) over windows of
    steps ``[edges[w], edges[w + 1])``, with the marks drawn over it."""
    a, b = edges[0], max(edges[-1], edges[0] + 1)
    pw, ph = _W - _L - _R, _H - _T - _B

    def x(step: float) -> float:
        return _L + pw * (step - a) / (b - a)

    def y(v: float) -> float:
        return _T + ph * (1 - v)

    out = [
        f'<svg width="{_W}" height="{_H}" viewBox="0 0 {_W} {_H}" role="img" class="plot">',
        f"<title>{esc(title)}</title>",
    ]
    ndata = max((len(r) for r in shares), default=0)
    for w, row in enumerate(shares):
        lo = 0.0
        for d in range(ndata):
            v = row[d] if d < len(row) else 0.0
            if v > 0:
                out.append(
                    f'<rect x="{x(edges[w]):.1f}" y="{y(lo + v):.1f}" '
                    f'width="{max(x(edges[w + 1]) - x(edges[w]), 0.5):.1f}" '
                    f'height="{ph * v:.1f}" fill="{color(d)}"/>'
                )
            lo += v
    for s0, s1 in marks.skips:
        if s1 > a and s0 < b:
            x0, x1 = x(max(s0, a)), x(min(s1, b))
            out.append(
                f'<rect x="{x0:.1f}" y="{_T}" width="{max(x1 - x0, 1):.1f}" height="{ph}" '
                'fill="#000" fill-opacity="0.25" class="skip">'
                f"<title>skipped steps {s0}..{s1 - 1}</title></rect>"
            )
    for marks_of, stroke, dash in ((marks.changes, "#000", "6 3"), (marks.sizes, "#555", "2 3")):
        for step, label in marks_of:
            if a <= step <= b:
                out.append(
                    f'<line x1="{x(step):.1f}" x2="{x(step):.1f}" y1="{_T}" y2="{_T + ph}" '
                    f'stroke="{stroke}" stroke-width="1.5" stroke-dasharray="{dash}">'
                    f"<title>{esc(label)}</title></line>"
                )
    for v in (0, 0.25, 0.5, 0.75, 1):
        out.append(
            f'<text x="{_L - 6}" y="{y(v) + 4:.1f}" text-anchor="end" font-size="11">'
            f"{round(v * 100)}%</text>"
        )
    for k in range(6):
        step = a + (b - a) * k / 5
        out.append(
            f'<text x="{x(step):.1f}" y="{_H - 12}" text-anchor="middle" font-size="11">'
            f"{int(step)}</text>"
        )
    out.append(
        f'<rect x="{_L}" y="{_T}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>'
        f'<text x="{_L + pw / 2:.1f}" y="{_H - 1}" text-anchor="middle" font-size="11">'
        "global step</text></svg>"
    )
    return "".join(out)
