"""Batch sweeps: one base scenario, many override sets, one tidy table.

A sweep file (YAML) names a base scenario, relative to the sweep file, and the points:

    base: ../scenarios/default.yaml
    overrides:                          # applied to every point (optional)
      workload.num_requests: 500
    grid:                               # cartesian product (optional)
      replicas.0.engine.block_size: [16, 32]
      workload.arrival.rate_per_s: [2, 4, 8]
    points:                             # explicit list (optional); with a grid: each x grid
      - {replicas.0.engine.enable_prefix_caching: true}
      - {replicas.0.engine.enable_prefix_caching: false}

Output folder:

    DIR/.kvsim                              kvsim's marker: a sweep folder (see kvsim.outputs)
    DIR/results.parquet, DIR/results.csv    one row per point: overrides, status, error, summary
    DIR/points/<point_id>/point.json        overrides, status, error, wall time
    DIR/points/<point_id>/...               the runner's files (summary.json, tables)

A point id is a hash of the point's overrides, so rerunning the same (or an extended)
sweep skips points whose ``point.json`` says ``ok``; failed points run again. DIR must be
new, empty, or a sweep folder kvsim marked; every file is written atomically. Points run
in worker processes (``local``) or as Ray tasks (``ray``); workers return their files as
bytes and only this process writes into DIR, so a Ray cluster needs no shared disk.
"""

from __future__ import annotations

import ctypes
import hashlib
import io
import itertools
import json
import logging
import math
import os
import re
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, ValidationError

import kvsim
from kvsim.errors import KvsimError, YamlError
from kvsim.inputs import read_input
from kvsim.limits import JOBS_PER_CPU, MAX_JOBS, MAX_SUMMARY_BYTES, MAX_SWEEP_POINTS
from kvsim.outputs import claim_folder, replace_file
from kvsim.results.io import DATA_FILES, json_safe, save_result
from kvsim.scenario.loading import apply_overrides, read_yaml, resolve_file_paths, scenario_data, validate
from kvsim.scenario.schema import Scenario
from kvsim.yaml_safe import load_yaml_file

#: A runner simulates one scenario and returns its summary and files to save (name -> bytes).
Runner = Callable[[Scenario], tuple[dict[str, Any], dict[str, bytes]]]
Executor = Literal["local", "ray"]
#: The kind named by the ``.kvsim`` marker of a sweep's output folder.
SWEEP_KIND = "sweep"

#: Seconds to wait for a Ray cluster at ``--address`` before giving up (``--connect-timeout``).
DEFAULT_RAY_CONNECT_TIMEOUT_S = 30.0
#: Longest ``--connect-timeout`` accepted, seconds.
MAX_CONNECT_TIMEOUT_S = 3600.0
#: How to get Ray: kvsim is installed from a checkout, with the ``ray`` extra.
RAY_INSTALL = "install the ray extra in the kvsim checkout: pip install -e '.[ray]' (or make test)"
#: prctl option: the signal a process gets when its parent dies (linux/prctl.h).
_PR_SET_PDEATHSIG = 1


class SweepError(KvsimError):
    """A sweep file is invalid or its output folder cannot be used."""


