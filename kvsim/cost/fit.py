"""Fitting the roofline's parameters to measured iteration times, and measurement points.

A measurement point is one row of a CSV with columns

    tp,phase,batch_size,prompt_tokens,context_tokens,time_s

- ``phase=prefill``: one iteration prefilling ``batch_size`` prompts of ``prompt_tokens``
  new tokens each, after ``context_tokens`` already-cached tokens each (usually 0);
- ``phase=decode``: one decode step of ``batch_size`` requests, each attending to
  ``context_tokens`` tokens;
- ``phase=step``: one engine iteration as it ran, of any composition, given by three more
  columns: ``prefill_chunks`` (space-separated ``q+c`` pairs: a chunk of q new tokens after
  c cached ones, e.g. ``256+0 31+480``; empty for none), ``num_decode_seqs`` and
  ``decode_context_tokens`` (decoding requests and the sum of the tokens they attend to,
  as in `kvsim.cost.base.Batch`). ``batch_size`` may be empty (it is then the number of
  sequences), ``prompt_tokens`` and ``context_tokens`` are ignored. Serving engines'
  step logs (e.g. `benchmarks/vllm_latency.py`) are written this way;
- ``time_s``: the measured time (may be empty for `kvsim predict`).

CSVs without the three ``step`` columns read as before.

`fit_roofline` fits, by Levenberg-Marquardt on log-time residuals (numpy only), the
roofline parameters of `kvsim.cost.roofline`:

    compute_efficiency, memory_efficiency,       always
    kv_memory_efficiency                         (attention's KV reads)
    fixed = layers * per_layer_overhead_s + per_iteration_overhead_s
    allreduce_latency_s, allreduce_bandwidth     when some points have tp > 1

with the roofline's ``combine`` (max or sum of compute and memory times) held as given.
With ``combine="sum"`` the weight reads take the same time in every step, like the fixed
overhead, so only their sum is determined: how it splits between ``memory_efficiency``
and the overheads follows the starting values (predictions do not depend on the split).

For one model the two fixed overheads add up to one constant per iteration, so the fit
determines their sum: ``per_layer_overhead_s`` is held at a given value (default: the
roofline default) and ``per_iteration_overhead_s`` takes the rest (if the rest would be
negative, the whole constant goes to the per-layer term). Each parameter carries a very
weak pull towards its starting value (ridge weight ``RIDGE``) so that parameters the
data cannot determine stay at their defaults instead of drifting.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from kvsim.cost.base import Batch, CostModel
from kvsim.cost.config import RooflineCostConfig
from kvsim.cost.profile import PROFILE_FORMAT, PROFILE_VERSION, Profile, model_shape
from kvsim.cost.roofline import RooflineCostModel
from kvsim.errors import KvsimError
from kvsim.inputs import open_input
from kvsim.limits import (
    MAX_POINT_SEQUENCES,
    MAX_POINTS_CSV_BYTES,
    MAX_POINTS_CSV_ROWS,
    MAX_POINTS_CSV_SEQUENCES,
    MAX_TOKENS,
    MAX_TRACE_LINE_CHARS,
)
from kvsim.model.specs import GpuSpec, ModelSpec
from kvsim.outputs import write_file
from kvsim.paths import exists
from kvsim.scenario.schema import MAX_TP

CSV_COLUMNS = ("tp", "phase", "batch_size", "prompt_tokens", "context_tokens", "time_s")
#: Extra columns of ``phase=step`` rows (a whole iteration of any composition).
STEP_COLUMNS = ("prefill_chunks", "num_decode_seqs", "decode_context_tokens")
PHASES = ("prefill", "decode", "step")
#: Weight of the pull of each log-parameter towards its starting value.
RIDGE = 1e-8


@dataclass(frozen=True)
class Point:
    """One measured (or to-be-predicted) iteration.

    ``prefill`` and ``decode`` points are uniform batches (``batch_size`` alike sequences);
    a ``step`` point is one iteration of any composition, held in the last three fields.
    """

    tp: int
    phase: str
    batch_size: int
    prompt_tokens: int
    context_tokens: int
    time_s: float | None = None
    prefill_chunks: tuple[tuple[int, int], ...] = ()
    num_decode_seqs: int = 0
    decode_context_tokens: int = 0

    @classmethod
    def step(
        cls,
        prefill_chunks: Sequence[tuple[int, int]],
        num_decode_seqs: int,
        decode_context_tokens: int,
        time_s: float | None = None,
        tp: int = 1,
    ) -> Point:
        """A ``step`` point: one iteration of any composition."""
        chunks = tuple((int(q), int(c)) for q, c in prefill_chunks)
        return cls(
            tp=tp,
            phase="step",
            batch_size=len(chunks) + num_decode_seqs,
            prompt_tokens=0,
            context_tokens=0,
            time_s=time_s,
            prefill_chunks=chunks,
            num_decode_seqs=num_decode_seqs,
            decode_context_tokens=decode_context_tokens,
        )

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Point:
        """Inverse of `as_dict` (a profile's ``points``)."""
        if d.get("phase") == "step":
            return cls.step(
                [(int(q), int(c)) for q, c in d.get("prefill_chunks", ())],
                int(d.get("num_decode_seqs", 0)),
                int(d.get("decode_context_tokens", 0)),
                d.get("time_s"),
                int(d.get("tp", 1)),
            )
        return cls(**{k: d[k] for k in CSV_COLUMNS if k in d})

    @property
    def has_prefill(self) -> bool:
        """Whether the iteration prefills anything (how fit statistics group points)."""
        return self.phase == "prefill" or bool(self.prefill_chunks)

    def batch(self) -> Batch:
        if self.phase == "step":
            return Batch(
                prefill_chunks=list(self.prefill_chunks),
                num_decode_seqs=self.num_decode_seqs,
                decode_context_tokens=self.decode_context_tokens,
            )
        if self.phase == "prefill":
            return Batch(prefill_chunks=[(self.prompt_tokens, self.context_tokens)] * self.batch_size)
        return Batch(
            num_decode_seqs=self.batch_size, decode_context_tokens=self.batch_size * self.context_tokens
        )

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "tp": self.tp,
            "phase": self.phase,
            "batch_size": self.batch_size,
            "prompt_tokens": self.prompt_tokens,
            "context_tokens": self.context_tokens,
            "time_s": self.time_s,
        }
        if self.phase == "step":
            d["prefill_chunks"] = [list(c) for c in self.prefill_chunks]
            d["num_decode_seqs"] = self.num_decode_seqs
            d["decode_context_tokens"] = self.decode_context_tokens
        return d

    def csv_row(self) -> dict[str, Any]:
        """The point as a row of a measurements CSV (`write_points`)."""
        d = self.as_dict()
        if self.phase == "step":
            d["prefill_chunks"] = " ".join(f"{q}+{c}" for q, c in self.prefill_chunks)
            d["prompt_tokens"] = d["context_tokens"] = ""
        d["time_s"] = "" if self.time_s is None else repr(self.time_s)
        return d


