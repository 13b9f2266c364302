"""kvsim observe against a fake OpenAI-compatible server (tests/fake_openai.py): real HTTP on
127.0.0.1, scripted token timings, scripted failures.

The timings the client records are checked against what the server did: the fake server
notes when it wrote each token (``time.monotonic()``, the clock asyncio's loop runs on), so
an observed gap between two tokens is the server's gap plus the client's reading jitter.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import ROOT
from fake_openai import FakeServer, Reply

from kvsim.cli import main
from kvsim.results.io import load_result
from kvsim.results.result import ITERATION_COLUMNS, REQUEST_COLUMNS

#: How far a token's observed arrival may lag the server's write (the client reads it; on a
#: loaded 2-core machine the reading process can be kept waiting for tens of milliseconds).
JITTER_S = 0.05


def trace_scenario(tmp_path: Path, rows: list[tuple[float, int, int]], **workload: Any) -> Path:
    """A scenario replaying ``rows`` (send time s, prompt tokens, output tokens) on one H100."""
    trace = tmp_path / "trace.csv"
    trace.write_text("t,p,o\n" + "".join(f"{t},{p},{o}\n" for t, p, o in rows))
    extra = "".join(f"  {k}: {v}\n" for k, v in workload.items())
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: observe-test\nmodel: llama-3-8b\nreplicas: [{gpu: h100-sxm}]\n"
        "workload:\n  kind: trace\n  path: trace.csv\n  format: csv\n"
        "  columns: {timestamp: t, prompt_tokens: p, output_tokens: o}\n  timestamp_unit: s\n" + extra
    )
    return path


def observe(scenario: Path, server: FakeServer, out: Path, *extra: str) -> int:
    return main(
        ["observe", str(scenario), "--url", server.url, "--out", str(out), "--scrape-interval-s", "0.05",
         "--retry-backoff-s", "0.01", *extra]
    )  # fmt: skip


def test_token_times_are_the_servers_own(tmp_path: Path) -> None:
    scenario = trace_scenario(tmp_path, [(0.0, 40, 6), (0.1, 60, 4), (0.15, 30, 5)])
    script = lambda body, i: Reply(ttft_s=0.25 + 0.1 * i, itl_s=0.1)  # noqa: E731
    with FakeServer(script) as server:
        assert observe(scenario, server, tmp_path / "out", "--quiet") == 0
    result = load_result(tmp_path / "out")
    req = result.requests.set_index("request_id")
    assert list(result.requests.columns)[: len(REQUEST_COLUMNS)] == list(REQUEST_COLUMNS)
    assert list(result.iterations.columns)[: len(ITERATION_COLUMNS)] == list(ITERATION_COLUMNS)
    assert req["finished"].all() and (req["observed_status"] == "ok").all()
    assert list(req["output_tokens"]) == [6, 4, 5]
    assert list(req["prompt_tokens"]) == [40, 60, 30]
    # Sent on the scenario's clock (the trace's times), in order.
    assert np.allclose(req["scheduled_s"], [0.0, 0.1, 0.15])
    assert (req["send_lag_s"] >= 0).all() and (req["send_lag_s"] < 0.25).all()
    for rid, body in enumerate(server.bodies):
        arrived, writes = server.events[rid]
        times = np.asarray(req.loc[rid, "token_times_s"], dtype=float)
        # Every gap between two tokens is the server's, to the client's reading jitter.
        assert np.allclose(np.diff(times), np.diff(writes), atol=JITTER_S)
        ttft = req.loc[rid, "ttft_s"]
        assert ttft == pytest.approx(writes[0] - arrived, abs=JITTER_S)
        # The server writes token k at arrived + ttft + k x itl or later (a loaded machine
        # may delay any write, and the ones after it catch up: the schedule is absolute, so
        # no gap has a lower bound), never before.
        due = arrived + 0.25 + 0.1 * rid + 0.1 * np.arange(len(writes))
        assert (np.asarray(writes) >= due - 1e-3).all()
        # TPOT is the server's own pace, to the client's reading jitter.
        server_tpot = (writes[-1] - writes[0]) / (len(writes) - 1)
        assert req.loc[rid, "tpot_s"] == pytest.approx(server_tpot, abs=JITTER_S / (len(writes) - 1))
        assert req.loc[rid, "e2e_s"] == pytest.approx(times[-1] - req.loc[rid, "arrival_s"])
        assert body["max_tokens"] == body["min_tokens"] == req.loc[rid, "output_tokens"]
        assert body["ignore_eos"] is True and body["stream"] is True
        assert len(body["prompt"]) == req.loc[rid, "prompt_tokens"]
    s = result.summary
    assert s["observed"] is True and s["num_finished"] == 3 and s["observed_num_failed"] == 0
    assert s["ttft_p50_s"] == pytest.approx(np.median(req["ttft_s"]))
    # The server's /metrics, scraped into the iterations table.
    it = result.iterations
    assert len(it) >= 5 and it["batch_size"].max() >= 2
    assert it["kv_usage"].max() == pytest.approx(it["batch_size"].max() / 10)
    assert s["total_kv_blocks"] == 1000 and s["server_block_size"] == 16
    assert it["server_generation_tokens"].sum() <= 15


def test_shared_segments_are_shared_token_ids(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: shared\nmodel: llama-3-8b\nreplicas: [{gpu: h100-sxm}]\nseed: 3\n"
        "workload: {kind: synthetic, num_requests: 3, arrival: {kind: constant, rate_per_s: 20},\n"
        "  prompt_tokens: {kind: fixed, tokens: 10}, output_tokens: {kind: fixed, tokens: 2},\n"
        "  shared_prefix_tokens: 48}\n"
    )
    with FakeServer(lambda b, i: Reply(ttft_s=0.01, itl_s=0.01)) as server:
        assert observe(path, server, tmp_path / "out", "--quiet") == 0
    prompts = [b["prompt"] for b in server.bodies]
    assert [len(p) for p in prompts] == [58, 58, 58]
    assert prompts[0][:48] == prompts[1][:48] == prompts[2][:48]
    assert len({tuple(p[48:]) for p in prompts}) == 3  # the user text differs
    assert all(3 <= t < 128_256 for p in prompts for t in p)  # within Llama 3's vocabulary


def test_a_follow_up_turn_resends_what_the_server_generated(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: turns\nmodel: llama-3-8b\nreplicas: [{gpu: h100-sxm}]\n"
        "workload: {kind: synthetic, num_requests: 2, arrival: {kind: constant, rate_per_s: 10},\n"
        "  prompt_tokens: {kind: fixed, tokens: 8}, output_tokens: {kind: fixed, tokens: 3},\n"
        "  sessions: {turns: {kind: fixed, tokens: 2}, think_time_s: 0.1, think_time_dist: fixed,\n"
        "             followup_tokens: {kind: fixed, tokens: 4}}}\n"
    )
    with FakeServer(lambda b, i: Reply(ttft_s=0.02, itl_s=0.01)) as server:
        assert observe(path, server, tmp_path / "out", "--quiet") == 0
    first, second = server.bodies
    assert second["prompt"][:8] == first["prompt"]
    assert second["prompt"][8:11] == [101, 102, 103]  # the token ids the server streamed back
    assert len(second["prompt"]) == 15
    req = load_result(tmp_path / "out").requests.set_index("request_id")
    # Sent think time after the parent's last token.
    assert req.loc[1, "scheduled_s"] == pytest.approx(req.loc[0, "finish_s"] + 0.1, abs=1e-6)


def test_a_benchmark_clients_closed_loop(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: bench\nmodel: llama-3-8b\nreplicas: [{gpu: h100-sxm}]\n"
        "workload: {kind: bench_serve, num_prompts: 5, max_concurrency: 2, num_warmups: 2,\n"
        "  random_input_len: 20, random_output_len: 4}\n"
    )
    with FakeServer(lambda b, i: Reply(ttft_s=0.05, itl_s=0.02)) as server:
        assert observe(path, server, tmp_path / "out", "--quiet") == 0
    result = load_result(tmp_path / "out")
    req = result.requests.sort_values("arrival_s")
    assert int(req["warmup"].sum()) == 2 and result.summary["num_requests"] == 5
    starts = req["arrival_s"].to_numpy()
    ends = req["finish_s"].to_numpy()
    for t in starts:  # at most max_concurrency in flight whenever one is sent
        assert ((starts <= t + 1e-9) & (ends > t + 1e-9)).sum() <= 2
    warm_end = req.loc[req["warmup"], "finish_s"].max()
    assert result.summary["measured_start_s"] == pytest.approx(warm_end)
    assert (req.loc[~req["warmup"], "arrival_s"] >= warm_end - 1e-9).all()


# --------------------------------------------------------------------------- failures


def test_an_unreachable_server_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = trace_scenario(tmp_path, [(0.0, 10, 2)])
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    rc = main(["observe", str(scenario), "--url", f"http://127.0.0.1:{port}/v1", "--out", str(tmp_path / "o"),
               "--connect-timeout-s", "1"])  # fmt: skip
    assert rc == 1
    err = capsys.readouterr().err
    assert "cannot reach the server" in err and f"127.0.0.1:{port}" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "url",
    ["file:///etc/passwd", "ftp://127.0.0.1/v1", "127.0.0.1:8000/v1", "http:///v1", "http://h:0/v1",
     "http://h/v1?x=1", "http://h /v1"],
)  # fmt: skip
def test_urls_other_than_http_are_refused(
    tmp_path: Path, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = trace_scenario(tmp_path, [(0.0, 10, 2)])
    assert main(["observe", str(scenario), "--url", url, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "--url" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_out_never_replaces_a_folder_kvsim_did_not_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = trace_scenario(tmp_path, [(0.0, 10, 2)])
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with FakeServer(lambda b, i: Reply(ttft_s=0.01, itl_s=0.01)) as server:
        assert observe(scenario, server, mine, "--quiet") == 2
        assert server.bodies == []  # refused before anything was sent
        assert "not replaced" in capsys.readouterr().err
        assert (mine / "notes.txt").read_text() == "keep me"
        # A folder kvsim wrote (its .kvsim marker) is replaced by the next observation.
        assert observe(scenario, server, tmp_path / "obs", "--quiet") == 0
        assert observe(scenario, server, tmp_path / "obs", "--quiet") == 0
    assert (tmp_path / "obs" / ".kvsim").is_file() and len(load_result(tmp_path / "obs").requests) == 1


@pytest.mark.parametrize(
    ("flag", "value"), [("--metrics-url", ""), ("--model", ""), ("--model", " "), ("--api-key-env", "")]
)
def test_empty_names_are_refused(
    tmp_path: Path, flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = trace_scenario(tmp_path, [(0.0, 10, 2)])
    with FakeServer() as server:
        assert observe(scenario, server, tmp_path / "o", flag, value) == 2
        assert server.bodies == []
    assert f"{flag}: empty" in capsys.readouterr().err and not (tmp_path / "o").exists()


def _failing(tmp_path: Path, reply: Reply, *extra: str) -> tuple[int, Any, FakeServer]:
    """Three requests; the second gets ``reply``, the others a normal answer."""
    scenario = trace_scenario(tmp_path, [(0.0, 20, 4), (0.05, 20, 6), (0.1, 20, 4)])
    script = lambda body, i: reply if body["max_tokens"] == 6 else Reply(ttft_s=0.02, itl_s=0.01)  # noqa: E731
    with FakeServer(script) as server:
        rc = observe(scenario, server, tmp_path / "out", "--quiet", *extra)
    result = load_result(tmp_path / "out")
    return rc, result, server


def test_a_server_error_is_retried_then_marked(tmp_path: Path) -> None:
    rc, result, server = _failing(tmp_path, Reply(status=500, message="boom: out of memory"))
    assert rc == 1
    req = result.requests.set_index("request_id")
    assert req.loc[1, "observed_status"] == "http_error" and req.loc[1, "rejected"]
    assert req.loc[1, "num_attempts"] == 3 and req.loc[1, "http_status"] == 500
    assert "HTTP 500: boom: out of memory" in req.loc[1, "error"]
    assert req.loc[[0, 2], "finished"].all()  # nothing else lost
    assert result.summary["observed_num_http_error"] == 1 and result.summary["observed_num_retries"] == 2
    assert len([b for b in server.bodies if b["max_tokens"] == 6]) == 3


def test_a_busy_status_then_success_counts_as_one_request(tmp_path: Path) -> None:
    scenario = trace_scenario(tmp_path, [(0.0, 20, 4)])
    script = lambda body, i: Reply(status=503) if i == 0 else Reply(ttft_s=0.02, itl_s=0.01)  # noqa: E731
    with FakeServer(script) as server:
        assert observe(scenario, server, tmp_path / "out", "--quiet") == 0
    req = load_result(tmp_path / "out").requests
    assert req.loc[0, "observed_status"] == "ok" and req.loc[0, "num_attempts"] == 2
    assert len(server.bodies) == 2


def test_a_client_error_is_not_retried(tmp_path: Path) -> None:
    rc, result, _ = _failing(tmp_path, Reply(status=400, message="prompt too long"))
    assert rc == 1
    assert result.requests.loc[1, "num_attempts"] == 1
    assert "prompt too long" in result.requests.loc[1, "error"]


def test_a_stream_cut_midway_keeps_its_tokens(tmp_path: Path) -> None:
    rc, result, _ = _failing(tmp_path, Reply(ttft_s=0.02, itl_s=0.02, cut_after=2))
    assert rc == 1
    row = result.requests.set_index("request_id").loc[1]
    assert row["observed_status"] == "stream_cut" and not row["finished"] and not row["rejected"]
    assert row["output_tokens"] == 2 and len(row["token_times_s"]) == 2 and row["num_attempts"] == 1
    assert math.isfinite(row["ttft_s"]) and math.isnan(row["e2e_s"])
    assert result.summary["observed_num_stream_cut"] == 1 and result.summary["num_finished"] == 2


def test_a_server_ignoring_max_tokens_is_marked_and_cut(tmp_path: Path) -> None:
    rc, result, _ = _failing(tmp_path, Reply(ttft_s=0.02, itl_s=0.01, extra_tokens=50))
    assert rc == 1
    row = result.requests.set_index("request_id").loc[1]
    assert row["observed_status"] == "overlong" and "max_tokens" in row["error"]
    assert row["output_tokens"] == 7  # closed at the first token beyond the 6 asked for
    assert result.summary["observed_num_overlong"] == 1


def test_a_stream_that_never_ends_is_bounded(tmp_path: Path) -> None:
    start = time.monotonic()
    rc, result, _ = _failing(tmp_path, Reply(ttft_s=0.01, itl_s=0.005, forever=True))
    assert rc == 1 and time.monotonic() - start < 30
    assert result.requests.loc[1, "observed_status"] == "overlong"


def test_an_early_end_of_sequence_is_short(tmp_path: Path) -> None:
    rc, result, _ = _failing(tmp_path, Reply(ttft_s=0.01, itl_s=0.01, stop_after=3))
    assert rc == 1
    row = result.requests.loc[1]
    assert row["observed_status"] == "short" and row["output_tokens"] == 3


def test_silence_beyond_the_read_timeout(tmp_path: Path) -> None:
    rc, result, _ = _failing(tmp_path, Reply(ttft_s=5.0), "--read-timeout-s", "0.3")
    assert rc == 1
    row = result.requests.loc[1]
    assert row["observed_status"] == "timeout" and "read_timeout_s" in row["error"]


def test_a_huge_event_line_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import kvsim.observe.client as client

    monkeypatch.setattr(client, "MAX_SSE_LINE_BYTES", 4096)
    rc, result, _ = _failing(tmp_path, Reply(ttft_s=0.01, text_bytes=100_000))
    assert rc == 1
    row = result.requests.loc[1]
    assert row["observed_status"] == "bad_response" and "4,096 bytes" in row["error"]


def test_without_metrics_the_series_is_empty_and_marked(tmp_path: Path) -> None:
    scenario = trace_scenario(tmp_path, [(0.0, 20, 3)])
    with FakeServer(lambda b, i: Reply(ttft_s=0.01, itl_s=0.01)) as server:
        assert observe(scenario, server, tmp_path / "out", "--quiet", "--no-metrics") == 0
    result = load_result(tmp_path / "out")
    assert len(result.iterations) == 0 and result.summary["observed_num_scrapes"] == 0
    assert math.isnan(result.summary["kv_usage_mean"]) and math.isnan(result.summary["num_preemptions"])


def test_ctrl_c_keeps_what_was_measured(tmp_path: Path) -> None:
    scenario = trace_scenario(tmp_path, [(0.0, 20, 30), (0.05, 20, 30), (30.0, 20, 5)])
    with FakeServer(lambda b, i: Reply(ttft_s=0.05, itl_s=0.1)) as server:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kvsim", "observe", str(scenario), "--url", server.url, "--out",
             str(tmp_path / "out"), "--quiet"],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while len(server.bodies) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.6)  # a few tokens in
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    result = load_result(tmp_path / "out")
    req = result.requests.set_index("request_id")
    assert list(req["observed_status"]) == ["interrupted", "interrupted", "not_sent"]
    assert (req.loc[[0, 1], "output_tokens"] > 0).all() and (req.loc[[0, 1], "output_tokens"] < 30).all()
    assert result.summary["observed_interrupted"] is True


def test_compare_simulates_the_observation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = trace_scenario(tmp_path, [(0.0, 40, 6), (0.1, 60, 4)])
    with FakeServer(lambda b, i: Reply(ttft_s=0.05, itl_s=0.02)) as server:
        assert observe(scenario, server, tmp_path / "out", "--quiet") == 0
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "out"), "--save-simulation", str(tmp_path / "sim")]) == 0
    text = capsys.readouterr().out
    assert "TTFT p50" in text and "per request (2 finished on both sides)" in text
    assert main(["compare", str(tmp_path / "out"), str(tmp_path / "sim"), "--json"]) == 0
    import json

    data = json.loads(capsys.readouterr().out)
    assert data["requests"]["num_paired"] == 2
    assert {row["metric"] for row in data["metrics"]} >= {
        "ttft_p50_s",
        "tpot_p99_s",
        "throughput_tokens_per_s",
    }


# --------------------------------------------------------------------------- pieces


def test_a_real_vllm_exposition_is_read() -> None:
    """/metrics as vLLM 0.32.0 (CPU) served it after one request of 5 + 400 tokens."""
    import gzip

    from kvsim.observe.metrics import cache_geometry, parse_exposition

    text = gzip.decompress((ROOT / "tests/fixtures/observe/vllm-0.32.0-metrics.txt.gz").read_bytes()).decode()
    sample = parse_exposition(text, 1.5)
    assert sample.time_s == 1.5
    assert sample.values == {
        "num_running": 0.0,
        "num_waiting": 0.0,
        "kv_usage": 0.0,
        "prefix_cache_queries_tokens": 5.0,
        "prefix_cache_hits_tokens": 0.0,
        "num_preemptions": 0.0,
        "prompt_tokens": 5.0,
        "generation_tokens": 400.0,
        "num_steps": 400.0,
        "ttft_sum_s": pytest.approx(0.03508424758911133),
        "ttft_count": 1.0,
        "e2e_sum_s": pytest.approx(2.4498608112335205),
        "e2e_count": 1.0,
        "queue_time_sum_s": pytest.approx(4.457599970919546e-05),
        "queue_time_count": 1.0,
    }
    assert cache_geometry([sample]) == {"block_size": 32, "num_gpu_blocks": 64}


def test_counters_grow_across_a_restart_and_engines_add_up() -> None:
    from kvsim.observe.metrics import Sample, counter_deltas, parse_exposition

    two_engines = (
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{engine="0"} 3\nvllm:num_requests_running{engine="1"} 4\n'
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        'vllm:kv_cache_usage_perc{engine="0"} 0.2\nvllm:kv_cache_usage_perc{engine="1"} 0.4\n'
    )
    s = parse_exposition(two_engines, 0.0)
    assert s.values["num_running"] == 7 and s.values["kv_usage"] == pytest.approx(0.3)
    samples = [Sample(t, {"generation_tokens": v}) for t, v in enumerate([10.0, 30.0, 5.0, 9.0])]
    assert counter_deltas(samples) == {"generation_tokens": 20 + 5 + 4}  # the reset counts from 0
    with pytest.raises(ValueError):
        parse_exposition("vllm:num_requests_running{engine=0 3\n", 0.0)  # not the text format


def test_server_sent_events_are_bounded_and_counted() -> None:
    from kvsim.observe.stream import SseLines, StreamError, TokenCounter, parse_event

    lines = SseLines(max_line_bytes=64, max_total_bytes=200)
    assert lines.feed(b'data: {"a"') == []
    assert lines.feed(b": 1}\r\n\ndata: [DONE]\n") == ['data: {"a": 1}', "", "data: [DONE]"]
    with pytest.raises(StreamError, match="longer than 64 bytes"):
        lines.feed(b"x" * 65)
    with pytest.raises(StreamError, match="longer than 200 bytes"):
        SseLines(64, 200).feed(b"\n" * 201)
    with pytest.raises(StreamError, match="not UTF-8"):
        SseLines(64, 200).feed(b"\xff\n")
    counter = TokenCounter()
    # Continuous usage counts two tokens in one event; token ids; text alone counts one.
    events = [
        '{"choices": [{"text": " a b", "token_ids": [5, 6]}], "usage": {"completion_tokens": 2}}',
        '{"choices": [{"text": " c", "token_ids": [7]}], "usage": {"completion_tokens": 3}}',
        '{"choices": [], "usage": {"completion_tokens": 3, "prompt_tokens": 9, '
        '"prompt_tokens_details": {"cached_tokens": 4}}}',
    ]
    assert [counter.new_tokens(parse_event(e)) for e in events] == [2, 1, 0]
    assert counter.token_ids == [5, 6, 7]
    last = parse_event(events[-1])
    assert (last.prompt_tokens, last.cached_tokens) == (9, 4)
    plain = TokenCounter()
    assert [plain.new_tokens(parse_event('{"choices": [{"text": "x"}]}')) for _ in range(3)] == [1, 1, 1]
    assert parse_event('{"error": {"message": "boom", "code": 500}}').error == "boom"
    with pytest.raises(StreamError):
        parse_event("[1, 2]")


def test_prompts_share_tokens_where_segments_are_shared() -> None:
    from kvsim.observe.prompts import PromptBuilder
    from kvsim.request import RequestSpec, Segment

    builder = PromptBuilder(vocab_size=100)
    a = RequestSpec(0, 0.0, (Segment(0, 40), Segment(7, 5)), 3)
    b = RequestSpec(1, 0.0, (Segment(0, 40), Segment(8, 5)), 3)
    follow = RequestSpec(
        2, 0.0, (Segment(0, 40), Segment(7, 5), Segment(-1, 3), Segment(9, 2)), 3, parent_id=0
    )
    ta, tb = builder.token_ids(a), builder.token_ids(b)
    assert ta[:40] == tb[:40] and ta[40:] != tb[40:] and all(3 <= t < 100 for t in ta + tb)
    assert builder.token_ids(a) == ta  # pinned
    unknown = builder.token_ids(follow)[45:48]  # the parent's output, not yet reported
    builder.record_output(0, [11, 12, 13])
    assert builder.token_ids(follow)[:48] == [*ta, 11, 12, 13]
    assert unknown != [11, 12, 13] and len(builder.token_ids(follow)) == 50
    assert len(builder.text(a).split()) == 45
    with pytest.raises(ValueError, match="vocab_size"):
        PromptBuilder(vocab_size=10)
