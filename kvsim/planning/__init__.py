"""Many runs towards a decision: sweeps, capacity searches, the planner, and what a deployment costs.

sweep.py      one base scenario, many override sets, one tidy table (local processes or Ray)
capacity.py   the least of a knob (or the most load) that meets an SLO, by bisection (``kvsim capacity``)
planner.py    the cheapest GPU type, TP degree, replica count and knobs that meet every SLO (``kvsim plan``)
pricing.py    $/hour, $/M tokens and energy per token of a deployment (prices in kvsim/data/prices.yaml)
"""
