"""Hostile input, second round (issue 19): nothing hangs and no work grows without bound.

Special files (a FIFO without a writer, ``/dev/zero``, ``/dev/urandom``, a directory, a
Unix socket) given to every command that reads a file; sweeps with huge grids and absurd
``--jobs``; workers of a killed sweep; options that multiply work (``spikes --window``,
``cache-curve --capacities``, ``capacity --values``, ``sharing --widths``); measurement
CSVs and fixtures that would fill memory; and the range of every numeric option. Each
case must end in a clean error (exit 2, the file or option and the limit named) within
seconds of wall time: a watchdog on wall time (SIGALRM) turns a hang into a failure.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import kvsim
from kvsim import analysis, limits
from kvsim.analysis.cache_curve import cache_curve, parse_capacities
from kvsim.cli import main
from kvsim.errors import KvsimError, TraceError, WorkLimitError
from kvsim.planning.capacity import CapacityError, find_capacity, parse_values
from kvsim.planning.sweep import SweepError, load_sweep, max_jobs, run_points, run_sweep
from kvsim.request import RequestSpec, Segment
from kvsim.scenario.schema import Scenario

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGALRM"), reason="needs POSIX signals")

#: Wall-time bound of one refusal, seconds. The refusals take milliseconds; a special file
#: read to the end, or a FIFO waiting for a writer, never ends.
HANG_S = 20.0


class Hung(Exception):
    """Raised by the wall-time watchdog."""


@contextlib.contextmanager
def wall_watchdog(seconds: float = HANG_S) -> Iterator[None]:
    """Interrupt the body after ``seconds`` of wall time (SIGALRM interrupts a blocked open())."""

    def alarm(signum: int, frame: Any) -> None:
        raise Hung(f"still running after {seconds} s of wall time")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """``kvsim ARGS`` in this process under the watchdog: (exit code, stderr)."""
    with wall_watchdog():
        try:
            code = main(args)
        except SystemExit as exc:  # argparse refusing an option value
            code = int(exc.code or 0)
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return code, err


# --------------------------------------------------------------------------- special files


@pytest.fixture
def specials() -> Iterator[dict[str, Path]]:
    """Special files by kind; the FIFO and the socket in a short folder (socket paths are short)."""
    folder = Path(tempfile.mkdtemp(prefix="kvs", dir="/tmp"))
    fifo = folder / "fifo"
    os.mkfifo(fifo)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(folder / "sock"))
    sock.listen(1)
    (folder / "dir").mkdir()
    kinds = {"fifo": fifo, "socket": folder / "sock", "directory": folder / "dir"}
    kinds |= {p.name: p for p in (Path("/dev/zero"), Path("/dev/urandom")) if p.exists()}
    try:
        yield kinds
    finally:
        sock.close()
        shutil.rmtree(folder)


KIND_WORDS = {
    "fifo": "a FIFO",
    "socket": "a socket",
    "directory": "a directory",
    "zero": "a character device",
    "urandom": "a character device",
}
KINDS = list(KIND_WORDS)


def _kind(specials: dict[str, Path], kind: str) -> Path:
    if kind not in specials:
        pytest.skip(f"no {kind} on this machine")
    return specials[kind]


def _scenario(tmp_path: Path, workload: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(f"workload: {workload}\n")
    return path


#: Commands reading the special file ``{f}`` directly, with the words the error must hold.
DIRECT = {
    "validate": (["validate", "{f}"], "not a regular file"),
    "run": (["run", "{f}", "--no-progress"], "not a regular file"),
    "sweep_file": (["sweep", "{f}", "--out", "{tmp}/out", "--jobs", "1"], "not a regular file"),
    "capacity": (
        ["capacity", "{f}", "--knob", "seed", "--values", "1,2", "--jobs", "1"],
        "not a regular file",
    ),
    "spikes": (["spikes", "{f}"], "not a regular file"),
    "exposure": (["exposure", "{f}"], "not a regular file"),
    "sharing": (["sharing", "{f}"], "not a regular file"),
    "trace_stats": (["trace-stats", "{f}", "--format", "mooncake"], "not a regular file"),
    "cache_curve": (["cache-curve", "{f}", "--format", "azure"], "not a regular file"),
    "predict_points": (
        [
            "predict",
            "--cost-model",
            "roofline",
            "--model",
            "llama-3-8b",
            "--gpu",
            "h100-sxm",
            "--points",
            "{f}",
        ],
        "not a regular file",
    ),
    "predict_profile": (
        ["predict", "--cost-model", "{f}", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--points", "{csv}"],
        "not a regular file",
    ),
    "fit_measurements": (
        [
            "calibrate",
            "--fit-measurements",
            "{f}",
            "--model",
            "llama-3-8b",
            "--gpu",
            "h200",
            "--out",
            "{tmp}/o.json",
        ],
        "not a regular file",
    ),
    "compare_profile": (["calibrate", "--compare", "{f}"], "not a regular file"),
    "fit_roofline_profile": (["calibrate", "--fit-roofline", "{f}"], "not a regular file"),
    "fit_model_spec": (["fit", "--model", "{f}", "--gpu", "h100-sxm"], "{f}"),
    "kv_size_gpu_spec": (["kv-size", "--model", "llama-3-8b", "--gpu", "{f}"], "{f}"),
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("command", list(DIRECT))
def test_every_reading_command_refuses_special_files(
    command: str, kind: str, specials: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    special = _kind(specials, kind)
    csv = tmp_path / "p.csv"
    csv.write_text("tp,phase,batch_size,prompt_tokens,context_tokens,time_s\n1,prefill,1,128,0,0.05\n")
    template, words = DIRECT[command]
    args = [a.format(f=special, tmp=tmp_path, csv=csv) for a in template]
    start = time.perf_counter()
    code, err = _cli(args, capsys)
    assert code == 2 and str(special) in err and words.format(f=special) in err, err
    assert time.perf_counter() - start < HANG_S
    if command not in ("fit_model_spec", "kv_size_gpu_spec"):  # those read a spec only from a regular file
        assert KIND_WORDS[kind] in err or kind == "directory", err
    assert not (tmp_path / "out").exists()  # a refused sweep writes nothing


#: Scenario files naming the special file ``{f}`` as a trace or a length file.
INDIRECT = {
    "trace": "{kind: trace, path: {f}, format: mooncake}",
    "mixture_trace": "{kind: mixture, components: [{num_requests: 2}, {kind: trace, path: {f}, format: azure}]}",
    "empirical_lengths": "{prompt_tokens: {kind: empirical, path: {f}, format: mooncake, field: prompt}, "
    "num_requests: 5}",
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("where", list(INDIRECT))
@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_special_file_named_by_a_scenario_never_hangs_validate_or_run(
    command: str,
    where: str,
    kind: str,
    specials: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    special = _kind(specials, kind)
    scenario = _scenario(tmp_path, INDIRECT[where].replace("{f}", str(special)))
    code, err = _cli([command, str(scenario), *(["--no-progress"] if command == "run" else [])], capsys)
    assert code == 2 and str(special) in err and "not a regular file" in err, err


@pytest.mark.parametrize("kind", KINDS)
def test_the_api_refuses_special_trace_files(kind: str, specials: dict[str, Path]) -> None:
    from kvsim.workload.config import TraceWorkload
    from kvsim.workload.traces import replay_trace

    special = _kind(specials, kind)
    with wall_watchdog(), pytest.raises(TraceError, match="not a regular file"):
        replay_trace(TraceWorkload(path=str(special), format="mooncake"))
    with wall_watchdog(), pytest.raises(KvsimError, match="not a regular file"):
        kvsim.run({"workload": {"kind": "trace", "path": str(special), "format": "azure"}})


@pytest.mark.parametrize("kind", KINDS)
def test_a_sweep_base_or_point_record_that_is_a_special_file(
    kind: str, specials: dict[str, Path], tmp_path: Path
) -> None:
    special = _kind(specials, kind)
    (tmp_path / "s.yaml").write_text(f"base: {special}\n")
    with wall_watchdog(), pytest.raises(KvsimError, match="not a regular file"):
        load_sweep(tmp_path / "s.yaml")
    # A point.json of a sweep folder replaced by a FIFO (or a link to a device): the point
    # runs again, nothing waits, and the record is written anew without opening the FIFO.
    (tmp_path / "b.yaml").write_text("workload: {num_requests: 2}\n")
    (tmp_path / "t.yaml").write_text("base: b.yaml\ngrid: {seed: [1]}\n")
    _, (point,) = load_sweep(tmp_path / "t.yaml")
    assert run_sweep(tmp_path / "t.yaml", tmp_path / "out", runner=_fake_runner).num_ok == 1
    record = tmp_path / "out" / "points" / point.point_id / "point.json"
    record.unlink()
    if kind == "fifo":
        os.mkfifo(record)
    else:
        os.symlink(special, record)
    with wall_watchdog():
        report = run_sweep(tmp_path / "t.yaml", tmp_path / "out", runner=_fake_runner)
    assert (report.num_skipped, report.num_ok) == (0, 1)
    assert json.loads(record.read_text())["status"] == "ok"


def test_a_fixture_folder_with_a_fifo_or_a_gzip_bomb(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from kvsim.validation import fixtures

    os.mkfifo(tmp_path / "a.json.gz")
    code, err = _cli(["verify-vllm", "--fixtures", str(tmp_path)], capsys)
    assert code == 2 and "a.json.gz: not a regular file" in err
    os.unlink(tmp_path / "a.json.gz")
    monkeypatch.setattr(fixtures, "MAX_FIXTURE_BYTES", 1024 * 1024)
    with gzip.open(tmp_path / "b.json.gz", "wb") as fh:
        fh.write(b" " * (4 * 1024 * 1024))  # 4 MB of blanks in about 4 KB
    code, err = _cli(["verify-vllm", "--fixtures", str(tmp_path)], capsys)
    assert code == 2 and "decompresses to more than 1,048,576 bytes" in err


def test_the_fixture_limit_is_the_documented_one() -> None:
    from kvsim.validation import fixtures

    assert fixtures.MAX_FIXTURE_BYTES == limits.MAX_FIXTURE_BYTES  # repeated: that module is stdlib only


def test_a_special_file_is_never_opened(specials: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """The path is looked at first: a device is not even opened (opening some has side effects)."""
    from kvsim import inputs

    opened: list[str] = []
    real_open = os.open
    monkeypatch.setattr(inputs.os, "open", lambda p, *a: opened.append(str(p)) or real_open(p, *a))
    for special in specials.values():
        with pytest.raises(inputs.NotRegularFileError):
            inputs.read_input(special, 10)
    assert opened == []


def test_a_file_larger_than_its_cap_is_refused_from_its_size(tmp_path: Path) -> None:
    from kvsim import inputs

    big = tmp_path / "big"
    with big.open("wb") as fh:
        fh.truncate(limits.MAX_YAML_BYTES + 1)  # sparse: the size alone says it is too large
    with pytest.raises(inputs.FileTooLargeError, match="larger than 1,048,576 bytes"):
        inputs.read_input(big, limits.MAX_YAML_BYTES)
    with pytest.raises(KvsimError, match="larger than 1,048,576 bytes"):
        kvsim.load_scenario(big)


def test_trace_size_and_line_limits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kvsim.workload import traces
    from kvsim.workload.config import TraceWorkload

    path = tmp_path / "t.jsonl"
    row = '{"timestamp": 0, "input_length": 5, "output_length": 5, "hash_ids": [1]}\n'
    path.write_text(row * 5)
    monkeypatch.setattr(traces, "MAX_TRACE_LINES", 3)
    with pytest.raises(TraceError, match=r"t\.jsonl, line 4: a trace holds at most 3 lines"):
        traces.replay_trace(TraceWorkload(path=str(path), format="mooncake"))
    monkeypatch.setattr(traces, "MAX_TRACE_LINES", 100)
    monkeypatch.setattr(traces, "MAX_TRACE_BYTES", 100)
    with pytest.raises(TraceError, match=r"t\.jsonl: a trace holds at most 100 lines and 100 bytes"):
        traces.replay_trace(TraceWorkload(path=str(path), format="mooncake"))


def test_hash_ids_of_a_trace_are_bounded_in_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kvsim.workload import traces
    from kvsim.workload.config import TraceWorkload

    path = tmp_path / "t.jsonl"
    row = '{"timestamp": 0, "input_length": 2048, "output_length": 5, "hash_ids": [1, 2, 3, 4]}\n'
    path.write_text(row * 3)
    monkeypatch.setattr(traces, "MAX_TRACE_HASH_IDS", 11)
    with pytest.raises(TraceError, match=r"t\.jsonl, line 3: more than 11 hash ids in all"):
        traces.replay_trace(TraceWorkload(path=str(path), format="mooncake"))
    monkeypatch.setattr(traces, "MAX_TRACE_HASH_IDS", 12)
    assert len(traces.replay_trace(TraceWorkload(path=str(path), format="mooncake"))[0]) == 3


# --------------------------------------------------------------------------- sweeps


def _fake_runner(scenario: Scenario) -> tuple[dict[str, Any], dict[str, bytes]]:
    return {"seed": scenario.seed}, {}


def test_a_huge_grid_is_counted_before_it_is_expanded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "b.yaml").write_text("seed: 1\n")
    values = ", ".join(str(i) for i in range(2000))
    sweep = tmp_path / "s.yaml"  # 27 KB: 8 billion points
    sweep.write_text(
        f"base: b.yaml\ngrid:\n  seed: [{values}]\n  workload.num_requests: [{values}]\n"
        f"  replicas.0.count: [{values}]\n"
    )
    start = time.process_time()
    with pytest.raises(SweepError, match=r"8,000,000,000 points \(2,000 x 2,000 x 2,000\), more than 10,000"):
        load_sweep(sweep)
    assert time.process_time() - start < 2.0
    code, err = _cli(["sweep", str(sweep), "--out", str(tmp_path / "out"), "--jobs", "1"], capsys)
    assert code == 2 and "more than 10,000 (the most kvsim runs in one sweep)" in err
    assert not (tmp_path / "out").exists()


def test_listed_points_times_the_grid_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import kvsim.planning.sweep

    (tmp_path / "b.yaml").write_text("seed: 1\n")
    sweep = tmp_path / "s.yaml"
    sweep.write_text(
        "base: b.yaml\npoints: [{seed: 1}, {seed: 2}]\ngrid: {workload.num_requests: [1, 2, 3]}\n"
    )
    monkeypatch.setattr(kvsim.planning.sweep, "MAX_SWEEP_POINTS", 6)
    assert len(load_sweep(sweep)[1]) == 6  # the limit itself is allowed
    monkeypatch.setattr(kvsim.planning.sweep, "MAX_SWEEP_POINTS", 5)
    with pytest.raises(SweepError, match=r"6 points \(2 points x 3\), more than 5"):
        load_sweep(sweep)


@pytest.mark.parametrize("jobs", [0, -1, 100_000, 2**63])
def test_jobs_out_of_range_are_refused_before_anything_runs(
    jobs: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "b.yaml").write_text("workload: {num_requests: 2}\n")
    (tmp_path / "s.yaml").write_text("base: b.yaml\ngrid: {seed: [1, 2]}\n")
    with pytest.raises(SweepError, match=r"--jobs must be between 1 and \d+"):
        run_sweep(tmp_path / "s.yaml", tmp_path / "out", jobs=jobs, runner=_fake_runner)
    with pytest.raises(SweepError, match="--jobs must be between"):
        list(run_points([], _fake_runner, jobs=jobs))
    with pytest.raises(SweepError, match="--jobs must be between"):
        find_capacity(None, "seed", list(range(1, 2000)), runner=_fake_runner, jobs=jobs)
    for command in (
        ["sweep", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "out")],
        ["capacity", "--knob", "seed", "--values", "1,2"],
    ):
        code, err = _cli([*command, "--jobs", str(jobs)], capsys)
        assert code == 2 and "--jobs" in err and "must be between 1 and" in err, err
    assert not (tmp_path / "out").exists()


def test_jobs_within_the_limit_run(tmp_path: Path) -> None:
    (tmp_path / "b.yaml").write_text("workload: {num_requests: 2}\n")
    (tmp_path / "s.yaml").write_text("base: b.yaml\ngrid: {seed: [1, 2]}\n")
    assert max_jobs() == min(limits.MAX_JOBS, limits.JOBS_PER_CPU * (os.cpu_count() or 1))
    assert max_jobs("ray", "ray://head:10001") == limits.MAX_JOBS
    report = run_sweep(tmp_path / "s.yaml", tmp_path / "out", jobs=max_jobs(), runner=_fake_runner)
    assert report.num_ok == 2  # two points: two workers, whatever --jobs says


KILL_SCRIPT = """
import os, sys, time
from pathlib import Path
from kvsim.planning.sweep import run_sweep

