"""Calibration: a cost profile's measured kernel times against the roofline's prediction."""

from __future__ import annotations

import _common as common
import streamlit as st

PROFILE_DIR = common.REPO_ROOT / "calibration" / "profiles"


def main() -> None:
    st.set_page_config(page_title="kvsim: calibration", layout="wide")
    st.title("Calibration")
    profiles = sorted(PROFILE_DIR.glob("*.json")) if PROFILE_DIR.is_dir() else []
    if not profiles:
        st.info(
            "No cost profiles found in calibration/profiles/. Measure one on a GPU with "
            "`kvsim calibrate --model MODEL --out PROFILE` and put it there; the roofline cost model "
            "is used until then."
        )
        st.stop()
    st.selectbox("Profile", profiles, format_func=lambda p: p.stem)


main()
