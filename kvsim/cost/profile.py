"""Cost profiles: the versioned JSON files that `kvsim calibrate` writes and cost models read.

A profile is one JSON object with a header and a body that depends on its ``kind``:

    format   "kvsim-profile"           version  1
    kind     "kernels"                 kernel times measured by calibration/ (harness)
             "roofline-fit"            roofline parameters fitted to measurements
             "kernels-fit"             the kernels cost model's free terms fitted to an
                                       observed server (kvsim calibrate --from-observed)
    model    {name, num_layers, hidden_size, num_attention_heads, num_kv_heads,
              head_dim, intermediate_size, vocab_size, dtype}
    dtype    weight/activation dtype ("bf16", "fp16"; "fp32" for CPU fits)
    gpu      kvsim GPU preset the profile belongs to (or null: not checked)
    created  ISO-8601 UTC time;  command: the command line that made it

kernels body (times in seconds, one transformer layer on one TP shard):

    tp, device{name, memory_bytes, driver, torch, cuda, ...}, settings{grids, repeats, ...}
    per_iteration_overhead_s
    gemm               {tokens[T], shapes{op: [in, out]}, time_s{qkv, o, gate_up, down, lm_head: [T]}}
    elementwise        {tokens[T], time_s[T]}
    prefill_attention  {chunk_tokens[Q], context_tokens[C], time_s[Q][C]}
    decode_attention   {kv_dtype: {batch_sizes[B], context_tokens[C], time_s[B][C]}}
    hbm_copy           {bytes[], time_s[], bandwidth_bytes_per_s}   (read + write counted)
    host_transfer      {status: measured|skipped, ...bandwidth_bytes_per_s | reason}
    allreduce          {status: measured|skipped, ...bytes[], time_s[], world_size | reason}

roofline-fit body:

    tps[]            TP degrees present in the fitted measurements
    roofline         RooflineCostConfig fields (compute_efficiency, memory_efficiency, ...)
    fit              {num_points, median_abs_rel_error_prefill, ..._decode}
    points[]         the measurements fitted, {tp, phase, batch_size, prompt_tokens,
                     context_tokens, time_s}; ``step`` points add prefill_chunks [[q, c]],
                     num_decode_seqs and decode_context_tokens (`kvsim.cost.fit.Point`)

kernels-fit body:

    tps[]            TP degrees of the observed server (the tables price any TP degree)
    kernels          KernelCostConfig fields (system, backend, version, tables,
                     per_iteration_overhead_s, per_layer_overhead_s, elementwise_*)
    fit              what was fitted and how well (kvsim.observe.fit)

`load_profile` resolves a shipped profile name or a path, checks everything above and
raises `ProfileError` naming the file, the field and the rule; `check_profile_matches`
refuses a profile measured for another model, dtype, KV dtype, TP degree or GPU.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvsim.cost.config import KernelCostConfig, RooflineCostConfig
from kvsim.errors import ProfileError
from kvsim.inputs import FileTooLargeError, read_input
from kvsim.limits import MAX_PROFILE_BYTES
from kvsim.model.specs import GpuSpec, ModelSpec
from kvsim.outputs import write_file
from kvsim.paths import PathError, exists, expand_user, is_file, printable

#: Folder of the profiles shipped with kvsim (package data; ``kvsim profiles`` lists them).
PROFILES_DIR = Path(__file__).resolve().parent.parent / "data" / "profiles"

PROFILE_FORMAT = "kvsim-profile"
PROFILE_VERSION = 1
PROFILE_KINDS = ("kernels", "roofline-fit", "kernels-fit")
GEMM_OPS = ("qkv", "o", "gate_up", "down", "lm_head")
MODEL_SHAPE_FIELDS = (
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "num_kv_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
)


@dataclass(frozen=True)
class Profile:
    """A validated profile and the file it came from."""

    data: dict[str, Any]
    source: str

    @property
    def kind(self) -> str:
        return str(self.data["kind"])

    @property
    def name(self) -> str:
        return Path(self.source).stem

    @property
    def model(self) -> dict[str, Any]:
        return dict(self.data["model"])

    @property
    def dtype(self) -> str:
        return str(self.data["dtype"])

    @property
    def gpu(self) -> str | None:
        return self.data.get("gpu")

    @property
    def tps(self) -> list[int]:
        """TP degrees the profile covers: its one ``tp`` (kernels) or the fitted ones."""
        return [int(self.data["tp"])] if self.kind == "kernels" else [int(t) for t in self.data["tps"]]

    @property
    def kv_dtypes(self) -> list[str]:
        if self.kind == "kernels":
            return sorted(self.data["decode_attention"])
        return []

    @property
    def created(self) -> str:
        return str(self.data.get("created", ""))


class _Checker:
    """Collects ``field: rule`` problems of one profile."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.problems: list[str] = []

    def fail(self, path: str, rule: str) -> None:
        self.problems.append(f"{path}: {rule}")

    def get(self, obj: Any, key: str, path: str, kind: type | tuple[type, ...]) -> Any:
        if not isinstance(obj, dict) or key not in obj:
            self.fail(path, "is missing")
            return None
        value = obj[key]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or isinstance(value, bool):
            names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            self.fail(path, f"must be of type {names}, got {type(value).__name__}")
            return None
        return value

    def grid(self, obj: Any, key: str, path: str, minimum: int) -> list[int] | None:
        values = self.get(obj, key, path, list)
        if values is None:
            return None
        if not values:
            self.fail(path, "must not be empty")
            return None
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            self.fail(path, "must hold integers")
            return None
        if values[0] < minimum:
            self.fail(path, f"must start at >= {minimum}")
        if any(b <= a for a, b in itertools.pairwise(values)):
            self.fail(path, "must be strictly increasing")
        return list(values)

    def times(self, values: Any, path: str, length: int) -> None:
        if not isinstance(values, list) or len(values) != length:
            self.fail(path, f"must be a list of {length} times")
            return
        for i, v in enumerate(values):
            if not isinstance(v, int | float) or isinstance(v, bool) or not math.isfinite(v) or v <= 0:
                self.fail(f"{path}.{i}", f"must be a finite time > 0, got {v!r}")
                return

    def table(self, obj: Any, key: str, path: str, rows: int, cols: int) -> None:
        values = self.get(obj, key, path, list)
        if values is None:
            return
        if len(values) != rows:
            self.fail(path, f"must have {rows} rows, got {len(values)}")
            return
        for i, row in enumerate(values):
            self.times(row, f"{path}.{i}", cols)


