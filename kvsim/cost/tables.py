"""Measured kernel tables: where they live, how they are read, how they are interpolated.

The tables are NVIDIA's, shipped in the PyPI package ``aiconfigurator-core`` (Apache-2.0;
kvsim reads version 0.12.0 through the ``kernels`` extra), or a user's own measured with
the same layout by ``kvsim calibrate``:

    <root>/<system>/<op>/<backend>/<version>/<table>.parquet
    e.g. h200_sxm/gemm/vllm/0.24.0/gemm_perf.parquet       m, n, k, gemm_dtype -> latency
         h200_sxm/attention/vllm/0.24.0/generation_attention_perf.parquet
         h200_sxm/comm/vllm/0.24.0/custom_allreduce_perf.parquet

Every table holds one kernel's ``latency`` in milliseconds on a grid of shapes. kvsim
never imports the package (it would load NVIDIA's compiled estimator): it finds the
installed folder and reads the parquet files with pandas.

Interpolation (``Curve`` and ``Grid``) is piecewise linear inside the measured grid.
Outside it, latencies below the smallest measured size are held at its value (a kernel
does not get faster than its launch), and above the largest they grow in proportion to
the size (the large-size end of every table here is bandwidth- or compute-bound, where
time is linear in the work). Each extrapolation is reported once, by name, as a warning.
"""

from __future__ import annotations

import bisect
import functools
import importlib.util
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from kvsim.errors import ProfileError

#: The package whose tables kvsim reads by default, and the version its docs and the
#: validation figures were made with (`pip install -e '.[kernels]'`).
KERNEL_DATA_PACKAGE = "aiconfigurator_core"
KERNEL_DATA_VERSION = "0.12.0"
#: Largest table file read, bytes (the largest shipped one is about 2 MB).
MAX_TABLE_BYTES = 256 * 1024 * 1024

MS = 1e-3  # the tables' unit, in seconds


def package_tables_root() -> Path | None:
    """``systems/data`` of the installed aiconfigurator-core, or None when it is not installed."""
    spec = importlib.util.find_spec(KERNEL_DATA_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations))) / "systems" / "data"
    return root if root.is_dir() else None


def version_key(version: str) -> tuple[tuple[int, str], ...]:
    """Sort key of an engine version: 0.5.6.post2 < 0.5.14 < 1.3.0rc5 < 1.3.0rc20 < 1.3.0."""
    parts = re.findall(r"\d+|[a-z]+", version.lower())
    # A pre-release tag (rc, a, b, dev) sorts before the release; post after it.
    rank = {"dev": -3, "a": -2, "b": -2, "rc": -1, "post": 1}
    return (*((int(p), "") if p.isdigit() else (rank.get(p, 0), p) for p in parts), (0, "~"))


@dataclass(frozen=True)
class TableIndex:
    """What a tables root holds: for each (system, op, backend), its versions, newest last."""

    root: Path
    entries: dict[tuple[str, str, str], tuple[str, ...]]

    @classmethod
    def scan(cls, root: Path) -> TableIndex:
        entries: dict[tuple[str, str, str], list[str]] = {}
        for version_dir in sorted(root.glob("*/*/*/*")):
            if version_dir.is_dir() and any(version_dir.glob("*.parquet")):
                system, op, backend = version_dir.parts[-4:-1]
                entries.setdefault((system, op, backend), []).append(version_dir.name)
        return cls(root, {k: tuple(sorted(v, key=version_key)) for k, v in entries.items()})

    def systems(self) -> list[str]:
        return sorted({s for s, _, _ in self.entries})

    def backends(self, system: str, op: str) -> list[str]:
        return sorted(b for s, o, b in self.entries if s == system and o == op)

    def versions(self, system: str, op: str, backend: str) -> tuple[str, ...]:
        return self.entries.get((system, op, backend), ())

    def folder(self, system: str, op: str, backend: str, version: str | None) -> Path:
        """The folder of one op's tables: ``version`` if given and present, else the newest."""
        versions = self.versions(system, op, backend)
        if not versions:
            have = ", ".join(self.backends(system, op)) or "none"
            raise ProfileError(
                f"{self.root}: no {op} tables for {system} / {backend} (backends with {op} tables: {have})"
            )
        if version is None:
            return self.root / system / op / backend / versions[-1]
        if version not in versions:
            raise ProfileError(
                f"{self.root}: no {op} tables for {system} / {backend} version {version!r} "
                f"(measured: {', '.join(versions)})"
            )
        return self.root / system / op / backend / version


@functools.lru_cache(maxsize=8)
def table_index(root: Path) -> TableIndex:
    return TableIndex.scan(root)