def points_csv(points: Sequence[Point]) -> str:
    """Points as the text of a measurements CSV that `read_points` reads back (step columns if needed)."""
    columns = list(CSV_COLUMNS)
    if any(p.phase == "step" for p in points):
        columns += STEP_COLUMNS
    out = io.StringIO(newline="")
    writer = csv.DictWriter(out, fieldnames=columns, extrasaction="ignore", restval="")
    writer.writeheader()
    for p in points:
        writer.writerow(p.csv_row())
    return out.getvalue()


def write_points(points: Sequence[Point], path: str | Path) -> Path:
    """Write points as a measurements CSV that `read_points` reads back (step columns if needed).

    Atomically, and never over an existing file: a CSV holds no mark of what wrote it, so
    kvsim cannot prove an existing one is its own (`kvsim.outputs`).
    """
    path = Path(path)
    write_file(path, points_csv(points).encode("utf-8"), "measurements CSV", None)
    return path


def _csv_lines(path: Path) -> Iterator[str]:
    """The lines of a measurements CSV as text: a regular file, UTF-8 (a bad byte is named by
    its line and offset), no line longer than `MAX_TRACE_LINE_CHARS`."""
    if not exists(path):
        raise KvsimError(f"{path}: cannot read: no such file")
    offset = 0
    try:
        # A regular file of at most MAX_POINTS_CSV_BYTES: never /dev/zero or a FIFO (kvsim.inputs).
        with open_input(path, MAX_POINTS_CSV_BYTES) as fh:
            for line_no, raw in enumerate(iter(lambda: fh.readline(MAX_TRACE_LINE_CHARS + 1), b""), start=1):
                if len(raw) > MAX_TRACE_LINE_CHARS:
                    raise KvsimError(
                        f"{path}:{line_no}: line longer than {MAX_TRACE_LINE_CHARS:,} characters"
                    )
                if offset + len(raw) > MAX_POINTS_CSV_BYTES:  # it grew after its size was checked
                    raise KvsimError(
                        f"{path}: cannot read: file is larger than {MAX_POINTS_CSV_BYTES:,} bytes"
                    )
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise KvsimError(
                        f"{path}:{line_no}: not UTF-8 text: byte 0x{raw[exc.start]:02x} at byte offset "
                        f"{offset + exc.start} ({exc.reason})"
                    ) from None
                offset += len(raw)
                yield text.removeprefix("\ufeff") if line_no == 1 else text
    except OSError as exc:
        raise KvsimError(f"{path}: cannot read: {exc.strerror or exc}") from None


