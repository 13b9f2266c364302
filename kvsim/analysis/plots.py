"""Plotly figures of a run, a sweep or several runs: pure builders, no Streamlit.

Each builder takes tables (a `kvsim.Result`'s DataFrames, or those of `kvsim.analysis`)
and returns a `plotly.graph_objects.Figure` with every axis titled with its unit. The
dashboard shows them; notebooks and scripts can call them the same way and save them with
``fig.write_html(...)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from kvsim import analysis
from kvsim.units import format_seconds

#: Colours of event kinds and run series (colour-blind safe, Okabe-Ito).
EVENT_COLORS = {
    "preempt_recompute": "#D55E00",
    "offload_load": "#CC79A7",
    "swap_out": "#E69F00",
    "swap_in": "#F0E442",
    "evict": "#0072B2",
    "reject": "#000000",
}
SERIES_COLORS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
P50_COLOR, P99_COLOR, SLO_COLOR, SAMPLE_COLOR = "#009E73", "#D55E00", "#CC0000", "rgba(0,114,178,0.35)"
TIME_TITLE = "simulated time (s)"


def _finish(fig: go.Figure, title: str, height: int) -> go.Figure:
    fig.update_layout(
        title={"text": title, "x": 0.0, "xanchor": "left"},
        template="plotly_white",
        height=height,
        margin={"l": 70, "r": 30, "t": 70, "b": 50},
        # Legend on the right: a wrapped legend above the plot would run into the titles.
        legend={
            "orientation": "v",
            "yanchor": "top",
            "y": 1.0,
            "xanchor": "left",
            "x": 1.01,
            "traceorder": "normal",
        },
        hovermode="x unified",
    )
    # Subplot titles sit a little higher and smaller than Plotly's default, clear of the top
    # tick label of their own plot.
    fig.update_annotations(
        selector={"xref": "paper", "yref": "paper", "yanchor": "bottom", "showarrow": False},
        yshift=6,
        font={"size": 13},
    )
    # Room for every tick label and title: Plotly grows the margins instead of overlapping them.
    fig.update_xaxes(automargin=True)
    fig.update_yaxes(automargin=True)
    return fig


def _hline(fig: go.Figure, y: float, text: str, row: int | None = None, *, log_axis: bool = False) -> None:
    """A dashed SLO line across a subplot, labelled just above its left end, inside the plot."""
    kw = {} if row is None else {"row": row, "col": 1}
    line = {"color": SLO_COLOR, "dash": "dash", "width": 1.5}
    fig.add_hline(y=y, line=line, **kw)
    # On a log axis the line takes the value but an annotation takes its log10.
    fig.add_annotation(x=0.01, xref="x domain", y=math.log10(y) if log_axis else y, text=text,
                       showarrow=False, xanchor="left", yanchor="bottom", font={"color": SLO_COLOR, "size": 11},
                       bgcolor="rgba(255,255,255,0.7)", **kw)  # fmt: skip


def seconds_label(value: float) -> str:
    """A tick label for a duration in seconds: ``1 ms``, ``10 s``, ``100 µs``."""
    return format_seconds(value).replace(".00 ", " ").replace(".0 ", " ")


def count_label(value: float) -> str:
    """A tick label for a count: ``1``, ``100``, ``10k``, ``1M``."""
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= div:
            return f"{value / div:g}{suffix}"
    return f"{value:g}"


def decade_ticks(values: Sequence[float] | np.ndarray, label: Callable[[float], str]) -> dict[str, object]:
    """Axis settings for a log axis labelled at whole decades only (never the 2s and 5s between).

    The range covers the finite positive ``values`` from the decade below the smallest to
    the decade above the largest.
    """
    v = np.asarray([x for x in np.asarray(values, dtype=float).ravel() if np.isfinite(x) and x > 0])
    if not len(v):
        return {"type": "log"}
    lo, hi = math.floor(math.log10(v.min())), math.ceil(math.log10(v.max()))
    if hi == lo:
        hi += 1
    decades = [10.0**k for k in range(lo, hi + 1)]
    return {
        "type": "log",
        "range": [lo, hi],
        "tickvals": decades,
        "ticktext": [label(d) for d in decades],
    }


def count_ticks(
    values: Sequence[float] | np.ndarray, *, max_ticks: int = 6, from_zero: bool = True
) -> dict[str, object]:
    """Axis settings for a count (requests, blocks, replicas): ticks at whole numbers only.

    Plotly would put ticks at 0.5 steps on a count that stays below 3; the step here is
    1, 2 or 5 times a power of ten, with at most ``max_ticks`` steps over the values'
    span. ``from_zero``: the axis starts at 0 (a queue); otherwise Plotly fits the range
    to the values (a swept knob such as the number of replicas).
    """
    v = np.asarray(values, dtype=float).ravel()
    v = v[np.isfinite(v)]
    top = max(float(v.max()) if len(v) else 0.0, 1.0)
    low = 0.0 if from_zero or not len(v) else float(v.min())
    step = 1
    while (top - low) / step > max_ticks:
        step = _next_step(step)
    ticks: dict[str, object] = {"tick0": 0, "dtick": step, "tickformat": ",d"}
    return ticks | {"range": [0, top * 1.05]} if from_zero else ticks


def _next_step(step: int) -> int:
    """The step after ``step`` in 1, 2, 5, 10, 20, 50, ..."""
    digits = str(step)
    return step * 5 // 2 if digits[0] == "2" else step * 2


def _crossings(x: np.ndarray, y: np.ndarray, limit: float, *, log_y: bool) -> list[float]:
    """x where the polyline (x, y) crosses ``limit`` (interpolated; in log y on a log axis)."""
    out: list[float] = []

    def f(a: float) -> float:
        return float(np.log10(a)) if log_y else a

    for i in range(len(x) - 1):
        y0, y1 = y[i], y[i + 1]
        if not (np.isfinite(y0) and np.isfinite(y1)) or (log_y and min(y0, y1) <= 0):
            continue
        if (y0 - limit) * (y1 - limit) < 0:
            t = (f(limit) - f(y0)) / (f(y1) - f(y0))
            out.append(float(x[i] + t * (x[i + 1] - x[i])))
    return out


def latency_spikes_figure(
    requests: pd.DataFrame,
    iterations: pd.DataFrame,
    events: pd.DataFrame,
    *,
    window_s: float,
    spikes: pd.DataFrame | None = None,
    ttft_slo_s: float | None = None,
    itl_slo_s: float | None = None,
) -> go.Figure:
    """TTFT and ITL over time with rolling p50/p99, engine events and the waiting queue below.

    Rows share the time axis: (1) each request's TTFT at its first token, with rolling
    p50/p99 over ``window_s``; (2) the ITL of decoding requests (`analysis.itl_samples`),
    rolling p50/p99 weighted by decode tokens, and the longest gap of each preempted
    request (`analysis.preemption_gap_samples`; the axis turns logarithmic then); (3)
    preemptions, swaps, evictions and rejections per window, one lane per kind, marker
    area proportional to the count; (4) requests waiting. Spike episodes (rows of
    `analysis.find_spikes`) are shaded across all rows.
    """
    fig = make_subplots(
        rows=4,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.05,
        row_heights=[0.32, 0.28, 0.2, 0.2],
        subplot_titles=(
            "Time to first token (per request, at its first token)",
            "Inter-token latency of decoding requests",
            f"Engine events per {window_s:g}-s window (marker area ∝ count)",
            "Waiting queue (vllm:num_requests_waiting, summed)",
        ),
    )
    ttft = analysis.ttft_samples(requests)
    ids = ttft["request_id"] if "request_id" in ttft.columns else None
    fig.add_trace(
        go.Scattergl(
            x=ttft["time_s"],
            y=ttft["ttft_s"],
            mode="markers",
            name="TTFT (per request)",
            marker={"size": 4, "color": SAMPLE_COLOR},
            customdata=ids,
            hovertemplate=("request %{customdata}: " if ids is not None else "")
            + "TTFT %{y:.3s}s at t=%{x:,.1f} s<extra></extra>",
        ),
        row=1,
        col=1,
    )
    step = window_s / 4
    roll = analysis.rolling_quantiles(ttft["time_s"], ttft["ttft_s"], window_s=window_s, step_s=step)
    for q, color in (("p50", P50_COLOR), ("p99", P99_COLOR)):
        fig.add_trace(
            go.Scatter(
                x=roll["time_s"],
                y=roll[q],
                mode="lines",
                name=f"TTFT rolling {q}",
                line={"color": color, "width": 2},
                hovertemplate=f"TTFT {q} %{{y:.3s}}s (window to t=%{{x:,.1f}} s)<extra></extra>",
            ),
            row=1,
            col=1,
        )
    itl = analysis.itl_samples(iterations)
    iroll = analysis.rolling_quantiles(
        itl["time_s"], itl["itl_s"], window_s=window_s, step_s=step, weights=itl["weight"]
    )
    for q, color in (("p50", P50_COLOR), ("p99", P99_COLOR)):
        fig.add_trace(
            go.Scatter(
                x=iroll["time_s"],
                y=iroll[q] * 1e3,
                mode="lines",
                name=f"ITL rolling {q}",
                line={"color": color, "width": 2, "dash": "dot"},
                hovertemplate=f"ITL {q} %{{y:.3g}} ms (window to t=%{{x:,.1f}} s)<extra></extra>",
            ),
            row=2,
            col=1,
        )
    gaps = analysis.preemption_gap_samples(requests, events)
    if len(gaps):
        fig.add_trace(
            go.Scatter(
                x=gaps["time_s"], y=gaps["itl_s"] * 1e3, mode="markers", name="gap of a preempted request",
                marker={"size": 6, "color": EVENT_COLORS["preempt_recompute"], "symbol": "x"},
                customdata=gaps["request_id"], hovertemplate="request %{customdata}: gap %{y:.3g} ms<extra></extra>",
            ),
            row=2, col=1,
        )  # fmt: skip
    t_end = float(max(ttft["time_s"].max() if len(ttft) else 0.0, itl["time_s"].max() if len(itl) else 0.0))
    edges = np.arange(0.0, t_end + window_s, window_s)
    if len(edges) < 2:
        edges = np.array([0.0, window_s])
    # One lane per event kind, a square per window with events, its area proportional to the
    # count: evictions (hundreds per window) and preemptions (a few) both stay visible.
    centers = (edges[:-1] + edges[1:]) / 2
    counts = {
        kind: np.histogram(events.loc[events["kind"] == kind, "time_s"].to_numpy(float), bins=edges)[0]
        for kind in analysis.SPIKE_EVENT_KINDS
    }
    most = max((int(c.max()) for c in counts.values() if len(c)), default=0)
    for kind, c in counts.items():
        nz = c > 0
        if not nz.any():
            continue
        fig.add_trace(
            go.Scatter(
                x=centers[nz], y=[kind] * int(nz.sum()), mode="markers", name=kind, customdata=c[nz],
                marker={"color": EVENT_COLORS[kind], "symbol": "square", "size": 4 + 16 * np.sqrt(c[nz] / most)},
                hovertemplate=f"{kind}: %{{customdata}} in the window<extra></extra>",
            ),
            row=3, col=1,
        )  # fmt: skip
    if not most:
        # An empty subplot draws no axes at all; an invisible point keeps the row and its title.
        fig.add_trace(
            go.Scatter(x=[edges[0]], y=[""], mode="markers", marker={"opacity": 0}, showlegend=False,
                       hoverinfo="skip"),
            row=3, col=1,
        )  # fmt: skip
        fig.add_annotation(
            text="no preemption, swap, eviction or rejection in this run", showarrow=False,
            x=float(edges[-1]) / 2, y="", row=3, col=1,
        )  # fmt: skip
    it = iterations.sort_values("start_s", kind="stable")
    fig.add_trace(
        go.Scatter(
            x=it["start_s"],
            y=it["num_waiting"],
            mode="lines",
            name="requests waiting",
            line={"color": "#555555", "width": 1, "shape": "hv"},
            hovertemplate="%{y:,} waiting at t=%{x:,.1f} s<extra></extra>",
        ),
        row=4,
        col=1,
    )
    # Under overload TTFTs run from milliseconds to minutes: a log axis shows both ends.
    ttft_vals = ttft["ttft_s"].to_numpy(float)
    ttft_log = len(ttft_vals) > 0 and ttft_vals.min() > 0 and ttft_vals.max() / ttft_vals.min() > 100
    if ttft_log:
        fig.update_yaxes(
            **decade_ticks([*ttft_vals, ttft_slo_s or ttft_vals[0]], seconds_label), row=1, col=1
        )
    if len(gaps):
        # Gaps of seconds beside steps of milliseconds: only a log axis shows both.
        itl_ms = [*itl["itl_s"].to_numpy(float) * 1e3, *gaps["itl_s"].to_numpy(float) * 1e3]
        if itl_slo_s is not None:
            itl_ms.append(itl_slo_s * 1e3)
        fig.update_yaxes(**decade_ticks(itl_ms, lambda v: seconds_label(v / 1e3)), row=2, col=1)
    if ttft_slo_s is not None:
        _hline(fig, ttft_slo_s, f"TTFT SLO {ttft_slo_s:g} s", row=1, log_axis=ttft_log)
    if itl_slo_s is not None:
        _hline(fig, itl_slo_s * 1e3, f"TPOT SLO {itl_slo_s * 1e3:g} ms", row=2, log_axis=len(gaps) > 0)
    if spikes is not None:
        for sp in spikes.itertuples(index=False):
            fig.add_vrect(
                x0=sp.start_s, x1=sp.end_s, fillcolor="rgba(213,94,0,0.12)", line_width=0, row="all", col=1
            )
    fig.update_yaxes(title_text="TTFT, log" if ttft_log else "TTFT (s)", row=1, col=1)
    fig.update_yaxes(title_text="ITL, log" if len(gaps) else "ITL (ms)", row=2, col=1)
    fig.update_yaxes(title_text="events", type="category", row=3, col=1)
    # A queue holds whole requests: ticks at whole numbers, also when it stays below 3.
    fig.update_yaxes(title_text="requests", **count_ticks(it["num_waiting"]), row=4, col=1)
    fig.update_xaxes(title_text=TIME_TITLE, row=4, col=1)
    return _finish(fig, "Latency over time (shaded: spikes)", 900)


def throughput_capacity_figure(
    points: pd.DataFrame,
    *,
    x: str,
    x_title: str,
    ttft_slo_s: float,
    tpot_slo_s: float,
    knee_x: float | None = None,
    knee_name: str = "knee",
) -> go.Figure:
    """Offered against achieved load and p99 TTFT / TPOT of sweep points against the swept quantity.

    ``points`` has one row per point with the column ``x`` and the summary columns
    ``offered_requests_per_s`` and ``achieved_requests_per_s`` (without them, the row
    shows ``throughput_tokens_per_s``), ``ttft_p99_s``, ``tpot_p99_s`` and optionally
    ``overloaded``. The TTFT row is logarithmic (decade ticks) so that the SLO line and
    where the curve crosses it stay visible from milliseconds to minutes; crossings are
    marked. Overloaded points are drawn as crosses. The knee (`analysis.find_knee`), if
    any, is a dotted line on all rows, named in the title.
    """
    pts = points.sort_values(x, kind="stable") if pd.api.types.is_numeric_dtype(points[x]) else points
    numeric = pd.api.types.is_numeric_dtype(pts[x])
    loads = {"offered_requests_per_s", "achieved_requests_per_s"} <= set(pts.columns)
    fig = make_subplots(
        rows=3,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.09,
        subplot_titles=(
            "Offered and achieved load" if loads else "Output throughput",
            "p99 time to first token",
            "p99 time per output token",
        ),
    )
    xv = pts[x].to_numpy()
    over = pts["overloaded"].fillna(False).astype(bool).to_numpy() if "overloaded" in pts.columns else None
    hover_x = f"{x_title}: %{{x}}"
    if loads:
        for col, name, color, dash in (
            ("offered_requests_per_s", "offered (arrivals)", "#555555", "dash"),
            ("achieved_requests_per_s", "achieved (finished)", SERIES_COLORS[0], "solid"),
        ):
            fig.add_trace(
                go.Scatter(x=xv, y=pts[col], mode="lines+markers", name=name, line={"color": color, "dash": dash},
                           marker={"size": 8}, hovertemplate=f"{hover_x}<br>{name}: %{{y:.3g}} req/s<extra></extra>"),
                row=1, col=1,
            )  # fmt: skip
    else:
        fig.add_trace(
            go.Scatter(x=xv, y=pts["throughput_tokens_per_s"], mode="lines+markers", name="throughput",
                       line={"color": SERIES_COLORS[0]}, marker={"size": 8},
                       hovertemplate=f"{hover_x}<br>throughput: %{{y:,.0f}} tokens/s<extra></extra>"),
            row=1, col=1,
        )  # fmt: skip
    ttft = pts["ttft_p99_s"].to_numpy(float)
    tpot_ms = pts["tpot_p99_s"].to_numpy(float) * 1e3
    for row, y, name, color, unit in (
        (2, ttft, "p99 TTFT", SERIES_COLORS[1], "s"),
        (3, tpot_ms, "p99 TPOT", SERIES_COLORS[2], "ms"),
    ):
        fig.add_trace(
            go.Scatter(x=xv, y=y, mode="lines+markers", name=name, line={"color": color}, marker={"size": 8},
                       hovertemplate=f"{hover_x}<br>{name}: %{{y:.3g}} {unit}<extra></extra>"),
            row=row, col=1,
        )  # fmt: skip
    if over is not None and over.any():
        fig.add_trace(
            go.Scatter(x=xv[over], y=ttft[over], mode="markers", name="overloaded (backlog growing)",
                       marker={"symbol": "x", "size": 13, "color": "#000000", "line": {"width": 1}},
                       hovertemplate=f"{hover_x}<br>overloaded: the backlog was still growing<extra></extra>"),
            row=2, col=1,
        )  # fmt: skip
    fig.update_yaxes(**decade_ticks([*ttft, ttft_slo_s], seconds_label), row=2, col=1)
    _hline(fig, ttft_slo_s, f"SLO {ttft_slo_s:g} s", row=2, log_axis=True)
    _hline(fig, tpot_slo_s * 1e3, f"SLO {tpot_slo_s * 1e3:g} ms", row=3)
    if numeric:
        for row, y, limit, log_y, what in (
            (2, ttft, ttft_slo_s, True, "TTFT"),
            (3, tpot_ms, tpot_slo_s * 1e3, False, "TPOT"),
        ):
            cross = _crossings(xv.astype(float), y, limit, log_y=log_y)
            if cross:
                unit = "s" if what == "TTFT" else "ms"
                fig.add_trace(
                    go.Scatter(x=cross, y=[limit] * len(cross), mode="markers", name=f"crosses the {what} SLO",
                               marker={"symbol": "diamond-open", "size": 14, "color": SLO_COLOR, "line": {"width": 2}},
                               hovertemplate=f"p99 {what} crosses {limit:g} {unit} at {x_title} ≈ %{{x:.3g}}"
                                             "<extra></extra>"),
                    row=row, col=1,
                )  # fmt: skip
    title = f"Load and tail latency against {x_title}"
    if knee_x is not None:
        fig.add_vline(x=knee_x, line={"color": "#333333", "dash": "dot"}, row="all", col=1)
        title += f" ({knee_name}: {knee_x:g})"
    fig.update_yaxes(title_text="requests/s" if loads else "tokens/s", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="p99 TTFT, log", row=2, col=1)
    fig.update_yaxes(title_text="p99 TPOT (ms)", rangemode="tozero", row=3, col=1)
    fig.update_xaxes(title_text=x_title, row=3, col=1)
    if pd.api.types.is_integer_dtype(pts[x]) and len(xv):
        # A whole-number knob (replicas, TP, KV blocks): no tick at 1.5 replicas.
        fig.update_xaxes(**count_ticks(xv.astype(float), from_zero=False))
    fig = _finish(fig, title, 820)
    fig.update_layout(hovermode="closest")
    return fig


def kv_blocks_figure(kv: pd.DataFrame) -> go.Figure:
    """Stacked KV blocks over time: used, cached (free, hittable), empty (`analysis.kv_blocks_over_time`)."""
    fig = go.Figure()
    for col, name, color in (
        ("used", "used by running requests", SERIES_COLORS[0]),
        ("cached", "cached (free, hittable)", SERIES_COLORS[2]),
        ("empty", "free and empty", "#BBBBBB"),
    ):
        fig.add_trace(
            go.Scatter(
                x=kv["time_s"],
                y=kv[col],
                mode="lines",
                name=name,
                stackgroup="kv",
                line={"color": color, "width": 0.5, "shape": "hv"},
                hovertemplate=f"{name}: %{{y:,}} blocks at t=%{{x:,.1f}} s<extra></extra>",
            )
        )
    fig.update_yaxes(title_text="KV blocks (count)", rangemode="tozero")
    fig.update_xaxes(title_text=TIME_TITLE)
    return _finish(fig, "KV cache blocks over time", 420)


def prefix_hit_rate_figure(hit_rate: pd.DataFrame, *, overall: float | None = None) -> go.Figure:
    """Prefix hit rate over time (`analysis.prefix_hit_rate_over_time`), with the run's overall rate."""
    fig = go.Figure(
        go.Scatter(
            x=hit_rate["time_s"],
            y=hit_rate["hit_rate"] * 100,
            mode="lines",
            name="hit rate (window)",
            line={"color": SERIES_COLORS[0]},
            connectgaps=False,
            hovertemplate="%{y:.1f}% of prompt tokens hit (window to t=%{x:,.1f} s)<extra></extra>",
        )
    )
    if overall is not None:
        # A legend entry, not a label on the line: a label sits on the curve where it crosses.
        ends = hit_rate["time_s"].to_numpy(float)
        ends = ends[np.isfinite(ends)]
        fig.add_trace(
            go.Scatter(
                x=[float(ends.min()), float(ends.max())] if len(ends) else [0.0, 1.0],
                y=[overall * 100] * 2,
                mode="lines",
                name=f"whole run: {overall * 100:.1f} %",
                line={"color": "#555555", "dash": "dash"},
                hovertemplate=f"whole run: {overall * 100:.1f}% of prompt tokens hit<extra></extra>",
            )
        )
    fig.update_yaxes(title_text="prefix hit rate (% of prompt tokens)", range=[0, 105])
    fig.update_xaxes(title_text=TIME_TITLE)
    return _finish(fig, "Prefix cache hit rate of admitted requests", 380)