@functools.lru_cache(maxsize=32)
def read_table(path: Path) -> pd.DataFrame:
    """One parquet table, read once per process (tables are immutable data)."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read kernel table: {exc.strerror or exc}") from None
    if not path.is_file():
        raise ProfileError(f"{path}: cannot read kernel table: not a regular file")
    if size > MAX_TABLE_BYTES:
        raise ProfileError(f"{path}: cannot read kernel table: larger than {MAX_TABLE_BYTES:,} bytes")
    try:
        frame = pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises many kinds for a damaged file
        raise ProfileError(f"{path}: cannot read kernel table: {exc}") from None
    if "latency" not in frame.columns:
        raise ProfileError(f"{path}: not a kernel table: no 'latency' column")
    latency = pd.to_numeric(frame["latency"], errors="coerce")
    return frame.assign(latency=latency)[np.isfinite(latency) & (latency > 0)].reset_index(drop=True)


# --------------------------------------------------------------------------- interpolation


class Curve:
    """A latency measured at increasing sizes ``xs``: linear between them, held below the
    first, proportional above the last."""

    __slots__ = ("_x0", "_xs", "_xy_last", "_ys", "x_max")

    def __init__(self, xs: Sequence[float] | np.ndarray, ys: Sequence[float] | np.ndarray) -> None:
        if len(xs) == 0 or len(xs) != len(ys):
            raise ValueError("a curve needs as many latencies as sizes, at least one")
        order = np.argsort(np.asarray(xs, dtype=np.float64), kind="stable")
        self._xs = [float(xs[i]) for i in order]
        self._ys = [float(ys[i]) for i in order]
        self._x0 = self._xs[0]
        self.x_max = self._xs[-1]
        self._xy_last = self._ys[-1] / self.x_max if self.x_max > 0 else 0.0

    @property
    def sizes(self) -> np.ndarray:
        return np.asarray(self._xs)

    def __call__(self, x: float) -> float:
        xs, ys = self._xs, self._ys
        if x <= self._x0:
            return ys[0]
        if x >= self.x_max:
            return self._xy_last * x if x > self.x_max else ys[-1]
        i = bisect.bisect_right(xs, x)
        x0, x1, y0 = xs[i - 1], xs[i], ys[i - 1]
        return y0 + (ys[i] - y0) * ((x - x0) / (x1 - x0))

    def at(self, x: np.ndarray) -> np.ndarray:
        """The curve at many sizes (numpy); equal, element by element, to calling it."""
        xs = np.asarray(self._xs)
        ys = np.asarray(self._ys)
        x = np.asarray(x, dtype=np.float64)
        i = np.clip(np.searchsorted(xs, x, side="right"), 1, max(len(xs) - 1, 1))
        if len(xs) == 1:
            inside = np.full(x.shape, ys[0])
        else:
            x0, x1, y0 = xs[i - 1], xs[i], ys[i - 1]
            inside = y0 + (ys[i] - y0) * ((x - x0) / (x1 - x0))
        out = np.where(x <= self._x0, ys[0], inside)
        out = np.where(x >= self.x_max, ys[-1], out)
        result: np.ndarray = np.where(x > self.x_max, self._xy_last * x, out)
        return result


def _fill_proportional(xs: np.ndarray, column: np.ndarray) -> np.ndarray | None:
    """A column measured at some of ``xs`` completed: linear inside, held / proportional outside."""
    known = np.isfinite(column)
    if not known.any():
        return None
    return Curve(xs[known], column[known]).at(xs)


class Grid:
    """Latency on a 2-D grid (``xs`` by ``ys``), bilinear inside, extended outside as `Curve`.

    Cells never measured (the tables skip shapes that do not fit in memory) are filled
    first along ``xs`` from the measured cells of their column, then along ``ys``.
    """

    __slots__ = ("_columns", "_rows", "_xlist", "xs", "ys")

    def __init__(self, xs: Sequence[float], ys: Sequence[float], values: np.ndarray) -> None:
        self.xs = np.asarray(xs, dtype=np.float64)
        self.ys = np.asarray(ys, dtype=np.float64)
        z = np.array(values, dtype=np.float64)
        if z.shape != (len(self.xs), len(self.ys)):
            raise ValueError("grid values must be len(xs) x len(ys)")
        for j in range(len(self.ys)):
            filled = _fill_proportional(self.xs, z[:, j])
            if filled is not None:
                z[:, j] = filled
        for i in range(len(self.xs)):
            filled = _fill_proportional(self.ys, z[i, :])
            if filled is None:
                raise ValueError("a grid needs at least one measured cell")
            z[i, :] = filled
        # One curve along ys per measured x: a query interpolates two of them along xs.
        self._rows = [Curve(self.ys, z[i, :]) for i in range(len(self.xs))]
        self._columns = z
        self._xlist = [float(x) for x in self.xs]

    def at(self, x: float, y: np.ndarray) -> np.ndarray:
        """Latencies at one ``x`` and many ``y`` (numpy)."""
        xs = self.xs
        if len(xs) == 1 or x <= xs[0]:
            return self._rows[0].at(y)
        if x >= xs[-1]:
            last = self._rows[-1].at(y)
            return last * (x / xs[-1]) if x > xs[-1] else last
        i = int(np.searchsorted(xs, x, side="right"))
        lo, hi = self._rows[i - 1].at(y), self._rows[i].at(y)
        between: np.ndarray = lo + (hi - lo) * ((x - float(xs[i - 1])) / (float(xs[i]) - float(xs[i - 1])))
        return between

    def __call__(self, x: float, y: float) -> float:
        """The latency at one (x, y), in plain floats (an iteration's hot path); equal to
        `at`, the same operations in the same order."""
        xs = self._xlist
        if len(xs) == 1 or x <= xs[0]:
            return self._rows[0](y)
        if x >= xs[-1]:
            last = self._rows[-1](y)
            return last * (x / xs[-1]) if x > xs[-1] else last
        i = bisect.bisect_right(xs, x)
        lo, hi = self._rows[i - 1](y), self._rows[i](y)
        return lo + (hi - lo) * ((x - xs[i - 1]) / (xs[i] - xs[i - 1]))
