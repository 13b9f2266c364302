"""Calibration: a cost profile's measured kernel times against the roofline's prediction."""

from __future__ import annotations

import _common as common
import pandas as pd
import streamlit as st

import kvsim
from kvsim.analysis import plots
from kvsim.cost.compare import compare_rows
from kvsim.cost.profile import Profile, load_profile, shipped_profiles
from kvsim.model.presets import GPU_PRESETS, MODEL_PRESETS
from kvsim.model.specs import GpuSpec

X_TITLES = {
    "gemm": "tokens (rows of the GEMM)",
    "prefill": "new prompt tokens in the chunk",
    "decode": "batch size (requests)",
}


def guess_gpu(profile: Profile) -> str:
    """The GPU preset a profile was measured on: its name, or the preset its name starts with."""
    name = (profile.gpu or "").lower()
    if name in GPU_PRESETS:
        return name
    prefixed = sorted((p for p in GPU_PRESETS if name.startswith(p)), key=len, reverse=True)
    return prefixed[0] if prefixed else sorted(GPU_PRESETS)[0]


def kernel_points(rows: pd.DataFrame, context_tokens: int) -> pd.DataFrame:
    """Measured points for `plots.calibration_figure`: GEMMs, and attention at one context length."""
    measured = rows[rows["measured_s"].notna()].copy()
    gemm = measured[measured["section"].str.startswith("gemm/")].assign(kernel=lambda d: d["section"])
    attn = measured[measured["section"].str.match(r"^(prefill|decode/)") & (measured["y"] == context_tokens)]
    attn = attn.assign(kernel=attn["section"] + f" (context {context_tokens:,})")
    return pd.concat([gemm, attn])[["kernel", "x", "measured_s", "roofline_s"]]


def readable(rows: pd.DataFrame) -> pd.DataFrame:
    """Times in µs with three significant digits, relative errors in % (the CSV keeps these numbers)."""
    out = rows.copy()
    for col in [c for c in out.columns if c.endswith("_s")]:
        out[col.removesuffix("_s") + "_us"] = out.pop(col).map(
            lambda v: float(f"{v * 1e6:.3g}") if pd.notna(v) else v
        )
    for col in [c for c in out.columns if c.endswith("_rel_err")]:
        out[col.removesuffix("_rel_err") + "_err_pct"] = out.pop(col).map(
            lambda v: round(float(v) * 100, 1) if pd.notna(v) else v
        )
    return out


def main() -> None:
    st.set_page_config(page_title="kvsim: calibration", layout="wide")
    common.show_notices()
    common.sync_url()  # nothing here goes into the view; the link keeps the rest of it
    st.title("Calibration")
    profiles = shipped_profiles()
    if not profiles:
        st.info(
            "No cost profiles found in kvsim/data/profiles/. Measure one on a GPU with "
            "`kvsim calibrate --model MODEL --out PROFILE` and put it there; the roofline cost model "
            "is used until then."
        )
        st.stop()
    cols = st.columns(3)
    path = cols[0].selectbox("Profile", profiles, format_func=lambda p: p.stem)
    try:
        profile = load_profile(path)
    except kvsim.KvsimError as err:
        st.error(str(err))
        st.stop()
    st.caption(
        f"{profile.kind} profile of {profile.model['name']} ({profile.dtype}, tp={profile.tps[0]}) measured on "
        f"{profile.gpu or 'an unnamed GPU'}, {profile.created}."
    )
    if profile.kind != "kernels":
        st.info(
            "This profile is a roofline fit to end-to-end measurements; `kvsim calibrate --compare` prints it."
        )
        st.stop()
    gpu_names = sorted(GPU_PRESETS)
    gpu_name = cols[1].selectbox(
        "Roofline GPU preset",
        gpu_names,
        index=gpu_names.index(guess_gpu(profile)),
        help="Datasheet figures the roofline uses (peak FLOP/s, HBM bandwidth).",
    )
    gpu: GpuSpec = GPU_PRESETS[gpu_name]
    if profile.gpu and profile.gpu.lower() != gpu_name:
        st.warning(
            f"The profile names its GPU {profile.gpu!r}, which is not a preset name; the roofline uses preset "
            f"{gpu_name!r}'s datasheet figures."
        )
        gpu = gpu.model_copy(update={"name": profile.gpu})
    model = MODEL_PRESETS.get(profile.model["name"].lower())
    if model is None:
        st.error(f"The profile's model {profile.model['name']!r} is not a preset; compare it with the CLI.")
        st.stop()
    try:
        rows = pd.DataFrame(compare_rows(profile, model=model, gpu=gpu))
    except kvsim.KvsimError as err:
        st.error(str(err))
        st.stop()
    contexts = sorted(
        int(c) for c in rows.loc[rows["section"].str.startswith("decode/"), "y"].dropna().unique()
    )
    context = cols[2].selectbox(
        "Attention context (tokens)",
        contexts,
        index=contexts.index(1024) if 1024 in contexts else 0,
        help="Cached tokens per request of the attention panels (prefill shows it where it was measured).",
    )
    points = kernel_points(rows, context)
    titles = {k: X_TITLES[k.split("/")[0].split(" ")[0]] for k in points["kernel"].unique()}
    fig = plots.calibration_figure(points, x_titles=titles)
    common.show_figure(fig, f"{profile.name}_vs_roofline")
    st.caption("One layer on one tensor-parallel shard; roofline with the default efficiency factors.")
    common.show_table(readable(rows), f"{profile.name}_compare")


main()