def cache_curve_figure(
    curve: pd.DataFrame,
    *,
    run_capacity_blocks: int | None = None,
    run_hit_rate: float | None = None,
    policy: str = "lru",
) -> go.Figure:
    """Cache-only token hit ratio against cache capacity, with the timed run's point.

    ``curve`` has ``capacity_blocks`` (None/NaN: unbounded) and ``token_hit_ratio``; the
    unbounded ratio becomes a dashed line.
    """
    cap = pd.to_numeric(curve["capacity_blocks"], errors="coerce")
    bounded = curve[cap.notna()]
    fig = go.Figure(
        go.Scatter(
            x=cap[cap.notna()],
            y=bounded["token_hit_ratio"] * 100,
            mode="lines+markers",
            name=f"cache-only replay ({policy.upper()})",
            line={"color": SERIES_COLORS[0]},
            hovertemplate="%{x:,} blocks: %{y:.1f}% of prompt tokens hit<extra></extra>",
        )
    )
    unbounded = curve[cap.isna()]
    if len(unbounded):
        u = float(unbounded["token_hit_ratio"].iloc[0]) * 100
        fig.add_hline(
            y=u,
            line={"color": "#555555", "dash": "dash"},
            annotation_text=f"unbounded cache: {u:.1f} %",
            annotation_position="bottom right",
        )
    if run_capacity_blocks is not None and run_hit_rate is not None:
        fig.add_trace(
            go.Scatter(
                x=[run_capacity_blocks],
                y=[run_hit_rate * 100],
                mode="markers",
                name="this run (timed)",
                marker={"color": SERIES_COLORS[1], "size": 12, "symbol": "diamond"},
                hovertemplate="this run: %{x:,} blocks per replica, %{y:.1f}% hit<extra></extra>",
            )
        )
    fig.update_xaxes(title_text="cache capacity (KV blocks, log scale)",
                     **decade_ticks([*cap[cap.notna()], run_capacity_blocks or 1], count_label))  # fmt: skip
    fig.update_yaxes(title_text="token hit ratio (%)", range=[0, 105])
    return _finish(fig, "Hit ratio against cache size", 420)