def sleepy(scenario):
    Path(sys.argv[3], str(os.getpid())).write_text("")
    time.sleep(120)
    return {}, {}

run_sweep(sys.argv[1], sys.argv[2], jobs=2, runner=sleepy)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")  # a zombie has ended; only its exit status waits for a reaper


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_workers_of_a_killed_sweep_end_with_it(tmp_path: Path) -> None:
    (tmp_path / "b.yaml").write_text("workload: {num_requests: 2}\n")
    (tmp_path / "s.yaml").write_text("base: b.yaml\ngrid: {seed: [1, 2, 3, 4]}\n")
    (tmp_path / "pids").mkdir()
    (tmp_path / "kill.py").write_text(KILL_SCRIPT)
    proc = subprocess.Popen(
        [
            sys.executable,
            str(tmp_path / "kill.py"),
            str(tmp_path / "s.yaml"),
            str(tmp_path / "out"),
            str(tmp_path / "pids"),
        ]
    )
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while len(workers) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
            workers = [int(p.name) for p in (tmp_path / "pids").iterdir()]
        assert len(workers) == 2, "the workers never started"
        proc.kill()  # SIGKILL: the parent cannot clean up
        proc.wait()
        deadline = time.monotonic() + 10
        while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [pid for pid in workers if _alive(pid)] == []
    finally:
        proc.kill()
        for pid in workers:  # never leave an orphan behind, even when the test fails
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