def validate_profile(data: Any, source: str = "<profile>") -> None:
    """Raise ProfileError listing every problem of ``data`` as a profile (see module docstring)."""
    c = _Checker(source)
    if not isinstance(data, dict):
        raise ProfileError(f"{source}: a profile must be a JSON object")
    if data.get("format") != PROFILE_FORMAT:
        raise ProfileError(f"{source}: format: must be {PROFILE_FORMAT!r}, got {data.get('format')!r}")
    if data.get("version") != PROFILE_VERSION:
        raise ProfileError(
            f"{source}: version: this kvsim reads profile version {PROFILE_VERSION}, "
            f"got {data.get('version')!r}"
        )
    kind = data.get("kind")
    if kind not in PROFILE_KINDS:
        raise ProfileError(f"{source}: kind: must be one of {', '.join(PROFILE_KINDS)}, got {kind!r}")
    model = c.get(data, "model", "model", dict)
    if model is not None:
        c.get(model, "name", "model.name", str)
        for f in MODEL_SHAPE_FIELDS:
            v = c.get(model, f, f"model.{f}", int)
            if v is not None and v <= 0:
                c.fail(f"model.{f}", "must be > 0")
    dtype = c.get(data, "dtype", "dtype", str)
    if dtype is not None and dtype not in ("fp32", "fp16", "bf16", "fp8", "int8", "int4"):
        c.fail("dtype", f"unknown dtype {dtype!r}")
    if data.get("gpu") is not None:
        c.get(data, "gpu", "gpu", str)
    if kind == "kernels":
        _validate_kernels(c, data)
    elif kind == "kernels-fit":
        _validate_kernels_fit(c, data)
    else:
        _validate_roofline_fit(c, data)
    if c.problems:
        raise ProfileError(f"{source}: invalid profile\n" + "\n".join(f"  {p}" for p in c.problems))


