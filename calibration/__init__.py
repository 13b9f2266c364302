"""Calibration: measuring kvsim's cost curves with real torch kernels.

This package is the only part of kvsim that imports torch, and only in
`calibration.harness`, `calibration.allreduce` and `calibration.endtoend`; the CLI
imports the harness when ``kvsim calibrate`` measures. Importing this package itself
needs neither torch nor pydantic: `kvsim.cost.profile` uses `PROFILES_DIR` to find the shipped profiles.

    calibration/
    ├── shapes.py      ModelShape: the layer shapes to measure, sharded for TP
    ├── grids.py       the grids measured (default, --quick, and small CPU sizes)
    ├── timing.py      warm-up, CUDA-event / perf_counter timing, medians
    ├── harness.py     the kernels timed and the profile dict they produce (torch)
    ├── allreduce.py   all-reduce timing over NCCL when several GPUs are visible (torch)
    ├── endtoend.py    whole forward iterations, to check the calibrated model (torch)
    ├── measurements/  end-to-end iteration times measured with endtoend.py (CSV)
    └── profiles/      shipped profiles (JSON), installed with the package
"""

from __future__ import annotations

from pathlib import Path

#: Folder of the profiles shipped with kvsim (``kvsim profiles`` lists them).
PROFILES_DIR = Path(__file__).resolve().parent / "profiles"

__all__ = ["PROFILES_DIR"]
