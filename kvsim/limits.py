"""Bounds on what kvsim reads: YAML files, trace files and scenario field values.

Every bound is a named constant here, so that the loaders, the schema (``kvsim schema``
shows the field bounds as ``minimum`` / ``maximum``) and the docs (docs/limits.md) agree.
The bounds are far above anything a real scenario or trace needs; they exist so that
hostile or careless input ends in a clean error naming the file, the field or line and
the rule, instead of a traceback, a hang or memory running out.
"""

from __future__ import annotations

# --------------------------------------------------------------------------- YAML files
# (scenario files, sweep files, --set values are not files; see kvsim.yaml_safe)

#: Largest YAML file read, bytes. The largest file in scenarios/ is about 2 KiB.
MAX_YAML_BYTES = 1024 * 1024
#: Deepest nesting of mappings and lists. Scenario and sweep files nest at most 5 deep.
MAX_YAML_DEPTH = 32
#: Most nodes (scalars, lists, mappings, keys included) after expanding every alias,
#: counted before anything is built: an alias bomb stops here. Parsing this many nodes
#: takes about half a second; a scenario has about 100, a 1,000-point sweep about 5,000.
MAX_YAML_NODES = 20_000
#: Most anchors (``&name``) and most aliases (``*name``) in one document.
MAX_YAML_ANCHORS = 100
MAX_YAML_ALIASES = 100
#: Longest scalar (a string, a number), characters; also the longest string field of a
#: scenario, so that every valid scenario reloads from its saved scenario.yaml.
MAX_YAML_SCALAR_CHARS = 65_536
#: Most digits of an integer written in a YAML file (Python refuses to convert integers of
#: more than 4,300 digits; every integer field is far below 10**64 anyway).
MAX_YAML_INT_DIGITS = 64

#: Largest Hugging Face config.json (or hf_quant_config.json) read, bytes. The largest in
#: aiconfigurator-core's model_configs/ is 3 MB (an NVFP4 export's exclusion list).
MAX_HF_CONFIG_BYTES = 4 * 1024 * 1024

# --------------------------------------------------------------------------- trace files

#: Longest physical line of a trace file, characters (a Mooncake line with 2,000 hash ids
#: is about 16,000).
MAX_TRACE_LINE_CHARS = 1024 * 1024
#: Longest CSV cell, characters: the csv module's own default limit, reported cleanly.
MAX_TRACE_CELL_CHARS = 131_072
#: Deepest nesting of a JSON line (a Mooncake row is 2 deep: an object holding a list).
MAX_TRACE_JSON_DEPTH = 16
#: Largest hash id: content ids of the engine lie in (-2**60, 2**60).
MAX_HASH_ID = 2**60 - 1
#: Largest trace timestamp, in seconds after unit conversion (about 31,700 years).
MAX_TRACE_TIME_S = 1e12
#: Largest trace (or empirical length) file, bytes, and most lines read from one. Reading
#: costs about 500 bytes of memory and 25 us per row (measured on a 1M-row Azure CSV: 670
#: MB, 24 s), so a trace at the line limit takes about 5 GB and 4 minutes; the run's work
#: estimate refuses far less by default (sim.max_memory_gib: about 1.6M requests).
MAX_TRACE_BYTES = 2 * 1024**3
MAX_TRACE_LINES = 10_000_000
#: Most hash ids of one trace file, all rows together: a 1 MiB line holds about 100,000,
#: and each costs about 36 bytes in memory (the Mooncake conversation trace has 288,500).
MAX_TRACE_HASH_IDS = 50_000_000

# --------------------------------------------------------------------------- scenario fields