def _validate_kernels(c: _Checker, data: dict[str, Any]) -> None:
    tp = c.get(data, "tp", "tp", int)
    if tp is not None and tp < 1:
        c.fail("tp", "must be >= 1")
    c.get(data, "device", "device", dict)
    overhead = c.get(data, "per_iteration_overhead_s", "per_iteration_overhead_s", float)
    if overhead is not None and overhead < 0:
        c.fail("per_iteration_overhead_s", "must be >= 0")
    gemm = c.get(data, "gemm", "gemm", dict)
    if gemm is not None:
        tokens = c.grid(gemm, "tokens", "gemm.tokens", 1)
        times = c.get(gemm, "time_s", "gemm.time_s", dict)
        if tokens is not None and times is not None:
            for op in GEMM_OPS:
                c.times(times.get(op), f"gemm.time_s.{op}", len(tokens))
    ew = c.get(data, "elementwise", "elementwise", dict)
    if ew is not None:
        tokens = c.grid(ew, "tokens", "elementwise.tokens", 1)
        if tokens is not None:
            c.times(ew.get("time_s"), "elementwise.time_s", len(tokens))
    pf = c.get(data, "prefill_attention", "prefill_attention", dict)
    if pf is not None:
        q = c.grid(pf, "chunk_tokens", "prefill_attention.chunk_tokens", 1)
        ctx = c.grid(pf, "context_tokens", "prefill_attention.context_tokens", 0)
        if q is not None and ctx is not None:
            c.table(pf, "time_s", "prefill_attention.time_s", len(q), len(ctx))
    dec = c.get(data, "decode_attention", "decode_attention", dict)
    if dec is not None:
        if not dec:
            c.fail("decode_attention", "must hold at least one KV dtype")
        for kv, tbl in dec.items():
            path = f"decode_attention.{kv}"
            b = c.grid(tbl, "batch_sizes", f"{path}.batch_sizes", 1)
            ctx = c.grid(tbl, "context_tokens", f"{path}.context_tokens", 1)
            if b is not None and ctx is not None:
                c.table(tbl, "time_s", f"{path}.time_s", len(b), len(ctx))
    hbm = c.get(data, "hbm_copy", "hbm_copy", dict)
    if hbm is not None:
        bw = c.get(hbm, "bandwidth_bytes_per_s", "hbm_copy.bandwidth_bytes_per_s", float)
        if bw is not None and bw <= 0:
            c.fail("hbm_copy.bandwidth_bytes_per_s", "must be > 0")
    host = c.get(data, "host_transfer", "host_transfer", dict)
    if host is not None and _status(c, host, "host_transfer") == "measured":
        bw = c.get(host, "bandwidth_bytes_per_s", "host_transfer.bandwidth_bytes_per_s", float)
        if bw is not None and bw <= 0:
            c.fail("host_transfer.bandwidth_bytes_per_s", "must be > 0")
    ar = c.get(data, "allreduce", "allreduce", dict)
    if ar is not None and _status(c, ar, "allreduce") == "measured":
        sizes = c.grid(ar, "bytes", "allreduce.bytes", 1)
        if sizes is not None:
            c.times(ar.get("time_s"), "allreduce.time_s", len(sizes))
        c.get(ar, "world_size", "allreduce.world_size", int)


def _status(c: _Checker, obj: dict[str, Any], path: str) -> str | None:
    status = c.get(obj, "status", f"{path}.status", str)
    if status not in (None, "measured", "skipped"):
        c.fail(f"{path}.status", f"must be 'measured' or 'skipped', got {status!r}")
    return None if status is None else str(status)


def _validate_roofline_fit(c: _Checker, data: dict[str, Any]) -> None:
    _validate_tps(c, data)
    params = c.get(data, "roofline", "roofline", dict)
    if params is not None:
        try:
            RooflineCostConfig(**params)
        except (TypeError, ValueError) as exc:
            c.fail("roofline", f"not valid roofline parameters: {exc}")
    points = c.get(data, "points", "points", list)
    if points is not None:
        for i, p in enumerate(points):
            if not isinstance(p, dict) or p.get("phase") not in ("prefill", "decode", "step"):
                c.fail(f"points.{i}", "must be an object with phase 'prefill', 'decode' or 'step'")
                break


def _validate_tps(c: _Checker, data: dict[str, Any]) -> None:
    tps = c.get(data, "tps", "tps", list)
    if tps is not None and (not tps or not all(isinstance(t, int) and t >= 1 for t in tps)):
        c.fail("tps", "must be a non-empty list of integers >= 1")


def _validate_kernels_fit(c: _Checker, data: dict[str, Any]) -> None:
    _validate_tps(c, data)
    params = c.get(data, "kernels", "kernels", dict)
    if params is not None:
        try:
            KernelCostConfig(**params)
        except (TypeError, ValueError) as exc:
            c.fail("kernels", f"not valid kernels cost-model parameters: {exc}")


def resolve_profile_path(name_or_path: str | Path, base_dir: Path | None = None) -> Path:
    """The file a profile reference names: a path (absolute or relative to ``base_dir``) or a shipped name."""
    text = str(name_or_path)
    looks_like_path = "/" in text or "\\" in text or text.endswith(".json")
    if looks_like_path:
        try:
            path = expand_user(text, "profile file")
        except PathError as exc:
            raise ProfileError(str(exc)) from None
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        if not exists(path):
            raise ProfileError(f"profile file {_shown(str(path))!r} does not exist")
        return path  # load_profile refuses what is not a regular file (a FIFO, /dev/zero)
    shipped = PROFILES_DIR / f"{text}.json"
    if is_file(shipped):
        return shipped
    names = ", ".join(p.stem for p in shipped_profiles()) or "none"
    raise ProfileError(
        f"no shipped profile named {_shown(text)!r} (shipped: {names}); give a path to a profile file"
    )