def latency_cdfs_figure(runs: Mapping[str, pd.DataFrame]) -> go.Figure:
    """Overlaid empirical CDFs of TTFT, TPOT and E2E of finished requests, one colour per run."""
    metrics = (("ttft_s", "TTFT (s)", 1.0), ("tpot_s", "TPOT (ms)", 1e3), ("e2e_s", "E2E latency (s)", 1.0))
    fig = make_subplots(rows=1, cols=3, subplot_titles=[m[1] for m in metrics], horizontal_spacing=0.07)
    for i, (name, req) in enumerate(runs.items()):
        color = SERIES_COLORS[i % len(SERIES_COLORS)]
        for col_i, (col, title, scale) in enumerate(metrics, start=1):
            vals = np.sort(req[col].dropna().to_numpy(float)) * scale
            frac = np.arange(1, len(vals) + 1) / len(vals) if len(vals) else vals
            fig.add_trace(
                go.Scatter(
                    x=vals,
                    y=frac,
                    mode="lines",
                    name=name,
                    legendgroup=name,
                    showlegend=col_i == 1,
                    line={"color": color, "shape": "hv"},
                    hovertemplate=f"{name}: %{{y:.1%}} of requests at or below %{{x:.3g}} {title.split('(')[-1][:-1]}"
                    "<extra></extra>",
                ),
                row=1,
                col=col_i,
            )
            fig.update_xaxes(title_text=title, row=1, col=col_i)
    fig.update_yaxes(title_text="fraction of requests", range=[0, 1.02], row=1, col=1)
    fig.update_layout(hovermode="closest")
    return _finish(fig, "Latency distributions (CDF)", 420)