def read_points(path: str | Path) -> list[Point]:
    """Read a measurements CSV; errors name the file, the line and the column."""
    path = Path(path)
    reader = csv.DictReader(_csv_lines(path))
    points: list[Point] = []
    sequences = 0  # what predicting or fitting the points costs: a batch lists its sequences
    try:
        missing = [c for c in CSV_COLUMNS[:-1] if c not in (reader.fieldnames or [])]
        if missing:
            raise KvsimError(f"{path}: missing column(s) {', '.join(missing)} (need {','.join(CSV_COLUMNS)})")
        for row in reader:
            if len(points) >= MAX_POINTS_CSV_ROWS:
                raise KvsimError(
                    f"{path}:{reader.line_num}: more than {MAX_POINTS_CSV_ROWS:,} rows (the most kvsim reads)"
                )
            points.append(_parse_row(row, f"{path}:{reader.line_num}"))
            sequences += points[-1].batch_size
            if sequences > MAX_POINTS_CSV_SEQUENCES:
                raise KvsimError(
                    f"{path}:{reader.line_num}: the points hold more than {MAX_POINTS_CSV_SEQUENCES:,} "
                    "sequences in all (the sum of batch_size; the most kvsim evaluates)"
                )
    except csv.Error as exc:
        raise KvsimError(f"{path}:{reader.line_num}: not valid CSV: {exc}") from None
    if not points:
        raise KvsimError(f"{path}: no rows")
    return points


#: Largest value of each integer column of a measurements CSV: a point's batch becomes a
#: list of its sequences, so batch_size must not be a billion.
_COLUMN_MAX = {
    "tp": MAX_TP,
    "batch_size": MAX_POINT_SEQUENCES,
    "num_decode_seqs": MAX_POINT_SEQUENCES,
    "prompt_tokens": MAX_TOKENS,
    "context_tokens": MAX_TOKENS,
    "decode_context_tokens": MAX_POINT_SEQUENCES * MAX_TOKENS,
}


