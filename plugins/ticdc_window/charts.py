"""Small line charts as SVG geometry (the template draws them): no script and no asset leaves the page."""

from __future__ import annotations

from dataclasses import dataclass

WIDTH = 460
HEIGHT = 140
PAD_LEFT = 8
PAD_RIGHT = 8
PAD_TOP = 10
PAD_BOTTOM = 10


@dataclass(frozen=True)
class Line:
    name: str
    points: str  # "x,y x,y ..." for <polyline points=...>
    dots: list[tuple[float, float]]  # each known value, so a single run still shows


@dataclass(frozen=True)
class Chart:
    lines: list[Line]
    top: float  # the value at the top edge (the bottom is 0)
    runs: int


def line_chart(series: dict[str, list[float | None]]) -> Chart:
    """Each series over the runs, oldest on the left, scaled from 0 to the largest value; unknown values are skipped."""
    runs = max((len(values) for values in series.values()), default=0)
    top = max((v for values in series.values() for v in values if v is not None), default=0.0) or 1.0
    span_x = WIDTH - PAD_LEFT - PAD_RIGHT
    span_y = HEIGHT - PAD_TOP - PAD_BOTTOM

    def xy(i: int, v: float) -> tuple[float, float]:
        x = PAD_LEFT + (span_x * i / (runs - 1) if runs > 1 else span_x / 2)
        return round(x, 1), round(PAD_TOP + span_y * (1 - v / top), 1)

    lines = []
    for name, values in series.items():
        dots = [xy(i, v) for i, v in enumerate(values) if v is not None]
        lines.append(Line(name, " ".join(f"{x},{y}" for x, y in dots), dots))
    return Chart(lines, top, runs)
