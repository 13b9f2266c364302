"""Differential validation of kvsim's engine core against a real vLLM engine.

The same requests run through vLLM's v1 engine and through kvsim's scheduler and block
pool on one *step clock* (step k is the k-th engine iteration; an idle engine jumps to
the next arrival), and the two step-by-step records are compared.

    workload.py     DiffWorkload: engine knobs + requests (segments of content ids); the
                    content -> token-id mapping both sides share (stdlib only)
    fixtures.py     compact gzip'd JSON files of workloads and vLLM records (stdlib only)
    generate.py     the pinned-seed workload catalogue recorded as test fixtures (stdlib only)
    vllm_engine.py  the recorder: drives the real LLMEngine; runs under vLLM's interpreter
    convert.py      kvsim RequestSpecs / scenarios -> DiffWorkload
    kvsim_side.py   the one adapter into kvsim's core: replays a DiffWorkload -> record
    compare.py      record vs record: identical or the first diverging step; totals

Nothing here is imported by ``import kvsim``. The stdlib-only modules are imported by the
recorder as plain sibling modules (it runs in a venv without kvsim's dependencies), so
they must not import other kvsim modules.
"""