def _parse_row(row: dict[str, str], where: str) -> Point:
    def integer(col: str, minimum: int) -> int:
        try:
            v = int(row[col])
        except (TypeError, ValueError):
            raise KvsimError(f"{where}: {col}: must be an integer, got {str(row[col])[:40]!r}") from None
        if v < minimum:
            raise KvsimError(f"{where}: {col}: must be >= {minimum}, got {v}")
        if v > _COLUMN_MAX[col]:
            raise KvsimError(f"{where}: {col}: must be <= {_COLUMN_MAX[col]:,}, got {str(v)[:40]}")
        return v

    phase = (row["phase"] or "").strip()
    if phase not in PHASES:
        raise KvsimError(f"{where}: phase: must be 'prefill', 'decode' or 'step', got {phase!r}")
    time_text = (row.get("time_s") or "").strip()
    time_s = None
    if time_text:
        try:
            time_s = float(time_text)
        except ValueError:
            raise KvsimError(f"{where}: time_s: must be a number, got {time_text!r}") from None
        if not math.isfinite(time_s) or time_s <= 0:
            raise KvsimError(f"{where}: time_s: must be > 0, got {time_text}")
    if phase == "step":
        return _parse_step_row(row, where, time_s, integer)
    point = Point(
        tp=integer("tp", 1),
        phase=phase,
        batch_size=integer("batch_size", 1),
        prompt_tokens=integer("prompt_tokens", 0),
        context_tokens=integer("context_tokens", 0),
        time_s=time_s,
    )
    if phase == "prefill" and point.prompt_tokens < 1:
        raise KvsimError(f"{where}: prompt_tokens: a prefill needs >= 1 prompt token")
    if phase == "decode" and point.context_tokens < 1:
        raise KvsimError(f"{where}: context_tokens: a decode step attends to >= 1 token")
    return point


def _parse_step_row(row: dict[str, str], where: str, time_s: float | None, integer: Any) -> Point:
    missing = [c for c in STEP_COLUMNS if c not in row]
    if missing:
        raise KvsimError(f"{where}: a step row needs column(s) {', '.join(missing)}")
    chunks = []
    items = (row["prefill_chunks"] or "").split()
    if len(items) > MAX_POINT_SEQUENCES:
        raise KvsimError(f"{where}: prefill_chunks: {len(items):,} chunks; at most {MAX_POINT_SEQUENCES:,}")
    for item in items:
        q_text, plus, c_text = item.partition("+")
        try:
            q, c = int(q_text), int(c_text)
        except ValueError:
            q = c = -1
        if not plus or q < 1 or c < 0 or q > MAX_TOKENS or c > MAX_TOKENS:
            raise KvsimError(
                f"{where}: prefill_chunks: {item[:40]!r} is not 'q+c' (q >= 1 new tokens after c >= 0 "
                f"cached, each <= {MAX_TOKENS:,})"
            )
        chunks.append((q, c))
    num_decode = integer("num_decode_seqs", 0) if (row["num_decode_seqs"] or "").strip() else 0
    decode_ctx = integer("decode_context_tokens", 0) if (row["decode_context_tokens"] or "").strip() else 0
    if decode_ctx < num_decode:
        raise KvsimError(
            f"{where}: decode_context_tokens: each of the {num_decode} decodes attends to >= 1 token, "
            f"got {decode_ctx}"
        )
    if not chunks and not num_decode:
        raise KvsimError(f"{where}: a step needs a prefill chunk or a decode")
    if len(chunks) + num_decode > MAX_POINT_SEQUENCES:
        raise KvsimError(f"{where}: the step has more than {MAX_POINT_SEQUENCES:,} sequences")
    point = Point.step(chunks, num_decode, decode_ctx, time_s, integer("tp", 1))
    if (row.get("batch_size") or "").strip() and integer("batch_size", 1) != point.batch_size:
        raise KvsimError(
            f"{where}: batch_size: {row['batch_size']} but the step has {point.batch_size} sequences"
        )
    return point


def point_time_s(cost_model: CostModel, point: Point) -> float:
    """Predicted time of one measurement point."""
    return cost_model.step_time_s(point.batch())


@dataclass(frozen=True)
class FitResult:
    """Fitted roofline parameters and how well they reproduce the points."""

    config: RooflineCostConfig
    num_points: int
    fitted: tuple[str, ...]
    median_abs_rel_error_prefill: float | None
    median_abs_rel_error_decode: float | None
    fixed_s: float = field(default=0.0)