# --------------------------------------------------------------------------- options that multiply work


TINY = ["--set", "workload.num_requests=20", "--set", "workload.output_tokens={kind: fixed, tokens: 4}"]


def test_spikes_window_that_would_cut_the_run_into_too_many_windows(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, err = _cli(["spikes", *TINY, "--window", "1e-300"], capsys)
    assert code == 2 and "--window 1e-300: cuts the run's" in err and "more than 100,000 windows" in err
    code, _ = _cli(["spikes", *TINY, "--window", "0.5"], capsys)
    assert code == 0


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-1", "1e-400", "1e300", "x"])
def test_spikes_window_values_argparse_refuses(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _cli(["spikes", *TINY, f"--window={value}"], capsys)
    assert code == 2 and "argument --window" in err, err


def test_rolling_statistics_bound_the_number_of_windows() -> None:
    import pandas as pd

    start = time.process_time()
    with pytest.raises(WorkLimitError, match="more than 100,000 windows"):
        analysis.rolling_quantiles([0.0, 60.0], [1.0, 2.0], window_s=1e-300)
    with pytest.raises(WorkLimitError, match="more than 100,000 windows"):
        analysis.rolling_quantiles([0.0, 60.0], [1.0, 2.0], window_s=1.0, step_s=1e-9)
    requests = pd.DataFrame(
        {"first_scheduled_s": [0.0, 60.0], "prefix_cache_hits_tokens": [0, 5], "prompt_tokens": [10, 10]}
    )
    with pytest.raises(WorkLimitError, match="more than 100,000 windows"):
        analysis.prefix_hit_rate_over_time(requests, window_s=1e-300)
    for bad in (float("nan"), 0.0, -1.0):
        with pytest.raises(ValueError, match="must be > 0"):
            analysis.rolling_quantiles([0.0], [1.0], window_s=bad)
        with pytest.raises(ValueError, match="must be > 0"):
            analysis.prefix_hit_rate_over_time(requests, window_s=bad)
    assert time.process_time() - start < 1.0
    assert len(analysis.rolling_quantiles([0.0, 60.0], [1.0, 2.0], window_s=60 / 100_000)) == 100_000


def _csv_trace(tmp_path: Path, rows: list[tuple[float, int, int]]) -> Path:
    path = tmp_path / "t.csv"
    path.write_text("t,in,out\n" + "".join(f"{t},{i},{o}\n" for t, i, o in rows))
    return path


COLS = json.dumps({"timestamp": "t", "prompt_tokens": "in", "output_tokens": "out"})


def test_cache_curve_counts_capacities_and_blocks_before_building_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _csv_trace(tmp_path, [(0, 2**31 - 1, 1), (1, 100, 1)])
    base = ["cache-curve", str(trace), "--format", "csv", "--columns", COLS]
    start = time.process_time()
    code, err = _cli([*base, "--capacities", ",".join(str(i + 1) for i in range(3000))], capsys)
    assert code == 2 and "--capacities: 3,000 capacities; at most 1,000" in err
    code, err = _cli([*base, "--block-size", "1", "--capacities", "inf"], capsys)  # 2**31 keys
    assert code == 2 and "2,147,483,747 blocks, more than 20,000,000" in err
    code, err = _cli([*base, "--block-size", "16384", "--capacities", "inf"], capsys)
    assert code == 0, err
    assert time.process_time() - start < 2.0


def test_cache_curve_bounds_capacities_times_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    import kvsim.analysis.cache_curve as cc

    requests = [RequestSpec(i, float(i), (Segment(1, 64),), 1) for i in range(10)]  # 10 x 4 blocks
    monkeypatch.setattr(cc, "MAX_CACHE_CURVE_LOOKUPS", 80)
    assert len(cache_curve(requests, [1, None], block_size=16)) == 2  # 2 x 40 lookups: the limit
    with pytest.raises(WorkLimitError, match=r"3 capacities x 40 blocks are 120 block lookups, more than 80"):
        cache_curve(requests, [1, 2, None], block_size=16)
    with pytest.raises(ValueError, match="at most 1,000"):
        parse_capacities(",".join(["5"] * 1001))


def test_capacity_values_are_counted_before_they_are_parsed(capsys: pytest.CaptureFixture[str]) -> None:
    many = ",".join(str(i) for i in range(1, 20_002))
    start = time.process_time()
    with pytest.raises(CapacityError, match="20,001 values; at most 10,000"):
        parse_values(many)
    with pytest.raises(CapacityError, match="at most 10,000"):
        parse_values("1:20001")
    with pytest.raises(CapacityError, match="10,001 values; at most 10,000"):
        parse_values("1:10001")
    assert len(parse_values("1:10000")) == 10_000
    for text in ("0:1e300:1e-300", "0:" + "9" * 400, "1e-300:1e-299:1e-310", "0:1e308:1e-308"):
        with pytest.raises(CapacityError, match="--range"):  # no OverflowError, no list of 1e308
            parse_values(text)
    with pytest.raises(CapacityError, match="20,001 candidate values; at most 10,000"):
        find_capacity(None, "seed", list(range(1, 20_002)), runner=_fake_runner)
    code, err = _cli(["capacity", "--knob", "seed", "--values", many], capsys)
    assert code == 2 and "at most 10,000" in err
    assert time.process_time() - start < 2.0


def test_sharing_widths_are_counted_before_anything_runs(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from kvsim.analysis import sharing

    def no_run(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("ran although the widths were refused")

    monkeypatch.setattr(sharing, "run", no_run)
    code, err = _cli(["sharing", "--widths", ",".join(["2"] * 33)], capsys)
    assert code == 2 and "--widths" in err and "1 to 32 integers" in err
    with pytest.raises(WorkLimitError, match="33 widths; at most 32"):
        sharing.memory_saving({}, "beam", [2] * 33)


# --------------------------------------------------------------------------- measurement CSVs

HEADER = "tp,phase,batch_size,prompt_tokens,context_tokens,time_s\n"
PREDICT = ["predict", "--cost-model", "roofline", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--points"]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("1,prefill,1000000000,128,0,0.05", "batch_size: must be <= 65,536"),
        ("1,decode,10" + "0" * 40 + ",0,5,", "batch_size: must be <= 65,536"),
        ("10" + "0" * 30 + ",prefill,1,128,0,0.05", "tp: must be <= 1,024"),
        ("1,prefill,1,1" + "0" * 20 + ",0,0.05", "prompt_tokens: must be <= 2,147,483,647"),
    ],
    ids=["batch_1e9", "batch_1e41", "tp_1e31", "tokens_1e20"],
)
def test_a_measurement_row_cannot_ask_for_unbounded_work(
    row: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "p.csv").write_text(HEADER + row + "\n")
    start = time.process_time()
    code, err = _cli([*PREDICT, str(tmp_path / "p.csv")], capsys)
    assert code == 2 and f"p.csv:2: {message}" in err, err
    assert time.process_time() - start < 2.0


def test_step_rows_and_csv_totals_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import kvsim.cost.fit as fit

    step = "tp,phase,batch_size,prompt_tokens,context_tokens,time_s,prefill_chunks,num_decode_seqs,decode_context_tokens\n"
    (tmp_path / "s.csv").write_text(step + "1,step,,,,0.1," + " ".join(["5+0"] * 70_000) + ",,\n")
    with pytest.raises(KvsimError, match=r"s\.csv:\d+: not valid CSV: field larger than field limit"):
        fit.read_points(tmp_path / "s.csv")  # a cell holds at most 131,072 characters
    (tmp_path / "s.csv").write_text(step + "1,step,,,,0.1," + " ".join(["5+0"] * 20) + ",8,8\n")
    monkeypatch.setattr(fit, "MAX_POINT_SEQUENCES", 10)
    with pytest.raises(KvsimError, match="prefill_chunks: 20 chunks; at most 10"):
        fit.read_points(tmp_path / "s.csv")
    monkeypatch.setattr(fit, "MAX_POINT_SEQUENCES", 25)
    with pytest.raises(KvsimError, match="the step has more than 25 sequences"):
        fit.read_points(tmp_path / "s.csv")
    (tmp_path / "p.csv").write_text(HEADER + "1,prefill,4,128,0,0.05\n" * 4)
    monkeypatch.setattr(fit, "MAX_POINTS_CSV_ROWS", 3)
    with pytest.raises(KvsimError, match=r"p\.csv:5: more than 3 rows"):
        fit.read_points(tmp_path / "p.csv")
    monkeypatch.setattr(fit, "MAX_POINTS_CSV_ROWS", 100)
    monkeypatch.setattr(fit, "MAX_POINTS_CSV_SEQUENCES", 10)
    with pytest.raises(KvsimError, match=r"p\.csv:4: the points hold more than 10 sequences"):
        fit.read_points(tmp_path / "p.csv")
    monkeypatch.setattr(fit, "MAX_POINTS_CSV_BYTES", 10)
    with pytest.raises(KvsimError, match=r"p\.csv: cannot read: file is larger than 10 bytes"):
        fit.read_points(tmp_path / "p.csv")


# --------------------------------------------------------------------------- every numeric option


def _numeric_options() -> list[tuple[str, str, Any]]:
    import argparse

    from kvsim.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return [
        (name, action.option_strings[-1], action.type)
        for name, parser in sub.choices.items()
        for action in parser._actions
        if action.option_strings
        and action.nargs is None
        and (action.type in (int, float) or getattr(action.type, "__name__", "") in ("integer", "number"))
    ]


def test_no_numeric_option_is_a_bare_int_or_float() -> None:
    """Every number on the command line goes through a type with a range (kvsim.cli.types)."""
    bare = [f"{cmd} {opt}" for cmd, opt, t in _numeric_options() if t in (int, float)]
    assert bare == []
    assert len(_numeric_options()) >= 30


HOSTILE_OPTION_VALUES = ["nan", "inf", "-inf", "-1", "0", "1e-300", "1e300", "9" * 5000, "", "1x", "0x10"]


@pytest.mark.parametrize(("command", "option", "kind"), _numeric_options())
def test_every_numeric_option_refuses_hostile_values_or_keeps_them_in_range(
    command: str, option: str, kind: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    import argparse

    for text in HOSTILE_OPTION_VALUES:
        try:
            value = kind(text)
        except (argparse.ArgumentTypeError, ValueError, TypeError):
            continue  # argparse turns these into "argument OPTION: ..." and exit 2
        assert isinstance(value, int | float) and value == value and abs(value) < float("inf"), (text, value)
        assert abs(value) <= 2**53, (command, option, text)  # no option takes an absurd number
    code, err = _cli(
        [command, f"{option}=nan", *(["--knob", "seed"] if command == "capacity" else [])], capsys
    )
    assert code == 2 and f"argument {option}" in err, err


def test_connect_timeout_is_bounded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "s.yaml").write_text("base: b.yaml\n")
    for value in ("0", "-5", "nan", "1e9"):
        code, err = _cli(
            ["sweep", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "o"), f"--connect-timeout={value}"],
            capsys,
        )
        assert code == 2 and "argument --connect-timeout" in err


def test_docs_name_the_new_limits() -> None:
    doc = (Path(__file__).resolve().parents[1] / "docs" / "limits.md").read_text()
    for heading in ("## Regular files only", "## Work of a command"):
        assert heading in doc
    assert textwrap.dedent("`MAX_SWEEP_POINTS`") in doc