class SweepSpec(BaseModel):
    """A sweep file."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(default="sweep", description="Name of the sweep.")
    base: str = Field(description="Base scenario file, relative to the sweep file.")
    overrides: dict[str, Any] = Field(
        default_factory=dict, description="Dotted-path overrides for every point."
    )
    grid: dict[str, list[Any]] = Field(
        default_factory=dict, description="Dotted path -> values; points are the cartesian product."
    )
    points: list[dict[str, Any]] = Field(
        default_factory=list, description="Explicit override sets (combined with the grid if both are given)."
    )


@dataclass(frozen=True)
class Point:
    """One point of a sweep: its overrides and the scenario data they produce."""

    index: int
    point_id: str
    overrides: dict[str, Any]
    data: dict[str, Any]


@dataclass
class PointOutcome:
    """What running one point produced (returned by workers)."""

    point_id: str
    status: Literal["ok", "failed"]
    error: str = ""
    wall_s: float = 0.0
    summary: dict[str, Any] = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)


def point_id(overrides: Mapping[str, Any]) -> str:
    """Stable id of an override set: 12 hex digits of the SHA-1 of its canonical JSON."""
    text = json.dumps(dict(overrides), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def load_sweep(path: str | Path) -> tuple[SweepSpec, list[Point]]:
    """Read a sweep file and expand it into points (base scenario read once)."""
    path = Path(path)
    try:
        raw = load_yaml_file(path, what="sweep file")  # bounded: size, depth, aliases, ...
    except YamlError as exc:
        raise SweepError(str(exc)) from None
    try:
        spec = SweepSpec.model_validate(raw if raw is not None else {})
    except ValidationError as err:
        lines = [f"  {'.'.join(map(str, e['loc'])) or '<root>'}: {e['msg']}" for e in err.errors()]
        raise SweepError(f"{path}: invalid sweep file\n" + "\n".join(lines)) from None
    for key, values in spec.grid.items():
        if not values:
            raise SweepError(f"{path}: grid.{key}: needs at least one value")
    # Counted before anything is expanded: a few lines of grid can name billions of points.
    num_points = max(len(spec.points), 1) * math.prod(len(v) for v in spec.grid.values())
    if num_points > MAX_SWEEP_POINTS:
        sizes = " x ".join(
            [
                *([f"{len(spec.points):,} points"] if spec.points else []),
                *(f"{len(v):,}" for v in spec.grid.values()),
            ]
        )
        raise SweepError(
            f"{path}: the sweep has {num_points:,} points ({sizes}), more than {MAX_SWEEP_POINTS:,} "
            "(the most kvsim runs in one sweep); split it into several sweep files"
        )
    base_path = path.parent / spec.base
    # Overrides apply to the fully resolved base, so that paths into defaults the base file
    # left out (``replicas.0.tp`` in a file without ``replicas``) exist.
    base = scenario_data(
        validate(resolve_file_paths(read_yaml(base_path), base_path.parent), str(base_path), base_path.parent)
    )
    keys = list(spec.grid)
    combos = [dict(zip(keys, values, strict=True)) for values in itertools.product(*spec.grid.values())]
    listed = spec.points or [{}]
    points: list[Point] = []
    seen: set[str] = set()
    for listed_overrides in listed:
        for combo in combos:
            overrides = {**spec.overrides, **listed_overrides, **combo}
            pid = point_id(overrides)
            if pid in seen:
                raise SweepError(f"{path}: two points have the same overrides {overrides}")
            seen.add(pid)
            # Relative paths given in overrides are relative to the sweep file.
            data = resolve_file_paths(apply_overrides(base, overrides), path.parent)
            points.append(Point(len(points), pid, {**listed_overrides, **combo}, data))
    return spec, points


def simulate(scenario: Scenario) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The default runner: ``kvsim.run``, then the result folder's files as bytes."""
    result = kvsim.run(scenario)
    with tempfile.TemporaryDirectory(prefix="kvsim-point-") as tmp:
        folder = save_result(result, Path(tmp) / "result")
        # The data files only: a point's folder is part of the sweep folder, whose marker it has.
        files = {name: (folder / name).read_bytes() for name in DATA_FILES}
    return dict(result.summary), files


def summary_only(scenario: Scenario) -> tuple[dict[str, Any], dict[str, bytes]]:
    """A runner that keeps only the summary (``kvsim.planning.capacity`` needs no tables)."""
    return dict(kvsim.run(scenario).summary), {}