#: Largest token count anywhere (a prompt, an output, a prefix, a length bound, a context):
#: int32 range, so that sums over a request fit easily in numpy's int64.
MAX_TOKENS = 2**31 - 1
#: Most requests of a workload (the per-run work estimate refuses absurd work earlier).
MAX_NUM_REQUESTS = 2**31 - 1
#: Longest base length of a benchmark client's random dataset (input, output, prefix): twice
#: it, what a range ratio near 1 draws, still fits the token limit.
MAX_BENCH_LEN = 2**30
#: Most samples per prompt (``parallel_samples``) and beams (``beam_width``).
MAX_SAMPLES = 1024
#: Most distinct shared prompts in a pool (system prompts, few-shot templates).
MAX_SHARED_PROMPTS = 1_000_000
#: Most tenants of a workload (a resolved scenario with this many stays within
#: MAX_YAML_NODES, so that its saved scenario.yaml reloads).
MAX_TENANTS = 1_000
#: Largest scheduling priority in absolute value (int32).
MAX_PRIORITY = 2**31 - 1
#: Arrival rates, requests per second: one a day and a half at least (so that gaps stay
#: finite), a million per second at most.
MIN_RATE_PER_S = 1e-5
MAX_RATE_PER_S = 1e6
#: Coefficients of variation (gamma arrivals, lognormal lengths): 1/cv**2 is a gamma shape.
MIN_CV = 1e-3
MAX_CV = 100.0
#: Burstiness of a benchmark client's arrivals (`vllm bench serve --burstiness`, a gamma
#: shape: cv = 1 / sqrt(burstiness)): the range of the gamma cv bounds above.
MIN_BURSTINESS = 1e-4
MAX_BURSTINESS = 1e6
#: Every duration, time and period of a workload (think time, burst lengths, ramp length,
#: diurnal period and phase, trace windows), seconds: about 31.7 years.
MAX_TIME_S = 1e9
#: Shortest diurnal period, seconds (shorter periods lose the sine to rounding).
MIN_PERIOD_S = 1e-3
#: Relative traffic weights of tenants.
MAX_WEIGHT = 1e9
#: Power-law exponents (Zipf lengths, prompt popularity).
MAX_EXPONENT = 100.0
#: Trace replay speed-up (``time_scale``): between a million times slower and faster.
MIN_TIME_SCALE = 1e-6
MAX_TIME_SCALE = 1e6
#: Down-ramps: the start rate may be at most this many times the end rate (thinning draws
#: start/end candidates per arrival after the ramp).
MAX_RAMP_RATE_RATIO = 1000.0
#: On/off arrivals: least mean number of arrivals per ON+OFF cycle (the generator loops
#: once per period; fewer would take more than 100 loops per request).
MIN_ONOFF_ARRIVALS_PER_CYCLE = 0.01

#: Fixed times of the cost model (a step, a per-layer or per-iteration overhead, a
#: collective's latency), seconds.
MAX_STEP_TIME_S = 3600.0
#: A server front end's time per prompt token (`FrontendConfig`), seconds: a second a token is
#: far past any tokenizer, and keeps request_s + tokens x it finite.
MAX_FRONTEND_TOKEN_S = 1.0
#: Bandwidths (HBM, interconnect, PCIe, all-reduce), bytes per second, and peak compute,
#: FLOP/s or OP/s. The minimum keeps times (bytes / bandwidth) finite; the maximum is only
#: finite, so that 1e30 still says "this costs nothing" (a use in the tests).
MIN_BANDWIDTH_BYTES_PER_S = 1e3
MAX_BANDWIDTH_BYTES_PER_S = 1e30
MIN_FLOPS = 1e6
MAX_FLOPS = 1e30
#: GPU memory, bytes (16 TiB; the largest GPUs hold 288 GB).
MAX_GPU_MEMORY_BYTES = 2**44
#: Parameter counts (a quadrillion; the largest models have a few trillion).
MAX_NUM_PARAMS = 1e15
#: Model shape: layers, and widths (hidden, MLP, vocabulary), heads and head dimensions,
#: experts.
MAX_LAYERS = 4096
MAX_WIDTH = 2**24
MAX_HEADS = 65_536
MAX_EXPERTS = 65_536

# --------------------------------------------------------------------------- work of a command