def _shown(text: str, limit: int = 200) -> str:
    return printable(text if len(text) <= limit else text[: limit - 3] + "...")


def load_profile(name_or_path: str | Path, base_dir: Path | None = None) -> Profile:
    """Read and validate a profile by shipped name or path."""
    path = resolve_profile_path(name_or_path, base_dir)
    try:
        raw = read_input(path, MAX_PROFILE_BYTES)  # a regular file, capped: never /dev/zero or a FIFO
    except FileTooLargeError:
        raise ProfileError(f"{path}: cannot read profile: larger than {MAX_PROFILE_BYTES:,} bytes") from None
    except (OSError, ValueError) as exc:
        raise ProfileError(f"{path}: cannot read profile: {exc}") from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ProfileError(f"{path}: cannot read profile: not UTF-8 at byte {exc.start}") from None
    except RecursionError:
        raise ProfileError(f"{path}: cannot read profile: JSON nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, or an integer of more than 4,300 digits
        raise ProfileError(f"{path}: cannot read profile: {exc}") from None
    validate_profile(data, str(path))
    return Profile(data, str(path))


def write_profile(data: dict[str, Any], path: str | Path) -> Path:
    """Validate ``data`` and write it as indented JSON to ``path`` (parents created), atomically.

    An existing file is replaced only if it is a profile kvsim wrote (its first field is
    ``"format": "kvsim-profile"``); anything else, a folder or a filesystem root is refused
    with an `OutputError` (`kvsim.outputs`), and a failure leaves the old file as it was.
    """
    path = Path(path)
    validate_profile(data, str(path))
    ordered = {"format": data["format"], **data}  # the format first: what proves kvsim wrote it
    write_file(path, (json.dumps(ordered, indent=1) + "\n").encode("utf-8"), "profile", PROFILE_FORMAT)
    return path


def shipped_profiles() -> list[Path]:
    """Profiles installed with kvsim, sorted by name."""
    return sorted(PROFILES_DIR.glob("*.json"))


def model_shape(model: ModelSpec) -> dict[str, Any]:
    """The profile's ``model`` header for a ModelSpec."""
    return {
        "name": model.name,
        **{f: getattr(model, f) for f in MODEL_SHAPE_FIELDS},
        "dtype": model.weight_dtype,
    }


def check_profile_matches(
    profile: Profile, *, model: ModelSpec, gpu: GpuSpec | None, tp: int, kv_cache_dtype: str
) -> None:
    """Raise ProfileError unless ``profile`` was made for this model, dtype, KV dtype, TP and GPU.

    Models match on their shapes (a profile of llama-3-8b serves llama-3.1-8b); ``gpu`` is
    checked when the profile names one. A roofline fit covers any TP degree when its
    measurements included TP > 1 (the all-reduce terms were fitted), else only TP 1; a
    kernels fit covers any (the tables price the all-reduces).
    """
    src = profile.source
    for f in MODEL_SHAPE_FIELDS:
        if profile.model[f] != getattr(model, f):
            raise ProfileError(
                f"{src}: profile is for model {profile.model['name']!r} ({f}={profile.model[f]}), "
                f"not {model.name!r} ({f}={getattr(model, f)})"
            )
    if profile.dtype != model.weight_dtype:
        raise ProfileError(
            f"{src}: profile dtype {profile.dtype!r} does not match the model's {model.weight_dtype!r}"
        )
    if gpu is not None and profile.gpu is not None and profile.gpu.lower() != gpu.name.lower():
        raise ProfileError(
            f"{src}: profile was measured on GPU {profile.gpu!r}, the scenario uses {gpu.name!r}"
        )
    if profile.kind == "kernels":
        if tp != profile.tps[0]:
            raise ProfileError(
                f"{src}: profile was measured for tp={profile.tps[0]}, the scenario uses tp={tp}"
            )
        kv = model.weight_dtype if kv_cache_dtype == "auto" else kv_cache_dtype
        if kv not in profile.kv_dtypes:
            raise ProfileError(
                f"{src}: profile has decode attention for KV dtypes {profile.kv_dtypes}, "
                f"not kv_cache_dtype={kv_cache_dtype!r} ({kv})"
            )
    elif profile.kind == "roofline-fit" and tp > 1 and max(profile.tps) == 1:
        raise ProfileError(f"{src}: roofline fit has no TP > 1 measurements, the scenario uses tp={tp}")
