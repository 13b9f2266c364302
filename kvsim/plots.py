"""Plotly figures of a run, a sweep or several runs: pure builders, no Streamlit.

Each builder takes tables (a `kvsim.Result`'s DataFrames, or those of `kvsim.analysis`)
and returns a `plotly.graph_objects.Figure` with every axis titled with its unit. The
dashboard shows them; notebooks and scripts can call them the same way and save them with
``fig.write_html(...)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from kvsim import analysis

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
    return fig


def _hline(fig: go.Figure, y: float, text: str, row: int | None = None, *, log_axis: bool = False) -> None:
    """A dashed SLO line across a subplot, labelled at its left end."""
    kw = {} if row is None else {"row": row, "col": 1}
    line = {"color": SLO_COLOR, "dash": "dash", "width": 1.5}
    if not log_axis:
        fig.add_hline(y=y, line=line, annotation_text=text, annotation_position="top left",
                      annotation_font_color=SLO_COLOR, **kw)  # fmt: skip
        return
    # On a log axis the line takes the value but an annotation takes its log10.
    fig.add_hline(y=y, line=line, **kw)
    fig.add_annotation(x=0, xref="x domain", y=math.log10(y), text=text, showarrow=False, xanchor="left",
                       yanchor="bottom", font={"color": SLO_COLOR}, **kw)  # fmt: skip


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
            f"Engine events per {window_s:g}-s window",
            "Waiting queue",
        ),
    )
    ttft = analysis.ttft_samples(requests)
    fig.add_trace(
        go.Scattergl(
            x=ttft["time_s"],
            y=ttft["ttft_s"],
            mode="markers",
            name="TTFT (per request)",
            marker={"size": 4, "color": SAMPLE_COLOR},
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
                customdata=gaps["request_id"], hovertemplate="request %{customdata}: %{y:.0f} ms",
            ),
            row=2, col=1,
        )  # fmt: skip
        # Gaps of seconds beside steps of milliseconds: only a log axis shows both.
        fig.update_yaxes(type="log", row=2, col=1)
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
        ),
        row=4,
        col=1,
    )
    if ttft_slo_s is not None:
        _hline(fig, ttft_slo_s, f"TTFT SLO {ttft_slo_s:g} s", row=1)
    if itl_slo_s is not None:
        _hline(fig, itl_slo_s * 1e3, f"TPOT SLO {itl_slo_s * 1e3:g} ms", row=2, log_axis=len(gaps) > 0)
    if spikes is not None:
        for sp in spikes.itertuples(index=False):
            fig.add_vrect(
                x0=sp.start_s, x1=sp.end_s, fillcolor="rgba(213,94,0,0.12)", line_width=0, row="all", col=1
            )
    fig.update_yaxes(title_text="TTFT (s)", row=1, col=1)
    fig.update_yaxes(title_text="ITL (ms)" + (", log scale" if len(gaps) else ""), row=2, col=1)
    fig.update_yaxes(title_text="events (area ∝ count)", type="category", row=3, col=1)
    fig.update_yaxes(title_text="waiting (requests)", rangemode="tozero", row=4, col=1)
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
) -> go.Figure:
    """Throughput and p99 TTFT / TPOT of sweep points against the swept quantity.

    ``points`` has one row per point with the column ``x`` and the summary columns
    ``throughput_tokens_per_s``, ``ttft_p99_s`` and ``tpot_p99_s``. SLO lines are drawn
    on the latency rows and the knee (`analysis.find_knee`), if any, on all rows.
    """
    pts = points.sort_values(x, kind="stable") if pd.api.types.is_numeric_dtype(points[x]) else points
    fig = make_subplots(
        rows=3,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.07,
        subplot_titles=("Output throughput", "p99 time to first token", "p99 time per output token"),
    )
    series = (
        ("throughput_tokens_per_s", 1.0, "throughput", SERIES_COLORS[0]),
        ("ttft_p99_s", 1.0, "p99 TTFT", SERIES_COLORS[1]),
        ("tpot_p99_s", 1e3, "p99 TPOT", SERIES_COLORS[2]),
    )
    for row, (col, scale, name, color) in enumerate(series, start=1):
        fig.add_trace(
            go.Scatter(
                x=pts[x],
                y=pts[col] * scale,
                mode="lines+markers",
                name=name,
                line={"color": color},
                marker={"size": 8},
            ),
            row=row,
            col=1,
        )
    _hline(fig, ttft_slo_s, f"SLO {ttft_slo_s:g} s", row=2)
    _hline(fig, tpot_slo_s * 1e3, f"SLO {tpot_slo_s * 1e3:g} ms", row=3)
    if knee_x is not None:
        fig.add_vline(x=knee_x, line={"color": "#333333", "dash": "dot"}, row="all", col=1)
        fig.add_annotation(
            x=knee_x,
            y=1.0,
            xref="x",
            yref="paper",
            yanchor="bottom",
            showarrow=False,
            text=f"knee: {knee_x:g}",
        )
    fig.update_yaxes(title_text="throughput (tokens/s)", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="p99 TTFT (s)", rangemode="tozero", row=2, col=1)
    fig.update_yaxes(title_text="p99 TPOT (ms)", rangemode="tozero", row=3, col=1)
    fig.update_xaxes(title_text=x_title, row=3, col=1)
    return _finish(fig, f"Throughput and tail latency against {x_title}", 800)


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
        )
    )
    if overall is not None:
        fig.add_hline(
            y=overall * 100,
            line={"color": "#555555", "dash": "dash"},
            annotation_text=f"whole run: {overall * 100:.1f} %",
            annotation_position="top right",
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
            )
        )
    fig.update_xaxes(title_text="cache capacity (KV blocks, log scale)", type="log")
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
    ``roofline_s``; ``x_titles`` maps each kernel to its x-axis title (with unit).
    """
    kernels: Sequence[str] = list(dict.fromkeys(points["kernel"]))
    cols = min(3, max(1, len(kernels)))
    rows = (len(kernels) + cols - 1) // cols
    fig = make_subplots(rows=max(rows, 1), cols=cols, subplot_titles=list(kernels), vertical_spacing=0.12)
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
                ),
                row=r,
                col=c,
            )
        fig.update_xaxes(title_text=x_titles.get(k, "x"), type="log", row=r, col=c)
        fig.update_yaxes(title_text="time (ms)", type="log", row=r, col=c)
    return _finish(fig, "Measured cost curves against the roofline", 360 * max(rows, 1) + 60)