#: Most points of one sweep file (explicit points x grid combinations), counted before the
#: grid is expanded: each point holds its resolved scenario (about 15 KB; 10,000 points
#: load in about 1.5 s and 150 MB) and is a full simulation.
MAX_SWEEP_POINTS = 10_000
#: Most parallel workers (``--jobs``) of ``kvsim sweep``, ``kvsim capacity`` and ``kvsim plan``: at most
#: JOBS_PER_CPU x the machine's CPU count for local processes (or a local Ray), and never
#: more than MAX_JOBS, whatever runs them.
JOBS_PER_CPU = 4
MAX_JOBS = 256
#: Most windows a run is cut into for spikes and rolling quantiles (``spikes --window``):
#: each costs a few searches and quantiles; the default cuts a run into about 60.
MAX_WINDOWS = 100_000
#: Most candidate values of ``kvsim capacity`` (``--range``, ``--values``): each is
#: validated before the search starts (a few ms each); bisection runs about log2 of them.
MAX_CANDIDATES = 10_000
#: Most widths of ``kvsim sharing --widths``: each is two full runs.
MAX_WIDTHS = 32
#: ``kvsim cache-curve``: most capacities (``--capacities``); most blocks the trace is cut
#: into (counted from the prompt lengths before a key is built: a block key costs about
#: 7-40 us and 200 bytes; the Mooncake conversation trace is 288,500 blocks of 512 tokens,
#: 9.05M of 16); most block lookups of all capacities together (capacities x blocks:
#: each capacity replays the whole trace, about 0.6 us per block).
MAX_CAPACITIES = 1_000
MAX_CACHE_CURVE_BLOCKS = 20_000_000
MAX_CACHE_CURVE_LOOKUPS = 200_000_000

# --------------------------------------------------------------------------- plan searches

#: Most configurations (GPU x TP x engine knobs x router x aggregated/disaggregated) one
#: `kvsim plan` may search: each needs at least one full run, about 5-10 s for a one-hour
#: trace on this project's machine.
MAX_PLAN_CONFIGS = 2_000
#: Most values one `kvsim plan` space option lists (--gpus, --tp, --max-num-seqs, ...).
MAX_PLAN_VALUES = 64
#: Default and largest number of runs one `kvsim plan` makes (--max-runs).
DEFAULT_PLAN_RUNS = 400
MAX_PLAN_RUNS = 100_000
#: Most GPUs of one deployment a plan considers (--max-gpus).
MAX_PLAN_GPUS = 65_536

# --------------------------------------------------------------------------- other files

#: Largest cost profile read (JSON), bytes; shipped profiles are about 13 KB.
MAX_PROFILE_BYTES = 16 * 1024 * 1024
#: Largest summary.json of a result folder read back, bytes (one is about 3 KB); also a
#: sweep point's point.json.
MAX_SUMMARY_BYTES = 16 * 1024 * 1024
#: Largest measurements CSV (``predict --points``, ``calibrate --fit-measurements``),
#: bytes and data rows (a row is a Point object and a cost-model evaluation or a
#: residual of the fit).
MAX_POINTS_CSV_BYTES = 64 * 1024 * 1024
MAX_POINTS_CSV_ROWS = 100_000
#: Most sequences of one measured iteration (a row's batch_size, num_decode_seqs, prefill
#: chunks): a point's batch is a list of them (vLLM's max_num_seqs is 256-1,024).
MAX_POINT_SEQUENCES = 65_536
#: Most sequences of all the points of one measurements CSV together (sum of batch_size):
#: each costs about a microsecond of cost model per prediction or fit iteration.
MAX_POINTS_CSV_SEQUENCES = 10_000_000
#: Largest vLLM fixture file (``verify-vllm --fixtures``), compressed and decompressed
#: bytes (the largest recorded one decompresses to 3.8 MB): a gzip bomb stops there.
MAX_FIXTURE_BYTES = 256 * 1024 * 1024

# --------------------------------------------------------------------------- servers (kvsim observe)

#: Longest line of a streamed completion (one server-sent event), bytes. vLLM's events are
#: about 350 bytes; the first echoes the prompt's token ids (about 6 bytes per token).
MAX_SSE_LINE_BYTES = 16 * 1024 * 1024
#: Bytes of a stream allowed per requested output token (vLLM sends about 350): a server
#: that streams forever is cut at this times the tokens asked for (at least 1 MiB in all).
MAX_STREAM_BYTES_PER_TOKEN = 64 * 1024
#: Largest /metrics exposition read, bytes (vLLM 0.32's is about 50 KB).
MAX_METRICS_BYTES = 16 * 1024 * 1024
#: Largest JSON answer read from /models or /version, bytes.
MAX_INFO_BYTES = 1024 * 1024


def exact_int_if_huge(value: object) -> object:
    """A float too large for int64 but integral (1e30) as the exact Python int.

    Used as a before-validator on every field of the schema models: pydantic would report
    such a float given to an integer field as "unable to parse input string as an integer";
    as an int, it is reported by the field's bound ("less than or equal to 2147483647").
    """
    if isinstance(value, float) and value.is_integer() and abs(value) >= 2**63:
        return int(value)
    return value
