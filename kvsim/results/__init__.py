"""What a run returns: its tables from the moment they are recorded to the files and the printed summary.

recorder.py      per-iteration rows and events as flat typed columns while the engine runs
ledger.py        per-request figures of the cluster layer (routing, transfers, tiers), beside the engine's own
result.py        `Result`: the request, iteration and event tables and their summary (`summarize`)
overload.py      offered against achieved load, and whether a run was overloaded (part of the summary)
io.py            save_result / load_result: atomic result folders
report.py        the summary table that ``kvsim run`` prints
bench_report.py  what ``vllm bench serve`` would have printed and saved, from a `Result`

The engine writes through the recorder and the ledger; everything else here reads tables.
The analyses and figures over these tables are in `kvsim.analysis` (which imports this package, never the reverse).
"""