def run_point(point: Point, runner: Runner) -> PointOutcome:
    """Validate and simulate one point; every exception becomes a failed outcome."""
    start = time.perf_counter()
    try:
        scenario = validate(point.data, f"<sweep point {point.point_id}>")
        summary, files = runner(scenario)
    except Exception as exc:
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        return PointOutcome(point.point_id, "failed", error=detail, wall_s=time.perf_counter() - start)
    return PointOutcome(
        point.point_id, "ok", summary=summary, files=files, wall_s=time.perf_counter() - start
    )


def _point_dir(out: Path, pid: str) -> Path:
    return out / "points" / pid


def _read_done(out: Path, point: Point) -> dict[str, Any] | None:
    """The saved record of a point that finished ok, or None (also for anything that is not
    a regular JSON file of at most `MAX_SUMMARY_BYTES`: such a point runs again)."""
    try:
        raw = read_input(_point_dir(out, point.point_id) / "point.json", MAX_SUMMARY_BYTES)
        record = json.loads(raw.decode("utf-8"))
    except (OSError, ValueError, RecursionError):  # unreadable, not UTF-8, not JSON: run it again
        return None
    return record if isinstance(record, dict) and record.get("status") == "ok" else None


def _save(out: Path, point: Point, outcome: PointOutcome) -> dict[str, Any]:
    d = _point_dir(out, point.point_id)
    d.mkdir(parents=True, exist_ok=True)
    for name, blob in outcome.files.items():
        if Path(name).name != name or name.startswith(".kvsim-") or name in ("", ".", ".."):
            raise SweepError(
                f"point {point.point_id}: the runner returned a file named {name!r}; bare names only"
            )
        replace_file(d, name, blob)  # atomic: a kill leaves the old file or the new one
    record = {
        "point_id": point.point_id,
        "index": point.index,
        "overrides": point.overrides,
        "status": outcome.status,
        "error": outcome.error,
        "wall_s": outcome.wall_s,
        "summary": json_safe(outcome.summary),
    }
    # point.json is written last: its presence with status ok marks the point done.
    replace_file(d, "point.json", (json.dumps(json_safe(record), indent=2) + "\n").encode("utf-8"))
    return record


def max_jobs(executor: Executor = "local", address: str | None = None) -> int:
    """The most ``--jobs`` allowed: `JOBS_PER_CPU` x the CPU count for processes of this
    machine (local workers, or a local Ray), never more than `MAX_JOBS`."""
    if executor == "ray" and address:
        return MAX_JOBS  # the cluster's size is not known here; Ray schedules the tasks
    return min(MAX_JOBS, JOBS_PER_CPU * (os.cpu_count() or 1))


def default_jobs() -> int:
    """``--jobs`` when not given: the CPU count (within `max_jobs`)."""
    return min(os.cpu_count() or 1, MAX_JOBS)


def check_jobs(jobs: int, executor: Executor = "local", address: str | None = None) -> None:
    """A `SweepError` unless 1 <= ``jobs`` <= `max_jobs`."""
    limit = max_jobs(executor, address)
    if isinstance(jobs, bool) or not isinstance(jobs, int) or not 1 <= jobs <= limit:
        why = (
            f"the most kvsim starts: {JOBS_PER_CPU} x the {os.cpu_count() or 1} CPUs of this machine, at most {MAX_JOBS}"
            if limit < MAX_JOBS
            else "the most kvsim starts"
        )
        raise SweepError(f"--jobs must be between 1 and {limit} ({why}), got {jobs}")


def _die_with_parent(parent_pid: int) -> None:
    """Worker initializer: end this worker when the process that started it ends.

    Without it, workers of a killed ``kvsim sweep`` run on as orphans. On Linux the kernel
    sends SIGKILL when the parent dies (PR_SET_PDEATHSIG); elsewhere, and as a fallback, a
    daemon thread checks once a second whether the parent is still the parent.
    """
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):  # no prctl: the thread below still watches
            pass
    if os.getppid() != parent_pid:  # the parent died before the line above ran
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent_pid:
                os._exit(1)

    threading.Thread(target=watch, name="kvsim-parent-watch", daemon=True).start()


