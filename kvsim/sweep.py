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

import hashlib
import io
import itertools
import json
import math
import tempfile
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
from kvsim.io import DATA_FILES, json_safe, save_result
from kvsim.outputs import claim_folder, replace_file
from kvsim.scenario.loading import apply_overrides, read_yaml, resolve_file_paths, scenario_data, validate
from kvsim.scenario.schema import Scenario
from kvsim.yaml_safe import load_yaml_file

#: A runner simulates one scenario and returns its summary and files to save (name -> bytes).
Runner = Callable[[Scenario], tuple[dict[str, Any], dict[str, bytes]]]
Executor = Literal["local", "ray"]
#: The kind named by the ``.kvsim`` marker of a sweep's output folder.
SWEEP_KIND = "sweep"


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
    """A runner that keeps only the summary (``kvsim.capacity`` needs no tables)."""
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
    """The saved record of a point that finished ok, or None."""
    try:
        record = json.loads((_point_dir(out, point.point_id) / "point.json").read_text(encoding="utf-8"))
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


class PointPool:
    """Points handed in one at a time, their outcomes taken as they finish: the parallel
    runner behind `run_points`, `run_sweep` and `kvsim.planner` (which chooses each next
    point from the outcomes so far).

        with PointPool(runner, jobs=2) as pool:
            pool.submit(point)
            point, outcome = pool.next_done()   # blocks until one finishes

    ``jobs`` 1 runs a point in the calling process when its outcome is asked for; more run
    in ``jobs`` worker processes (``local``) or as Ray tasks (``ray``, on the cluster at
    ``address`` or a local Ray of ``jobs`` CPUs). A worker or task that dies gives a failed
    outcome, never an exception.
    """

    def __init__(
        self, runner: Runner, *, jobs: int = 1, executor: Executor = "local", address: str | None = None
    ) -> None:
        if jobs < 1:
            raise SweepError(f"--jobs must be >= 1, got {jobs}")
        self.runner, self.jobs, self.executor, self.address = runner, jobs, executor, address
        self._queue: list[Point] = []  # jobs 1: run when asked for
        self._futures: dict[Future[PointOutcome], Point] = {}
        self._refs: dict[Any, Point] = {}
        self._pool: ProcessPoolExecutor | None = None
        self._ray: Any = None
        self._ray_started = False
        self._remote: Any = None

    def __enter__(self) -> PointPool:
        if self.executor == "ray":
            try:
                import ray  # optional dependency (kvsim[ray]): imported only when asked for
            except ImportError:
                raise SweepError("--executor ray needs Ray: pip install 'kvsim[ray]'") from None
            self._ray = ray
            self._ray_started = not ray.is_initialized()
            if self._ray_started:
                if self.address:
                    ray.init(address=self.address, log_to_driver=False)
                else:
                    ray.init(num_cpus=max(self.jobs, 1), include_dashboard=False, log_to_driver=False)
            self._remote = ray.remote(run_point)
        elif self.jobs > 1:
            self._pool = ProcessPoolExecutor(max_workers=self.jobs)
        return self

    def __exit__(self, *exc: object) -> None:
        for f in self._futures:
            f.cancel()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        if self._ray is not None and self._ray_started:
            self._ray.shutdown()

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


def _run_all(
    todo: list[Point], runner: Runner, jobs: int, executor: Executor = "local", address: str | None = None
) -> Iterator[tuple[Point, PointOutcome]]:
    """Every point of ``todo`` through a `PointPool`, yielded as each finishes."""
    with PointPool(runner, jobs=jobs, executor=executor, address=address) as pool:
        for p in todo:
            pool.submit(p)
        while pool.num_pending:
            yield pool.next_done()


def run_points(
    points: list[Point],
    runner: Runner = simulate,
    *,
    jobs: int = 1,
    executor: Executor = "local",
    address: str | None = None,
) -> Iterator[tuple[Point, PointOutcome]]:
    """Run points in ``jobs`` worker processes (or Ray tasks), yielding each as it finishes.

    The parallel runner behind `run_sweep`, for callers that choose their points as they
    go (`kvsim.capacity` runs one round of a search at a time). Nothing is written.
    """
    if jobs < 1:
        raise SweepError(f"--jobs must be >= 1, got {jobs}")
    if executor == "ray":
        return _run_all(points, runner, jobs, "ray", address)
    return _run_all(points, runner, min(jobs, max(len(points), 1)))


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
) -> SweepReport:
    """Run every point not yet done, then write DIR/results.parquet and DIR/results.csv.

    The table is written even when the sweep is interrupted (points not run: ``not_run``).
    """
    if jobs < 1:
        raise SweepError(f"--jobs must be >= 1, got {jobs}")
    _, points = load_sweep(sweep_file)
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
    stream = _run_all(todo, runner, jobs, executor, address)
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