def calibration_figure(points: pd.DataFrame, *, x_titles: Mapping[str, str]) -> go.Figure:
    """Measured kernel times against the roofline's prediction, one panel per kernel.

    ``points`` columns: ``kernel``, ``x`` (the grid variable), ``measured_s`` and
    ``roofline_s``; ``x_titles`` maps each kernel to what its x axis counts, which goes
    into the panel's title (two panels a row, so that narrow windows keep them apart).
    """
    kernels: Sequence[str] = list(dict.fromkeys(points["kernel"]))
    cols = min(2, max(1, len(kernels)))
    rows = max((len(kernels) + cols - 1) // cols, 1)
    titles = [f"{k}<br><sup>x: {x_titles.get(k, 'x')}</sup>" for k in kernels]
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=titles, vertical_spacing=min(0.3, 0.45 / rows),
                        horizontal_spacing=0.14)  # fmt: skip
    for i, k in enumerate(kernels):
        r, c = i // cols + 1, i % cols + 1
        p = points[points["kernel"] == k].sort_values("x")
        for col, name, color, mode in (
            ("measured_s", "measured", SERIES_COLORS[0], "markers+lines"),
            ("roofline_s", "roofline", SERIES_COLORS[1], "lines"),
        ):
            fig.add_trace(
                go.Scatter(
                    x=p["x"],
                    y=p[col] * 1e3,
                    mode=mode,
                    name=name,
                    legendgroup=name,
                    showlegend=i == 0,
                    line={"color": color, "dash": "dash" if col == "roofline_s" else "solid"},
                    customdata=[seconds_label(v) for v in p[col]],
                    hovertemplate=f"{name}: %{{customdata}} at x = %{{x:,}}<extra></extra>",
                ),
                row=r,
                col=c,
            )
        fig.update_xaxes(**decade_ticks(p["x"], count_label), tickangle=0, row=r, col=c)
        times_ms = [*p["measured_s"] * 1e3, *p["roofline_s"] * 1e3]
        fig.update_yaxes(title_text="time per layer" if c == 1 else "", row=r, col=c,
                         **decade_ticks(times_ms, lambda v: seconds_label(v / 1e3)))  # fmt: skip
    fig = _finish(fig, "Measured cost curves against the roofline (log-log)", 300 * rows + 140)
    fig.update_layout(hovermode="closest", margin={"t": 110})  # two-line panel titles below the title
    return fig


