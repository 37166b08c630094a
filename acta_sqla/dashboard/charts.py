"""Charts over time as server-rendered SVG: readable without JavaScript, styled by the
dashboard's stylesheet (the Content-Security-Policy allows no inline style), each bar
with a ``<title>`` tooltip, each chart with a text summary for screen readers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from markupsafe import Markup

from ..inspect import Bucket, Series

WIDTH = 360
HEIGHT = 140
LEFT = 52
"""Room for the y axis' labels."""
BOTTOM = 22
"""Room for the x axis' labels."""
TOP = 8


@dataclass(frozen=True, slots=True)
class Metric:
    name: str
    title: str
    css: str
    unit: str
    value: Callable[[Bucket], float | None]
    total: bool
    """Summed over the window in the summary (counts), else averaged (a wait)."""


METRICS = {
    "throughput": Metric(
        "throughput", "Throughput", "ok", "jobs", lambda b: b.succeeded + b.cancelled, True
    ),
    "failures": Metric("failures", "Failures", "bad", "jobs", lambda b: b.failed, True),
    "wait": Metric("wait", "Queue wait", "wait", "s", lambda b: b.wait, False),
}
"""The charts, in page order: jobs that ended (succeeded or cancelled) and jobs that
failed per bucket, and the mean seconds from due to claimed."""


def _per(series: Series) -> str:
    return (
        "minute" if series.step == 60 else "hour" if series.step == 3600 else f"{series.step:g} s"
    )


def _window(series: Series) -> str:
    if series.seconds == 3600:
        return "the last hour"
    if series.seconds == 86400:
        return "the last day"
    return f"the last {series.seconds:g} s"


def _number(value: float, unit: str) -> str:
    if unit == "s":
        return f"{value:.2f} s" if value < 10 else f"{value:,.0f} s"
    return f"{value:,.0f}" if value == int(value) else f"{value:,.1f}"


def _nice(peak: float, whole: bool) -> float:
    """A round top for the y axis at or above ``peak``; for counts (``whole``) an even
    whole number, so that the middle line is a whole number too."""
    if whole:
        peak = max(peak, 1.0)
    if peak <= 0:
        return 1.0
    step = 1.0
    while step * 10 <= peak:
        step *= 10
    while step > peak and step > 0.01:
        step /= 10
    factors = (2, 4, 10) if whole else (1, 2, 5, 10)
    for factor in factors:
        if step * factor >= peak and (not whole or step * factor >= 2):
            return step * factor
    return step * 10


def _clock(series: Series, bucket: Bucket) -> str:
    fmt = "%H:%M" if series.step < 86400 else "%m-%d"
    return bucket.start.strftime(fmt)


def chart(series: Series, metric_name: str) -> Markup:
    """One metric of ``series`` as an SVG bar chart."""
    metric = METRICS[metric_name]
    values = [metric.value(b) for b in series.buckets]
    present = [v for v in values if v is not None]
    peak = max(present, default=0.0)
    top = _nice(peak, metric.total)
    plot_w, plot_h = WIDTH - LEFT - 4, HEIGHT - TOP - BOTTOM
    n = max(len(values), 1)
    slot = plot_w / n
    if metric.total:
        summary = f"{_number(sum(present), metric.unit)} {metric.unit} in {_window(series)}"
    elif present:
        mean = sum(present) / len(present)
        summary = f"mean {_number(mean, metric.unit)}, peak {_number(peak, metric.unit)}"
    else:
        summary = f"no job claimed and finished in {_window(series)}"
    label = f"{metric.title} per {_per(series)} over {_window(series)}: {summary}"
    if series.kind is not None:
        label = f"{series.kind}: {label}"
    parts = [
        Markup(
            '<svg class="chart chart-{}" viewBox="0 0 {} {}" width="{}" height="{}" '
            'role="img" aria-label="{}" xmlns="http://www.w3.org/2000/svg">'
        ).format(metric.name, WIDTH, HEIGHT, WIDTH, HEIGHT, label, label),
        Markup("<title>{}</title>").format(label),
    ]
    # Axes and grid: the top value and zero.
    for fraction in (0.0, 0.5, 1.0):
        y = TOP + plot_h * (1 - fraction)
        parts.append(
            Markup('<line class="grid" x1="{}" y1="{:.1f}" x2="{}" y2="{:.1f}"/>').format(
                LEFT, y, WIDTH - 4, y
            )
        )
        parts.append(
            Markup('<text class="axis" x="{}" y="{:.1f}" text-anchor="end">{}</text>').format(
                LEFT - 4, y + 4, _number(top * fraction, metric.unit)
            )
        )
    for i, (bucket, value) in enumerate(zip(series.buckets, values, strict=True)):
        if not value:
            continue
        h = max(plot_h * value / top, 1.0)
        x = LEFT + i * slot
        unit = "job" if metric.unit == "jobs" and value == 1 else metric.unit
        tip = f"{_clock(series, bucket)} UTC: {_number(value, metric.unit)} {unit}"
        if metric.name == "throughput" and bucket.cancelled:
            tip += f" ({bucket.succeeded:,} succeeded, {bucket.cancelled:,} cancelled)"
        parts.append(
            Markup(
                '<rect class="bar bar-{}" x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}">'
                "<title>{}</title></rect>"
            ).format(metric.css, x + 0.5, TOP + plot_h - h, max(slot - 1, 1.0), h, tip)
        )
    if series.buckets:
        ticks = (0, len(series.buckets) // 2, len(series.buckets) - 1)
        for i, anchor in zip(ticks, ("start", "middle", "end"), strict=True):
            x = (
                LEFT
                + i * slot
                + (slot if anchor == "end" else slot / 2 if anchor == "middle" else 0)
            )
            parts.append(
                Markup('<text class="axis" x="{:.1f}" y="{}" text-anchor="{}">{}</text>').format(
                    x, HEIGHT - 6, anchor, _clock(series, series.buckets[i])
                )
            )
    parts.append(Markup("</svg>"))
    return Markup("").join(parts)


def charts(series: Series) -> list[tuple[str, Markup]]:
    """Every metric's chart of ``series``: (title, svg)."""
    return [(f"{m.title} per {_per(series)}", chart(series, name)) for name, m in METRICS.items()]