_NAMES = (
    "compute_efficiency",
    "memory_efficiency",
    "kv_memory_efficiency",
    "fixed_s",
    "allreduce_latency_s",
    "allreduce_bandwidth_bytes_per_s",
)
_LOWER = np.log([1e-3, 1e-3, 1e-3, 1e-9, 1e-9, 1e6])
_UPPER = np.log([1.0, 1.0, 1.0, 10.0, 1e-1, 1e15])


class _Features:
    """Per-point roofline terms as arrays; ``predict`` prices them for a parameter vector."""

    def __init__(self, points: list[Point], model: ModelSpec, gpu: GpuSpec, kv_cache_dtype: str) -> None:
        rows = []
        for tp in sorted({p.tp for p in points}):
            rm = RooflineCostModel(model, gpu, RooflineCostConfig(), tp=tp, kv_cache_dtype=kv_cache_dtype)
            rows += [(i, rm.terms(p.batch())) for i, p in enumerate(points) if p.tp == tp]
        rows.sort(key=lambda r: r[0])
        terms = np.array([list(t) for _, t in rows], dtype=np.float64)
        self.lin_flops, self.weight_bytes, self.attn_flops, self.kv_bytes = (
            terms[:, 0],
            terms[:, 1],
            terms[:, 2],
            terms[:, 3],
        )
        self.num_allreduces, self.ar_bytes = terms[:, 4], terms[:, 5]
        self.peak = gpu.peak_flops(model.weight_dtype)
        self.hbm = gpu.hbm_bandwidth_bytes_per_s

    def predict(self, theta: np.ndarray, combine: str = "max") -> np.ndarray:
        ce, me, kve, fixed, lat, bw = np.exp(theta)
        rate_f, rate_b, rate_kv = self.peak * ce, self.hbm * me, self.hbm * kve
        join = np.add if combine == "sum" else np.maximum
        times: np.ndarray = (
            join(self.lin_flops / rate_f, self.weight_bytes / rate_b)
            + join(self.attn_flops / rate_f, self.kv_bytes / rate_kv)
            + self.num_allreduces * lat
            + self.ar_bytes / bw
            + fixed
        )
        return times


def levenberg_marquardt(
    residual: Any,
    theta0: np.ndarray,
    free: np.ndarray,
    *,
    max_iter: int = 200,
    step: float = 1e-6,
    lower: np.ndarray | None = None,
    upper: np.ndarray | None = None,
    max_damping: float = 1e12,
) -> tuple[np.ndarray, float]:
    """Minimise ``|residual(theta)|^2`` over the ``free`` entries of ``theta``, each kept within
    [``lower``, ``upper``] (default: the bounds of the roofline's log-parameters): damped
    Gauss-Newton with a central-difference Jacobian of half-width ``step``.

    An iteration whose step does not lower the cost raises the damping fourfold and tries
    again, up to ``max_damping``; then the search stops. Returns the best ``theta`` and its
    cost. `kvsim.observe.fit` uses it with whole simulations as the residual (a wider
    ``step``: a schedule is piecewise constant; a lower ``max_damping``: each try is a run)."""
    lo = _LOWER if lower is None else lower
    hi = _UPPER if upper is None else upper
    theta = theta0.copy()
    r = residual(theta)
    cost = float(r @ r)
    mu = 1e-3
    idx = np.flatnonzero(free)
    for _ in range(max_iter):
        jac = np.empty((len(r), len(idx)))
        for k, j in enumerate(idx):
            h = step
            tp_, tm_ = theta.copy(), theta.copy()
            tp_[j] += h
            tm_[j] -= h
            jac[:, k] = (residual(tp_) - residual(tm_)) / (2 * h)
        jtj, jtr = jac.T @ jac, jac.T @ r
        improved = False
        while mu < max_damping:
            delta = np.linalg.solve(jtj + mu * np.diag(np.diag(jtj) + 1e-12), -jtr)
            cand = theta.copy()
            cand[idx] = np.clip(theta[idx] + delta, lo[idx], hi[idx])
            rc = residual(cand)
            cand_cost = float(rc @ rc)
            if cand_cost < cost:
                converged = (
                    cost - cand_cost < 1e-16 * max(cost, 1e-30) or np.max(np.abs(cand - theta)) < 1e-12
                )
                theta, r, cost, mu = cand, rc, cand_cost, max(mu / 3, 1e-12)
                improved = True
                break
            mu *= 4
        if not improved or converged:
            break
    return theta, cost


