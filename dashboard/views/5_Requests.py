"""Requests and replicas: one request's life as a Gantt row; running and waiting requests per replica.

Pick a request by id, from the slowest ones, or by clicking it on the TTFT chart; its
timeline comes from the request, iteration and event tables (`kvsim.analysis.request_timeline`).
Below, each replica's ``vllm:num_requests_running``, ``vllm:num_requests_waiting`` and
``vllm:kv_cache_usage_perc`` over time, named as vLLM exports them.
"""

from __future__ import annotations

import _common as common
import plotly.graph_objects as go
import streamlit as st

from kvsim import analysis
from kvsim.analysis import plots
from kvsim.units import format_seconds


def ttft_picker(requests, name: str) -> int | None:
    """TTFT of every request at its arrival; a click on a point picks that request."""
    got = requests.dropna(subset=["ttft_s"])
    scatter = go.Scattergl if len(got) > 5000 else go.Scatter  # SVG while it stays light
    fig = go.Figure(
        scatter(
            x=got["arrival_s"], y=got["ttft_s"], mode="markers", customdata=got["request_id"],
            marker={"size": 5, "color": plots.SERIES_COLORS[0], "opacity": 0.6}, name="request",
            hovertemplate="request %{customdata}: TTFT %{y:.3s}s, arrived at t=%{x:,.1f} s<extra></extra>",
        )
    )  # fmt: skip
    ttft = got["ttft_s"].to_numpy(float)
    if len(ttft) and ttft.min() > 0 and ttft.max() / ttft.min() > 100:
        fig.update_yaxes(**plots.decade_ticks(ttft, plots.seconds_label))
    fig.update_yaxes(title_text="TTFT, log" if fig.layout.yaxis.type == "log" else "TTFT (s)")
    fig.update_xaxes(title_text="arrival time (s)")
    fig = plots._finish(fig, "TTFT per request: click one to see its timeline", 360)
    fig.update_layout(hovermode="closest", showlegend=False)
    event = common.show_figure(fig, name, on_select="rerun", selection_mode="points")
    points = (event or {}).get("selection", {}).get("points", []) if isinstance(event, dict) else []
    if not points and event is not None and hasattr(event, "selection"):
        points = event.selection.get("points", [])
    for p in points:
        data = p.get("customdata")
        if data is not None:
            return int(data[0] if isinstance(data, list) else data)
    return None


def main() -> None:
    st.set_page_config(page_title="kvsim: requests", layout="wide")
    common.show_notices()
    st.title("Requests and replicas")
    run = common.require_run()
    res = run.result
    req = res.requests
    ids = req["request_id"].to_numpy()
    slowest = req.nlargest(5, "ttft_s")["request_id"].tolist()
    clicked = ttft_picker(req, f"{res.scenario.name}_ttft_per_request")
    if clicked is not None:
        st.session_state["w:req.id"] = clicked
    cols = st.columns([1, 3])
    rid = cols[0].number_input(
        "Request id", min_value=int(ids.min()), max_value=int(ids.max()), step=1,
        key=common.kept("req.id", int(slowest[0]) if slowest else int(ids.min()), min_value=int(ids.min()),
                        max_value=int(ids.max())),
    )  # fmt: skip
    common.keep("req.id", int(rid))
    worst = req.set_index("request_id").loc[slowest, "ttft_s"]
    preempted = req[req["num_preemptions"] > 0].nlargest(3, "num_preemptions")["request_id"].tolist()
    cols[1].caption(
        "Slowest TTFT: "
        + ", ".join(f"{i} ({format_seconds(t)})" for i, t in worst.items())
        + ". Most preempted: "
        + (", ".join(map(str, preempted)) or "none")
        + "."
    )
    if int(rid) not in set(ids.tolist()):
        st.error(f"No request {int(rid)} in this run.")
    else:
        transfer = res.scenario.kv_transfer
        timeline = analysis.request_timeline(int(rid), req, res.iterations, res.events,
                                             kv_transfer_bytes_per_s=transfer.bandwidth_bytes_per_s,
                                             kv_transfer_latency_s=transfer.latency_s)  # fmt: skip
        row = req.loc[req["request_id"] == int(rid)].iloc[0]
        title = (f"Request {int(rid)} on {row['replica_id'] or 'no replica'}: {int(row['prompt_tokens']):,} prompt "
                 f"tokens, TTFT {format_seconds(row['ttft_s'])}, E2E {format_seconds(row['e2e_s'])}")  # fmt: skip
        common.show_figure(
            plots.request_timeline_figure(timeline, title=title), f"request_{int(rid)}_timeline"
        )
        st.caption(
            "Queued, decode, transfers and events are exact; prefill chunks are the iterations of its replica "
            "between its first scheduling and its first token (the tables do not list each iteration's "
            "requests). Hover a bar for its numbers."
        )
        common.show_table(timeline, f"request_{int(rid)}_timeline")
    st.subheader("Per replica")
    series = analysis.replica_series(res.iterations)
    common.show_figure(plots.replica_panels_figure(series), f"{res.scenario.name}_replicas")
    common.sync_url()


main()