#: Colours of the segments of a request's timeline.
TIMELINE_COLORS = {
    "queued": "#BBBBBB",
    "prefill chunk": SERIES_COLORS[0],
    "kv_transfer": SERIES_COLORS[3],
    "decode": SERIES_COLORS[2],
    **EVENT_COLORS,
}


def request_timeline_figure(timeline: pd.DataFrame, *, title: str) -> go.Figure:
    """One request's timeline (`analysis.request_timeline`) as a Gantt chart: a bar per segment, a mark per instant."""
    fig = go.Figure()
    lanes = [lane for lane in analysis.TIMELINE_LANES if lane in set(timeline["lane"])]
    bars = timeline[timeline["end_s"] > timeline["start_s"]]
    instants = timeline[timeline["end_s"] <= timeline["start_s"]]
    for kind, group in bars.groupby("kind", sort=False):
        fig.add_trace(
            go.Bar(
                y=group["lane"], x=group["end_s"] - group["start_s"], base=group["start_s"], orientation="h",
                name=str(kind), marker={"color": TIMELINE_COLORS.get(str(kind), "#777777"),
                                        "line": {"color": "#ffffff", "width": 1}},
                customdata=np.stack([group["detail"], [seconds_label(d) for d in group["end_s"] - group["start_s"]],
                                     np.where(group["exact"], "", " (estimated from the iteration table)")], axis=-1),
                hovertemplate="%{base:,.3f} s + %{customdata[1]}%{customdata[2]}<br>%{customdata[0]}<extra></extra>",
            )
        )  # fmt: skip
    for kind, group in instants.groupby("kind", sort=False):
        fig.add_trace(
            go.Scatter(
                x=group["start_s"], y=group["lane"], mode="markers", name=str(kind),
                marker={"symbol": "x" if kind != "swap_in" else "triangle-up", "size": 12,
                        "color": TIMELINE_COLORS.get(str(kind), "#777777")},
                customdata=group["detail"], hovertemplate="t=%{x:,.3f} s: %{customdata}<extra></extra>",
            )
        )  # fmt: skip
    fig.update_yaxes(title_text="", categoryorder="array", categoryarray=lanes[::-1], type="category")
    fig.update_xaxes(title_text=TIME_TITLE)
    fig = _finish(fig, title, 140 + 45 * max(len(lanes), 1))
    fig.update_layout(barmode="overlay", hovermode="closest", margin={"t": 50, "b": 50})
    return fig