def fit_roofline(
    points: list[Point],
    *,
    model: ModelSpec,
    gpu: GpuSpec,
    per_layer_overhead_s: float | None = None,
    kv_cache_dtype: str = "auto",
    initial: RooflineCostConfig | None = None,
    combine: Literal["max", "sum"] | None = None,
    robust_scale: float | None = None,
    match_total: bool = False,
) -> FitResult:
    """Fit roofline parameters to measured points (see the module docstring).

    ``combine`` ("max" or "sum", default: ``initial``'s) is the roofline's form, fixed
    during the fit (`RooflineCostConfig.combine`).

    ``robust_scale`` (e.g. 0.05): a soft-L1 loss on the log residuals instead of squares,
    log-residuals much larger than this count about linearly (iteratively reweighted),
    so that a minority of disturbed points (steps stretched by other work on a shared
    machine) does not bend the fit: it follows the undisturbed majority.

    ``match_total``: then scale every fitted time by one factor (all rates divided by it,
    fixed times multiplied: the roofline is homogeneous in them) so that the fit's total
    equals the measured total. A log (or robust) fit matches the typical point; a sum of
    step times, a request's latency, needs the mean, which right-skewed noise lifts.
    """
    measured = [p for p in points if p.time_s is not None]
    if len(measured) < 3:
        raise KvsimError(f"fitting needs at least 3 points with time_s, got {len(measured)}")
    init = initial or RooflineCostConfig()
    combine = combine or init.combine
    if combine not in ("max", "sum"):
        raise KvsimError(f'"combine" must be "max" or "sum", got {combine!r}')
    plo = per_layer_overhead_s if per_layer_overhead_s is not None else init.per_layer_overhead_s
    if plo < 0:
        raise KvsimError('"per_layer_overhead_s" must be >= 0')
    feats = _Features(measured, model, gpu, kv_cache_dtype)
    log_t = np.log(np.asarray([p.time_s for p in measured], dtype=np.float64))
    with_tp = any(p.tp > 1 for p in measured)
    free = np.array([True, True, True, True, with_tp, with_tp])
    lat0 = init.allreduce_latency_s if init.allreduce_latency_s is not None else gpu.interconnect_latency_s
    bw0 = init.allreduce_bandwidth_bytes_per_s or gpu.interconnect_bandwidth_bytes_per_s
    fixed0 = max(model.num_layers * init.per_layer_overhead_s + init.per_iteration_overhead_s, 1e-6)
    kve0 = init.kv_memory_efficiency or init.memory_efficiency
    prior = np.log([init.compute_efficiency, init.memory_efficiency, kve0, fixed0, max(lat0, 1e-9), bw0])
    if robust_scale is not None and not robust_scale > 0:
        raise KvsimError(f'"robust_scale" must be > 0, got {robust_scale}')
    sqrt_ridge = math.sqrt(RIDGE)
    sqrt_w = np.ones(len(measured))

    def residual(theta: np.ndarray) -> np.ndarray:
        r = np.log(feats.predict(theta, combine)) - log_t
        return np.concatenate([sqrt_w * r, sqrt_ridge * (theta - prior)[free]])

    best: tuple[np.ndarray, float] | None = None
    for ce in (0.3, 0.6, 0.9):
        for me in (0.4, 0.7, 0.95):
            start = prior.copy()
            start[:3] = np.log([ce, me, me])
            theta, cost = levenberg_marquardt(residual, start, free)
            if best is None or cost < best[1]:
                best = (theta, cost)
    assert best is not None
    if robust_scale is not None:
        # Iteratively reweighted least squares for the soft-L1 loss 2 (sqrt(1 + (r/s)^2) - 1):
        # weight 1 / sqrt(1 + (r/s)^2), from the best start.
        theta = best[0]
        for _ in range(20):
            r = np.log(feats.predict(theta, combine)) - log_t
            sqrt_w[:] = (1.0 + (r / robust_scale) ** 2) ** -0.25
            new_theta, _cost = levenberg_marquardt(residual, theta, free)
            done = np.max(np.abs(new_theta - theta)) < 1e-6
            theta = new_theta
            if done:
                break
        best = (theta, 0.0)
    if match_total:
        factor = float(np.exp(log_t).sum() / feats.predict(best[0], combine).sum())
        scaled = best[0].copy()
        scaled[[0, 1, 2, 5]] -= math.log(factor)  # rates / factor
        scaled[[3, 4]] += math.log(factor)  # fixed times x factor
        best = (scaled, 0.0)
    ce, me, kve, fixed, lat, bw = (float(v) for v in np.exp(best[0]))
    pio = fixed - model.num_layers * plo
    if pio < 0:
        plo, pio = fixed / model.num_layers, 0.0
    config = RooflineCostConfig(
        compute_efficiency=min(ce, 1.0),
        memory_efficiency=min(me, 1.0),
        kv_memory_efficiency=min(kve, 1.0),
        combine=combine,
        per_layer_overhead_s=plo,
        per_iteration_overhead_s=pio,
        allreduce_latency_s=lat if with_tp else init.allreduce_latency_s,
        allreduce_bandwidth_bytes_per_s=bw if with_tp else init.allreduce_bandwidth_bytes_per_s,
    )
    rel = np.abs(feats.predict(best[0], combine) / np.exp(log_t) - 1.0)
    # Step points count as prefill when they prefill anything, else as decode.
    phases = np.array(["prefill" if p.has_prefill else "decode" for p in measured])
    med = {
        ph: float(np.median(rel[phases == ph])) if np.any(phases == ph) else None
        for ph in ("prefill", "decode")
    }
    return FitResult(
        config=config,
        num_points=len(measured),
        fitted=tuple(n for n, f in zip(_NAMES, free, strict=True) if f),
        median_abs_rel_error_prefill=med["prefill"],
        median_abs_rel_error_decode=med["decode"],
        fixed_s=fixed,
    )