def _run_local(todo: list[Point], runner: Runner, jobs: int) -> Iterator[tuple[Point, PointOutcome]]:
    if jobs <= 1:
        for p in todo:
            yield p, run_point(p, runner)
        return
    with ProcessPoolExecutor(max_workers=jobs, initializer=_die_with_parent, initargs=(os.getpid(),)) as pool:
        futures: dict[Future[PointOutcome], Point] = {pool.submit(run_point, p, runner): p for p in todo}
        pending = set(futures)
        try:
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for f in done:
                    p = futures[f]
                    try:
                        outcome = f.result()
                    except Exception as exc:  # the worker process died (e.g. out of memory)
                        outcome = PointOutcome(p.point_id, "failed", error=f"worker failed: {exc!r}")
                    yield p, outcome
        finally:
            for f in pending:
                f.cancel()


def _ray_endpoint(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of a Ray address ``HOST:PORT`` or ``ray://HOST:PORT`` (None: ``auto``, ...)."""
    rest = address.strip().removeprefix("ray://").rstrip("/")
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return host.strip("[]"), int(port)  # [::1]:6379 -> ::1


def _one_line(exc: BaseException, limit: int = 300) -> str:
    """An exception as one line: its message's first line, or, when the message carries a
    traceback (Ray's client relays the server's), the traceback's last line, the error. A
    first line that only announces what follows ("Initialization failure from server:") keeps
    the line after it: Ray's client relays the server's reason there."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if any(line.startswith("Traceback") for line in lines):
        lines = [line for line in lines if re.match(r"[\w.]+(Error|Exception)\b", line)][-1:] or lines
    if len(lines) > 1 and lines[0].endswith(":"):
        lines = [f"{lines[0]} {lines[1]}"]
    line = lines[0] if lines else ""
    line = line if len(line) <= limit else line[: limit - 3] + "..."
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__


def _connect_ray(ray: Any, address: str, timeout_s: float) -> None:
    """``ray.init(address=...)`` within ``timeout_s``, or a one-line `SweepError`.

    Ray's own retries take minutes when nothing listens (``HOST:PORT``) and about 30 s
    for a client address (``ray://HOST:PORT``). kvsim first opens a TCP connection to the
    address (refused at once when nothing listens there), then connects Ray in a daemon
    thread and waits for it at most the time left; a Ray still connecting then is left to
    the thread, which ends with the process.
    """
    deadline = time.monotonic() + timeout_s
    outcome: dict[str, BaseException] = {}

    def connect() -> None:
        endpoint = _ray_endpoint(address)
        try:
            if endpoint is not None:
                socket.create_connection(endpoint, timeout=max(deadline - time.monotonic(), 0.01)).close()
        except OSError as exc:
            outcome["unreachable"] = exc
            return
        try:
            # Ray's INFO lines ("Connecting to existing Ray cluster", "Passing the following
            # kwargs") and the warning that a thread sets no SIGTERM handler say nothing to a user.
            ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=connect, name="kvsim-ray-connect", daemon=True)
    thread.start()
    thread.join(max(deadline - time.monotonic(), 0.0))
    where = f"--address {address}"
    if thread.is_alive():
        auth = (
            ""
            if os.environ.get("RAY_AUTH_MODE", "").lower() == "token"
            else "; a cluster with token authentication (Ray's default) also needs RAY_AUTH_MODE=token here"
        )
        raise SweepError(
            f"{where}: no Ray cluster answered within {timeout_s:g} s (--connect-timeout); check the "
            f"address, or start one with `ray start --head`{auth}"
        )
    unreachable = outcome.get("unreachable")
    if unreachable is not None:  # the TCP probe: refused, unreachable, unknown host, timed out
        reason = getattr(unreachable, "strerror", None) or str(unreachable) or type(unreachable).__name__
        raise SweepError(
            f"{where}: cannot reach a Ray cluster there: {reason}; check the address and port, or "
            "start one with `ray start --head`"
        )
    error = outcome.get("error")
    if error is None:
        return
    if "ray[client]" in str(error):
        raise SweepError(f"{where}: ray:// addresses need Ray's client: {RAY_INSTALL}")
    raise SweepError(f"{where}: cannot connect to Ray: {_one_line(error)}")


def _start_ray(address: str | None, jobs: int, connect_timeout_s: float) -> Any:
    """Connect to (or start) Ray; the ``ray`` module if this call started it (the caller
    shuts it down), None if it was running already."""
    try:
        import ray  # optional dependency (the ray extra): imported only when asked for
    except ImportError:
        raise SweepError(f"--executor ray needs Ray: {RAY_INSTALL}") from None
    if ray.is_initialized():
        return None
    if address:
        _connect_ray(ray, address, connect_timeout_s)
    else:
        ray.init(num_cpus=max(jobs, 1), include_dashboard=False, log_to_driver=False)
    return ray


def _ray_tasks(todo: list[Point], runner: Runner) -> Iterator[tuple[Point, PointOutcome]]:
    """Each point as a Ray task on the Ray this process is connected to, yielded as it finishes."""
    import ray

    remote = ray.remote(run_point)
    refs = {remote.remote(p, runner): p for p in todo}
    pending = list(refs)
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        for ref in done:
            p = refs[ref]
            try:
                outcome = ray.get(ref)
            except Exception as exc:  # task or worker died
                outcome = PointOutcome(p.point_id, "failed", error=f"ray task failed: {exc!r}")
            yield p, outcome


def _run_ray(
    todo: list[Point],
    runner: Runner,
    address: str | None,
    jobs: int,
    connect_timeout_s: float = DEFAULT_RAY_CONNECT_TIMEOUT_S,
) -> Iterator[tuple[Point, PointOutcome]]:
    started = _start_ray(address, jobs, connect_timeout_s)
    try:
        yield from _ray_tasks(todo, runner)
    finally:
        if started is not None:
            started.shutdown()


class PointPool:
    """Points handed in one at a time, their outcomes taken as they finish: the runner of
    `kvsim.planning.planner`, which chooses each next point from the outcomes so far.

        with PointPool(runner, jobs=2) as pool:
            pool.submit(point)
            point, outcome = pool.next_done()   # blocks until one finishes

    ``jobs`` 1 runs a point in the calling process when its outcome is asked for; more run
    in ``jobs`` worker processes that end with this one (``local``), or as Ray tasks
    (``ray``: on the cluster at ``address``, waited for at most ``connect_timeout_s``, or a
    local Ray of ``jobs`` CPUs). ``jobs`` is checked as `run_points` checks it. A worker or
    task that dies gives a failed outcome, never an exception.
    """

    def __init__(
        self,
        runner: Runner,
        *,
        jobs: int = 1,
        executor: Executor = "local",
        address: str | None = None,
        connect_timeout_s: float = DEFAULT_RAY_CONNECT_TIMEOUT_S,
    ) -> None:
        check_jobs(jobs, executor, address)
        check_connect_timeout(connect_timeout_s)
        self.runner, self.jobs, self.executor, self.address = runner, jobs, executor, address
        self.connect_timeout_s = connect_timeout_s
        self._queue: list[Point] = []  # jobs 1: run when asked for
        self._futures: dict[Future[PointOutcome], Point] = {}
        self._refs: dict[Any, Point] = {}
        self._pool: ProcessPoolExecutor | None = None
        self._ray: Any = None  # the ray module while tasks can be sent
        self._ray_started: Any = None  # the ray module if this pool started Ray
        self._remote: Any = None

    def __enter__(self) -> PointPool:
        if self.executor == "ray":
            self._ray_started = _start_ray(self.address, self.jobs, self.connect_timeout_s)
            import ray  # imported by _start_ray already (it says how to install it when missing)

            self._ray = ray
            self._remote = ray.remote(run_point)
        elif self.jobs > 1:
            self._pool = ProcessPoolExecutor(
                max_workers=self.jobs, initializer=_die_with_parent, initargs=(os.getpid(),)
            )
        return self

    def __exit__(self, *exc: object) -> None:
        for f in self._futures:
            f.cancel()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        if self._ray_started is not None:
            self._ray_started.shutdown()

    @property
    def num_pending(self) -> int:
        """Points handed in whose outcome has not been taken yet."""
        return len(self._queue) + len(self._futures) + len(self._refs)

    def submit(self, point: Point) -> None:
        if self._remote is not None:
            self._refs[self._remote.remote(point, self.runner)] = point
        elif self._pool is not None:
            self._futures[self._pool.submit(run_point, point, self.runner)] = point
        else:
            self._queue.append(point)

    def next_done(self, *, oldest: bool = False) -> tuple[Point, PointOutcome]:
        """The next point to finish and its outcome (in submission order with one job).

        ``oldest``: the point handed in first of those pending, waited for however long the
        others take (a caller whose next choice must not depend on which run was faster).
        """
        if self._queue:
            p = self._queue.pop(0)
            return p, run_point(p, self.runner)
        if self._refs:
            pending = list(self._refs)
            (ref,), _ = self._ray.wait(pending[:1] if oldest else pending, num_returns=1)
            p = self._refs.pop(ref)
            try:
                return p, self._ray.get(ref)
            except Exception as exc:  # task or worker died
                return p, PointOutcome(p.point_id, "failed", error=f"ray task failed: {exc!r}")
        if not self._futures:
            raise SweepError("no point is running")
        futures = list(self._futures)
        done, _ = wait(futures[:1] if oldest else futures, return_when=FIRST_COMPLETED)
        f = next(iter(done))
        p = self._futures.pop(f)
        try:
            return p, f.result()
        except Exception as exc:  # the worker process died (e.g. out of memory)
            return p, PointOutcome(p.point_id, "failed", error=f"worker failed: {exc!r}")


def run_points(
    points: list[Point],
    runner: Runner = simulate,
    *,
    jobs: int = 1,
    executor: Executor = "local",
    address: str | None = None,
    connect_timeout_s: float = DEFAULT_RAY_CONNECT_TIMEOUT_S,
) -> Iterator[tuple[Point, PointOutcome]]:
    """Run points in ``jobs`` worker processes (or Ray tasks), yielding each as it finishes.

    The parallel runner behind `run_sweep`, for callers that choose their points as they
    go (`kvsim.planning.capacity` runs one round of a search at a time). Nothing is written.
    """
    check_jobs(jobs, executor, address)
    check_connect_timeout(connect_timeout_s)
    if executor == "ray":
        return _run_ray(points, runner, address, jobs, connect_timeout_s)
    return _run_local(points, runner, min(jobs, max(len(points), 1)))


def check_connect_timeout(timeout_s: float) -> None:
    """A `SweepError` unless ``timeout_s`` is a number of seconds in (0, `MAX_CONNECT_TIMEOUT_S`]."""
    ok = isinstance(timeout_s, int | float) and not isinstance(timeout_s, bool)
    if not ok or not 0 < timeout_s <= MAX_CONNECT_TIMEOUT_S:  # NaN fails the comparison too
        raise SweepError(
            f"--connect-timeout must be more than 0 and at most {MAX_CONNECT_TIMEOUT_S:g} s, got {timeout_s}"
        )


def _flat(value: Any) -> Any:
    """Table cell: scalars as they are, anything else as JSON text."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return json.dumps(json_safe(value), sort_keys=True)


def _table(points: list[Point], records: dict[str, dict[str, Any]]) -> pd.DataFrame:
    override_keys = list(dict.fromkeys(k for p in points for k in p.overrides))
    rows = []
    for p in points:
        rec = records.get(p.point_id)
        row: dict[str, Any] = {"point_id": p.point_id, "index": p.index}
        row.update({k: _flat(p.overrides.get(k)) for k in override_keys})
        row["status"] = rec["status"] if rec else "not_run"
        row["error"] = rec["error"] if rec else ""
        row["wall_s"] = rec["wall_s"] if rec else float("nan")
        for k, v in (rec or {}).get("summary", {}).items():
            if k not in row:
                row[k] = _flat(v)
        rows.append(row)
    table = pd.DataFrame(rows)
    for col in table.select_dtypes(include=["object", "string"]).columns:
        kinds = {
            type(v) for v in table[col] if v is not None and not (isinstance(v, float) and math.isnan(v))
        }
        if len(kinds) > 1:  # Parquet columns hold one type: mixed values become text
            table[col] = [None if v is None else str(v) for v in table[col]]
    return table


@dataclass(frozen=True)
class SweepReport:
    """Counts of one sweep invocation and its table."""

    table: pd.DataFrame
    num_points: int
    num_skipped: int
    num_ok: int
    num_failed: int


def run_sweep(
    sweep_file: str | Path,
    out: str | Path,
    *,
    jobs: int = 1,
    executor: Executor = "local",
    address: str | None = None,
    runner: Runner = simulate,
    progress: Callable[[str], None] | None = None,
    connect_timeout_s: float = DEFAULT_RAY_CONNECT_TIMEOUT_S,
) -> SweepReport:
    """Run every point not yet done, then write DIR/results.parquet and DIR/results.csv.

    The table is written even when the sweep is interrupted (points not run: ``not_run``).
    ``connect_timeout_s`` bounds the wait for the Ray cluster at ``address``.
    """
    check_jobs(jobs, executor, address)
    check_connect_timeout(connect_timeout_s)
    _, points = load_sweep(sweep_file)
    # Ray first: a cluster that does not answer is an error before anything is written.
    ray_started = _start_ray(address, jobs, connect_timeout_s) if executor == "ray" else None
    try:
        return _run_sweep(points, out, jobs, executor, runner, progress)
    finally:
        if ray_started is not None:
            ray_started.shutdown()


def _run_sweep(
    points: list[Point],
    out: str | Path,
    jobs: int,
    executor: Executor,
    runner: Runner,
    progress: Callable[[str], None] | None,
) -> SweepReport:
    # The folder must be new, empty or a sweep folder kvsim marked (kvsim.outputs): its
    # results.csv is rewritten, and a user's own must never be.
    out = claim_folder(out, SWEEP_KIND, "--out", SweepError)
    try:
        (out / "points").mkdir(exist_ok=True)
    except OSError as exc:
        raise SweepError(f"{out}: cannot create output folder: {exc.strerror or exc}") from None
    records: dict[str, dict[str, Any]] = {}
    for p in points:
        done = _read_done(out, p)
        if done is not None:
            records[p.point_id] = done
    skipped = len(records)
    todo = [p for p in points if p.point_id not in records]
    stream = _ray_tasks(todo, runner) if executor == "ray" else _run_local(todo, runner, jobs)
    ok = failed = 0
    try:
        for p, outcome in stream:
            records[p.point_id] = _save(out, p, outcome)
            ok, failed = ok + (outcome.status == "ok"), failed + (outcome.status == "failed")
            if progress is not None:
                note = f": {outcome.error.splitlines()[-1]}" if outcome.error else ""
                progress(f"[{len(records)}/{len(points)}] point {p.point_id} {outcome.status}{note}")
    finally:
        table = _table(points, records)
        replace_file(out, "results.csv", table.to_csv(index=False).encode("utf-8"))
        buffer = io.BytesIO()
        table.to_parquet(buffer, index=False)
        replace_file(out, "results.parquet", buffer.getvalue())
    return SweepReport(table, len(points), skipped, ok, failed)