def replica_panels_figure(series: pd.DataFrame) -> go.Figure:
    """Per-replica running and waiting requests and KV usage over time (`analysis.replica_series`)."""
    metrics = (
        (analysis.VLLM_RUNNING, "running (requests)", 1.0, "{:,}"),
        (analysis.VLLM_WAITING, "waiting (requests)", 1.0, "{:,}"),
        (analysis.VLLM_KV_USAGE, "KV usage (%)", 100.0, "{:.1f}%"),
    )
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=[m[0] for m in metrics])  # fmt: skip
    replicas = list(dict.fromkeys(series["replica_id"]))
    for i, rid in enumerate(replicas):
        color = SERIES_COLORS[i % len(SERIES_COLORS)]
        rows = series[series["replica_id"] == rid]
        for row, (col, title, scale, _) in enumerate(metrics, start=1):
            unit = "%" if scale == 100.0 else " requests"
            fig.add_trace(
                go.Scatter(x=rows["time_s"], y=rows[col] * scale, mode="lines", name=str(rid), legendgroup=str(rid),
                           showlegend=row == 1, line={"color": color, "width": 1.2, "shape": "hv"},
                           hovertemplate=f"{rid}: %{{y:,.4g}}{unit} ({col}, bin to t=%{{x:,.1f}} s)<extra></extra>"),
                row=row, col=1,
            )  # fmt: skip
            fig.update_yaxes(title_text=title, rangemode="tozero", row=row, col=1)
    for row, (col, *_) in enumerate(metrics[:2], start=1):  # whole requests: whole-number ticks
        fig.update_yaxes(**count_ticks(series[col]), row=row, col=1)
    fig.update_yaxes(range=[0, 105], row=3, col=1)
    fig.update_xaxes(title_text=TIME_TITLE, row=3, col=1)
    fig = _finish(fig, "Per replica: running and waiting requests, KV usage (highest per time bin)", 700)
    fig.update_layout(hovermode="closest")
    return fig


