"""Roofline vs calibrated vs measured times over a profile's grid (``kvsim calibrate --compare``).

For a kernels profile, one row per measured kernel point (one layer on one TP shard):

    gemm/<op>   T tokens             roofline: max(2 T k n / (peak ce), (k n + T k + T n) b / (bw me))
    prefill     q new after c cached roofline: max(4 heads hd pairs / (peak ce), kv_layer (q+c) / (bw kv_me))
    decode/<kv> n requests x context roofline: max(4 heads hd n ctx / (peak ce), kv_layer n ctx / (bw kv_me))

plus one row per whole iteration (``iteration/prefill``, ``iteration/decode``) where the
calibrated model's prediction is set against the roofline's. For a roofline-fit profile,
one row per fitted measurement: measured, fitted roofline, default roofline.
``*_rel_err`` is (model - measured) / measured, or (roofline - calibrated) / calibrated
on iteration rows. ``ce``, ``me`` and ``kv_me`` are the roofline's compute, memory and
KV-read efficiencies (``kv_me`` defaults to ``me``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kvsim.cost.calibrated import CalibratedCostModel
from kvsim.cost.config import RooflineCostConfig
from kvsim.cost.factory import roofline_config_from_profile
from kvsim.cost.fit import Point, point_time_s
from kvsim.cost.profile import Profile, check_profile_matches
from kvsim.cost.roofline import RooflineCostModel
from kvsim.errors import ProfileError
from kvsim.model.kv_sizing import kv_bytes_per_token
from kvsim.model.specs import WEIGHT_DTYPE_BYTES, GpuSpec, ModelSpec


def _row(
    section: str, x: int, y: int | None, measured: float | None, calibrated: float | None, roofline: float
) -> dict[str, Any]:
    ref = measured if measured is not None else calibrated
    return {
        "section": section,
        "x": x,
        "y": y,
        "measured_s": measured,
        "calibrated_s": calibrated,
        "roofline_s": roofline,
        "roofline_rel_err": (roofline - ref) / ref if ref else None,
        "calibrated_rel_err": (calibrated - measured) / measured
        if measured and calibrated is not None
        else None,
    }


def compare_rows(
    profile: Profile,
    *,
    model: ModelSpec,
    gpu: GpuSpec,
    kv_cache_dtype: str = "auto",
    roofline: RooflineCostConfig | None = None,
) -> list[dict[str, Any]]:
    """Comparison rows for a profile (see the module docstring)."""
    cfg = roofline or RooflineCostConfig()
    if profile.kind == "kernels-fit":
        raise ProfileError(
            f"{profile.source}: a kernels-fit profile holds fitted overheads, no measured points to compare"
        )
    if profile.kind == "roofline-fit":
        return _fit_rows(profile, model=model, gpu=gpu, kv_cache_dtype=kv_cache_dtype, default=cfg)
    data, tp = profile.data, profile.tps[0]
    peak = gpu.peak_flops(model.weight_dtype) * cfg.compute_efficiency
    bw = gpu.hbm_bandwidth_bytes_per_s * cfg.memory_efficiency
    bw_kv = gpu.hbm_bandwidth_bytes_per_s * (cfg.kv_memory_efficiency or cfg.memory_efficiency)
    wb = WEIGHT_DTYPE_BYTES[model.weight_dtype]
    rows: list[dict[str, Any]] = []
    gemm = data["gemm"]
    for op, (k, n) in gemm["shapes"].items():
        for t, measured in zip(gemm["tokens"], gemm["time_s"][op], strict=True):
            roof = max(2.0 * t * k * n / peak, (k * n + t * k + t * n) * wb / bw)
            rows.append(_row(f"gemm/{op}", t, None, measured, None, roof))
    heads, hd, layers = model.num_attention_heads / tp, model.head_dim, model.num_layers
    check_profile_matches(profile, model=model, gpu=gpu, tp=tp, kv_cache_dtype=kv_cache_dtype)
    calibrated = CalibratedCostModel(profile, model=model, gpu=gpu, tp=tp, kv_cache_dtype=kv_cache_dtype)
    pf = data["prefill_attention"]
    kv_layer_auto = kv_bytes_per_token(model, "auto", tp) / layers
    for i, q in enumerate(pf["chunk_tokens"]):
        for j, c in enumerate(pf["context_tokens"]):
            pairs = q * c + q * (q + 1) // 2
            roof = max(4.0 * heads * hd * pairs / peak, kv_layer_auto * (q + c) / bw_kv)
            rows.append(_row("prefill", q, c, pf["time_s"][i][j], calibrated.prefill(q, c), roof))
    for kv, dec in data["decode_attention"].items():
        kv_layer = kv_bytes_per_token(model, kv, tp) / layers
        for i, b in enumerate(dec["batch_sizes"]):
            for j, c in enumerate(dec["context_tokens"]):
                roof = max(4.0 * heads * hd * b * c / peak, kv_layer * b * c / bw_kv)
                rows.append(_row(f"decode/{kv}", b, c, dec["time_s"][i][j], None, roof))
    roof_model = RooflineCostModel(model, gpu, cfg, tp=tp, kv_cache_dtype=kv_cache_dtype)
    dec = data["decode_attention"][model.weight_dtype if kv_cache_dtype == "auto" else kv_cache_dtype]
    points = [Point(tp, "prefill", 1, q, 0) for q in pf["chunk_tokens"]]
    points += [Point(tp, "decode", b, 0, c) for b in dec["batch_sizes"] for c in dec["context_tokens"]]
    for p in points:
        x, y = (p.prompt_tokens, None) if p.phase == "prefill" else (p.batch_size, p.context_tokens)
        rows.append(
            _row(f"iteration/{p.phase}", x, y, None, point_time_s(calibrated, p), point_time_s(roof_model, p))
        )
    return rows


def _fit_rows(
    profile: Profile, *, model: ModelSpec, gpu: GpuSpec, kv_cache_dtype: str, default: RooflineCostConfig
) -> list[dict[str, Any]]:
    fitted_cfg = roofline_config_from_profile(profile)
    rows = []
    models: dict[int, tuple[RooflineCostModel, RooflineCostModel]] = {}
    for raw in profile.data["points"]:
        p = Point.from_dict(raw)
        if p.tp not in models:
            models[p.tp] = (
                RooflineCostModel(model, gpu, fitted_cfg, tp=p.tp, kv_cache_dtype=kv_cache_dtype),
                RooflineCostModel(model, gpu, default, tp=p.tp, kv_cache_dtype=kv_cache_dtype),
            )
        fitted_s = point_time_s(models[p.tp][0], p)
        default_s = point_time_s(models[p.tp][1], p)
        measured = p.time_s
        rows.append(
            {
                **p.as_dict(),
                "fitted_s": fitted_s,
                "roofline_s": default_s,
                "fitted_rel_err": (fitted_s - measured) / measured if measured else None,
                "roofline_rel_err": (default_s - measured) / measured if measured else None,
            }
        )
    return rows


def compare_summary(rows: list[dict[str, Any]]) -> str:
    """Median |relative error| per section, one line each."""
    by: dict[str, dict[str, list[float]]] = {}
    for r in rows:
        section = r.get("section") or f"{r['phase']} tp={r['tp']}"
        for key in ("roofline_rel_err", "calibrated_rel_err", "fitted_rel_err"):
            if r.get(key) is not None:
                by.setdefault(section, {}).setdefault(key, []).append(abs(r[key]))
    lines = ["median |relative error| by section:"]
    for section, errs in by.items():
        parts = [f"{k.removesuffix('_rel_err')} {np.median(v):.1%}" for k, v in errs.items()]
        lines.append(f"  {section}: " + ", ".join(parts))
    return "\n".join(lines)