def profile_grid_points(profile: Profile, cost_model: CostModel) -> list[Point]:
    """Points over a kernels profile's grids, timed by ``cost_model`` (for --fit-roofline)."""
    tp = profile.tps[0]
    pf = profile.data["prefill_attention"]
    points = [Point(tp, "prefill", 1, q, c) for q in pf["chunk_tokens"] for c in pf["context_tokens"]]
    dec = next(iter(profile.data["decode_attention"].values()))
    points += [Point(tp, "decode", b, 0, c) for b in dec["batch_sizes"] for c in dec["context_tokens"]]
    return [
        Point(p.tp, p.phase, p.batch_size, p.prompt_tokens, p.context_tokens, point_time_s(cost_model, p))
        for p in points
    ]


def roofline_fit_profile(
    result: FitResult, *, model: ModelSpec, gpu: GpuSpec, points: list[Point], command: str = ""
) -> dict[str, Any]:
    """A roofline-fit profile (see `kvsim.cost.profile`) holding ``result`` and its points."""
    return {
        "format": PROFILE_FORMAT,
        "version": PROFILE_VERSION,
        "kind": "roofline-fit",
        "created": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": command,
        "model": model_shape(model),
        "dtype": model.weight_dtype,
        "gpu": gpu.name,
        "tps": sorted({p.tp for p in points}),
        "roofline": result.config.model_dump(exclude={"kind"}),
        "fit": {
            "num_points": result.num_points,
            "fitted": list(result.fitted),
            "fixed_s": result.fixed_s,
            "median_abs_rel_error_prefill": result.median_abs_rel_error_prefill,
            "median_abs_rel_error_decode": result.median_abs_rel_error_decode,
        },
        "points": [p.as_dict() for p in points],
    }