def plan_pareto_figure(
    runs: pd.DataFrame, slo: Sequence[tuple[str, float, bool]], *, currency: str = "USD", title: str = ""
) -> go.Figure:
    """Cost against each SLO metric of a plan's runs (`kvsim.planning.planner.PlanReport.runs_table`).

    One row per SLO bound ``(summary key, limit, upper)``: every run that finished at its
    deployment's price per hour, feasible ones (every bound met, not overloaded) apart from
    the others, the Pareto front of cost against all the SLO metrics as a line, the
    cheapest feasible one as a star, the SLO as a dashed line. Runs stopped early as
    overloaded have no latency: they are ticks along the top of each row. Latencies
    (keys ending in ``_s``) are on log axes with decade ticks.
    """
    done = runs[~runs["stopped_early"].astype(bool) & (runs["status"] == "ok")] if len(runs) else runs
    stopped = runs[runs["stopped_early"].astype(bool)] if len(runs) else runs
    rows = max(len(slo), 1)
    fig = make_subplots(rows=rows, cols=1, shared_xaxes=True, vertical_spacing=0.12,
                        subplot_titles=[f"{key} against cost" for key, _, _ in slo] or ["cost"])  # fmt: skip
    price = f"{currency}/hour"
    legend_shown: set[str] = set()

    def trace(name: str, **kw: object) -> dict[str, object]:
        shown = name not in legend_shown
        legend_shown.add(name)
        return {"name": name, "legendgroup": name, "showlegend": shown, **kw}

    for row, (key, limit, upper) in enumerate(slo, start=1):
        seconds = key.endswith("_s")
        unit = "s" if seconds else ""
        values = done[key].to_numpy(float) if key in done else np.array([])
        for mask, name, color, symbol in (
            (done["feasible"].astype(bool), "meets every SLO", SERIES_COLORS[2], "circle"),
            (~done["feasible"].astype(bool), "misses an SLO", SERIES_COLORS[1], "circle-open"),
        ):
            part = done[mask.to_numpy()]
            if len(part):
                fig.add_trace(
                    go.Scatter(x=part["usd_per_hour"], y=part[key], mode="markers", text=part["label"],
                               marker={"color": color, "size": 9, "symbol": symbol},
                               hovertemplate=f"%{{text}}<br>%{{x:,.2f}} {price}<br>{key}: %{{y:.3g}} {unit}<extra></extra>",
                               **trace(name)),
                    row=row, col=1,
                )  # fmt: skip
        front = done[done["pareto"].astype(bool)].sort_values("usd_per_hour")
        if len(front):
            fig.add_trace(
                go.Scatter(x=front["usd_per_hour"], y=front[key], mode="lines", line={"color": "#555555", "dash": "dot"},
                           hoverinfo="skip", **trace("Pareto front (cost, every SLO metric)")),
                row=row, col=1,
            )  # fmt: skip
        best = done[done["cheapest"].astype(bool)]
        if len(best):
            fig.add_trace(
                go.Scatter(x=best["usd_per_hour"], y=best[key], mode="markers", text=best["label"],
                           marker={"symbol": "star", "size": 18, "color": "#E69F00", "line": {"width": 1, "color": "#000"}},
                           hovertemplate=f"cheapest: %{{text}}<br>%{{x:,.2f}} {price}<extra></extra>",
                           **trace("cheapest meeting every SLO")),
                row=row, col=1,
            )  # fmt: skip
        finite = values[np.isfinite(values) & (values > 0)] if seconds else values[np.isfinite(values)]
        top = (float(finite.max()) if len(finite) else limit) * (3.0 if seconds else 1.15)
        top = max(top, limit * (3.0 if seconds else 1.15))
        if len(stopped):
            fig.add_trace(
                go.Scatter(x=stopped["usd_per_hour"], y=[top] * len(stopped), mode="markers", text=stopped["label"],
                           marker={"symbol": "line-ns", "size": 14, "color": "#000000", "line": {"width": 2}},
                           hovertemplate=f"%{{text}}<br>%{{x:,.2f}} {price}<br>overloaded, stopped early: no latency "
                                         "measured<extra></extra>",
                           **trace("overloaded, stopped early (no latency; drawn at the top)")),
                row=row, col=1,
            )  # fmt: skip
        if seconds:
            fig.update_yaxes(**decade_ticks([*finite, limit, top], seconds_label), row=row, col=1)
            _hline(fig, limit, f"SLO {'≤' if upper else '≥'} {seconds_label(limit)}", row=row, log_axis=True)
        else:
            _hline(fig, limit, f"SLO {'≤' if upper else '≥'} {limit:g}", row=row)
        fig.update_yaxes(title_text=key + (", log" if seconds else ""), row=row, col=1)
    fig.update_xaxes(title_text=f"deployment price ({price})", rangemode="tozero", row=rows, col=1)
    fig = _finish(fig, title or "Cost against the SLO metrics", 320 + 260 * rows)
    fig.update_layout(hovermode="closest")
    return fig


