"""What is served and on what: model and GPU descriptions, presets, and the arithmetic on them.

specs.py        `ModelSpec`, `GpuSpec`, KV dtypes: plain frozen descriptions
presets.py      model and GPU presets and name resolution (``resolve_model("Llama-2-70B")``)
hf_config.py    a `ModelSpec` from a Hugging Face ``config.json``
kv_sizing.py    KV bytes per token / block / layer group, KV capacity per GPU
memory_fit.py   does a model fit: weights, activations and KV at a context and batch (``kvsim fit``)
moe.py          mixture-of-experts arithmetic: expert parameters, experts a batch activates

Closed-form arithmetic only: nothing here runs the engine.
"""
