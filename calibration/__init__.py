"""Calibration: measuring kvsim's cost curves with real torch kernels.

This package only measures: it is the only part of kvsim that imports torch, and only in
`calibration.harness`, `calibration.tables`, `calibration.allreduce` and
`calibration.endtoend`; the CLI imports them when ``kvsim calibrate`` measures. The
profiles it produces are read by `kvsim.cost.profile`; those shipped with kvsim are package
data in kvsim/data/profiles. Kernel tables are written by `kvsim.cost.table_layout`.

    calibration/
    ├── shapes.py      ModelShape: the layer shapes to measure, sharded for TP
    ├── grids.py       the grids measured (default, --quick, and small CPU sizes)
    ├── timing.py      warm-up, CUDA-event / perf_counter timing, medians
    ├── harness.py     the kernels timed and the profile dict they produce (torch)
    ├── table_grids.py the grids of --tables: aiconfigurator's sweep, a subset, CPU sizes
    ├── tables.py      kernel tables in aiconfigurator-core's shape (--tables), incl. the
    │                  fused paged decode kernels and their gather-then-attend reference (torch)
    ├── allreduce.py   all-reduce timing over NCCL when several GPUs are visible (torch)
    ├── endtoend.py    whole forward iterations, to check the calibrated model (torch)
    └── measurements/  end-to-end iteration times measured with endtoend.py (CSV)
"""