def observed_ttft_scatter_figure(paired: pd.DataFrame) -> go.Figure:
    """Each request's TTFT as the server gave it (x) and as kvsim predicts it (y), with the
    line of a perfect prediction (`kvsim.observe.compare.paired_requests`)."""
    fig = go.Figure()
    obs = paired["ttft_s_observed"].to_numpy(float)
    sim = paired["ttft_s_simulated"].to_numpy(float)
    ok = np.isfinite(obs) & np.isfinite(sim) & (obs > 0) & (sim > 0)
    hi = float(max(obs[ok].max(), sim[ok].max())) if ok.any() else 1.0
    lo = float(min(obs[ok].min(), sim[ok].min())) if ok.any() else 1e-3
    fig.add_trace(go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", name="predicted = observed",
                             line={"color": "#999999", "dash": "dash"}, hoverinfo="skip"))  # fmt: skip
    fig.add_trace(
        go.Scatter(
            x=obs[ok], y=sim[ok], mode="markers", name="requests",
            marker={"color": SERIES_COLORS[0], "size": 7, "opacity": 0.75},
            customdata=np.stack([paired["request_id"].to_numpy()[ok], paired["prompt_tokens_observed"].to_numpy()[ok]], axis=-1),
            hovertemplate="request %{customdata[0]} (%{customdata[1]:,} prompt tokens): observed %{x:.3g} s, "
            "kvsim %{y:.3g} s<extra></extra>",
        )
    )  # fmt: skip
    fig.update_xaxes(title_text="observed TTFT (s)", type="log")
    fig.update_yaxes(title_text="kvsim's TTFT (s)", type="log", scaleanchor="x")
    fig.update_layout(hovermode="closest")
    return _finish(fig, "TTFT per request: the server against kvsim", 480)


def observed_series_figure(series: pd.DataFrame) -> go.Figure:
    """The server's KV usage, running and waiting requests at each scrape of its metrics, and
    the simulation's at the same instants (`kvsim.observe.compare.time_series`)."""
    metrics = (("kv_usage", "KV usage (%)", 100.0), ("running", "running (requests)", 1.0),
               ("waiting", "waiting (requests)", 1.0))  # fmt: skip
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=[m[1] for m in metrics])  # fmt: skip
    for row, (name, title, scale) in enumerate(metrics, start=1):
        for side, color in (("observed", SERIES_COLORS[0]), ("simulated", SERIES_COLORS[1])):
            label = "server" if side == "observed" else "kvsim"
            fig.add_trace(
                go.Scatter(x=series["time_s"], y=series[f"{side}_{name}"] * scale, mode="lines", name=label,
                           legendgroup=label, showlegend=row == 1, line={"color": color, "width": 1.4, "shape": "hv"},
                           hovertemplate=f"{label}: %{{y:,.4g}} ({title}) at t=%{{x:,.2f}} s<extra></extra>"),
                row=row, col=1,
            )  # fmt: skip
        fig.update_yaxes(title_text=title, rangemode="tozero", row=row, col=1)
    fig.update_yaxes(range=[0, 105], row=1, col=1)
    fig.update_xaxes(title_text="time since the first request (s)", row=3, col=1)
    fig = _finish(fig, "The server's state at each scrape of /metrics, and kvsim's", 700)
    fig.update_layout(hovermode="x unified")
    return fig
