"""`observe`: send a scenario's workload to a live server on the scenario's clock, and record it.

    observation = observe(scenario, ObserveOptions(url="http://127.0.0.1:8000/v1"))
    save_result(observation.result, "runs/observed")

The requests are the ones `kvsim.run` would simulate (the workload drawn from the scenario's
seed), sent by the same request source the engine uses (`kvsim.engine.sources`): each at its
arrival time, follow-up turns think time after their parent's last token, a benchmark
client's closed loop when the previous request ends. What the server does decides when the
next request goes, as in a simulation what the engine does decides it.

    t0 ─ source.start() ─> [Release(spec, at_s)] ─ sleep until t0 + at_s ─ POST /completions
              ^                                                              │ stream, time tokens
              └──────────── source.on_done(request, finish_s) <─── last token / failure
    every scrape_interval_s: GET /metrics ─> Sample (running, waiting, KV usage, counters)

Ctrl-C (SIGINT) stops the observation: requests in flight are closed and kept as far as they
got (``interrupted``), requests not yet due are ``not_sent``, and the result is returned as
usual (``interrupted`` True); a second Ctrl-C stops at once. The server being unreachable at
the start is a `ServerUnreachable`; after `ObserveOptions.max_connection_failures` requests in
a row that could not connect, the observation stops the same way as on Ctrl-C.

httpx and prometheus_client (the ``observe`` extra) are imported when an observation starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import math
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from kvsim.core.request_state import Request, Status
from kvsim.engine.simulator import scenario_workload
from kvsim.engine.sources import BenchClientSource, ConversationSource, Release, RequestSource
from kvsim.errors import KvsimError
from kvsim.limits import MAX_INFO_BYTES, MAX_METRICS_BYTES
from kvsim.observe.metrics import Sample, parse_exposition
from kvsim.observe.outcome import Limits
from kvsim.observe.prompts import PromptBuilder
from kvsim.observe.record import Collected, build_result
from kvsim.paths import printable
from kvsim.request import RequestSpec
from kvsim.results.result import Result
from kvsim.scenario.schema import Scenario

#: Longest URL accepted, characters.
MAX_URL_CHARS = 2048

#: ``progress(elapsed_s, num_done, num_requests)``, called about five times a second.
ObserveProgress = Callable[[float, int, int], None]


class ObserveError(KvsimError):
    """Bad input to an observation (a URL, an option, a workload it cannot send): exit 2."""


class ServerUnreachable(KvsimError):
    """The server did not answer before anything was sent (exit 1: nothing was measured)."""


@dataclass(frozen=True)
class ObserveOptions:
    """How to reach the server and what to send (`kvsim observe`'s options)."""

    url: str
    #: The served model's name; None: the first one ``GET {url}/models`` lists.
    model: str | None = None
    #: Where the Prometheus metrics are; None: ``/metrics`` at the URL's host; "": none.
    metrics_url: str | None = None
    scrape_interval_s: float = 0.5
    #: token_ids: ``prompt`` as a list of token ids (exact); text: one word per token id.
    prompt_format: Literal["token_ids", "text"] = "token_ids"
    #: Send vLLM/SGLang's extensions: ignore_eos, min_tokens (exact output lengths),
    #: return_token_ids and continuous_usage_stats (exact token counts per event).
    extensions: bool = True
    #: Token ids are drawn below this; None: the scenario model's vocab_size.
    vocab_size: int | None = None
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 120.0
    request_timeout_s: float = 3600.0
    retries: int = 2
    retry_backoff_s: float = 0.5
    #: Requests in flight at most (more wait for a free connection; their lateness is recorded).
    max_in_flight: int = 1024
    #: Stop after this many requests in a row that could not connect (the server went away).
    max_connection_failures: int = 20
    #: Sent as ``Authorization: Bearer ...``; never written anywhere.
    api_key: str | None = field(default=None, repr=False)
    #: More fields of every request body (e.g. {"temperature": 0}); the ones above win.
    extra_body: dict[str, Any] = field(default_factory=dict)


@dataclass
class Observation:
    """What `observe` returns: the result (kvsim's format) and what the user should be told."""

    result: Result
    interrupted: bool
    notes: list[str]


# --------------------------------------------------------------------------- URLs


def check_url(text: str, what: str) -> str:
    """``text`` as an http(s) URL without a trailing slash, or an `ObserveError` naming ``what``."""
    shown = printable(text if len(text) <= 80 else text[:77] + "...")
    if len(text) > MAX_URL_CHARS:
        raise ObserveError(f"{what} {shown}: a URL of {len(text):,} characters; at most {MAX_URL_CHARS:,}")
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in text):
        raise ObserveError(f"{what} {shown}: a URL holds no spaces or control characters")
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise ObserveError(f"{what} {shown}: not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise ObserveError(
            f"{what} {shown}: must be an http:// or https:// URL (an OpenAI-compatible server), "
            f"got {'no scheme' if not parts.scheme else repr(parts.scheme)}"
        )
    if not parts.hostname:
        raise ObserveError(f"{what} {shown}: names no host")
    if port == 0:
        raise ObserveError(f"{what} {shown}: port 0 is not a port a server listens on")
    if parts.query or parts.fragment:
        raise ObserveError(f"{what} {shown}: takes no query or fragment (?..., #...)")
    return text.rstrip("/")


def default_metrics_url(url: str) -> str:
    """``/metrics`` at the host of ``url`` (vLLM and SGLang serve it at the root)."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/metrics", "", ""))


def _version_url(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/version", "", ""))


# --------------------------------------------------------------------------- the observation


def _workload(scenario: Scenario, base_dir: Path | None) -> tuple[list[RequestSpec], RequestSource, Any]:
    work = scenario_workload(scenario, base_dir=base_dir)
    specs = list(work.requests)
    beams = [s.request_id for s in specs if s.beam_group is not None]
    if beams:
        raise ObserveError(
            f"workload.beam_width: kvsim observe sends independent requests; beam search is not an "
            f"OpenAI completion ({len(beams)} beam requests)"
        )
    if not specs:
        raise ObserveError("workload: no request to send")
    source: RequestSource = (
        BenchClientSource(specs, work.client) if work.client is not None else ConversationSource(specs)
    )
    return specs, source, work


class _Run:
    """One observation in progress: the dispatcher of requests, the scraper, the records."""

    def __init__(
        self,
        scenario: Scenario,
        specs: list[RequestSpec],
        source: RequestSource,
        opts: ObserveOptions,
        http: Any,
        model: str,
        progress: ObserveProgress | None,
    ) -> None:
        import httpx  # the observe extra

        self.scenario = scenario
        self.specs = {s.request_id: s for s in specs}
        self.source = source
        self.opts = opts
        self.http: httpx.AsyncClient = http
        self.model = model
        self.progress = progress
        self.loop = asyncio.get_running_loop()
        self.t0 = self.loop.time()
        vocab = opts.vocab_size or scenario_vocab(scenario)
        self.prompts = PromptBuilder(vocab)
        self.limits = Limits(
            opts.connect_timeout_s,
            opts.read_timeout_s,
            opts.request_timeout_s,
            opts.retries,
            opts.retry_backoff_s,
        )
        self.slots = asyncio.Semaphore(opts.max_in_flight)
        self.collected = Collected()
        self.tasks: set[asyncio.Task[None]] = set()
        self.done = asyncio.Event()
        self.interrupted = False
        self.stop_reason = ""
        self.failure_streak = 0
        self.salted = scenario.replicas[0].engine.cache_isolation == "tenant"

    def clock(self) -> float:
        return self.loop.time() - self.t0

    # -- requests -------------------------------------------------------------------------
    def release(self, releases: list[Release] | Any) -> None:
        for rel in releases:
            rid = rel.spec.request_id
            if rel.dropped:
                self.collected.dropped[rid] = "parent_failed"
                self._done(rel.spec, failed=True)
                continue
            self.collected.schedule[rid] = (rel.at_s, rel.ready_s)
            if self.interrupted:
                continue  # not_sent
            task = self.loop.create_task(self._run_one(rel))
            self.tasks.add(task)
            task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.stop_reason = f"internal error: {task.exception()!r}"
            self.interrupt()
        if not self.tasks:
            self.done.set()

    def _done(self, spec: RequestSpec, *, failed: bool) -> None:
        """Tell the source ``spec`` is over (finished, or failed: rejected) and send what it lets go."""
        req = Request(spec)
        rec = self.collected.records.get(spec.request_id)
        req.status = Status.REJECTED if failed else Status.FINISHED
        req.metrics.finish_s = rec.finish_s if rec is not None and not failed else self.clock()
        self.release(self.source.on_done(req, self.clock()))

    async def _run_one(self, rel: Release) -> None:
        from kvsim.observe.client import send_completion

        spec = rel.spec
        delay = self.t0 + rel.at_s - self.loop.time()
        try:
            if delay > 0:
                await asyncio.sleep(delay)
            await self.slots.acquire()
        except asyncio.CancelledError:
            return  # not_sent
        try:
            body, prompt_tokens = self._body(spec)
            rec = await send_completion(
                self.http,
                self.opts.url + "/completions",
                body,
                request_id=spec.request_id,
                requested_tokens=spec.output_tokens,
                prompt_tokens=prompt_tokens,
                clock=self.clock,
                limits=self.limits,
            )
        finally:
            self.slots.release()
        self.collected.records[spec.request_id] = rec
        if rec.token_ids:
            self.prompts.record_output(spec.request_id, rec.token_ids)
        self.failure_streak = self.failure_streak + 1 if rec.status == "connection_error" else 0
        if self.failure_streak >= self.opts.max_connection_failures and not self.interrupted:
            self.stop_reason = (
                f"{self.failure_streak} requests in a row could not reach the server (last: {rec.error}); "
                "stopped"
            )
            self.interrupt()
        if rec.status != "interrupted":
            self._done(spec, failed=rec.status != "ok")

    def _body(self, spec: RequestSpec) -> tuple[dict[str, Any], int]:
        body: dict[str, Any] = dict(self.opts.extra_body)
        ids = self.prompts.token_ids(spec)
        n = spec.output_tokens
        body.update(
            model=self.model,
            prompt=ids if self.opts.prompt_format == "token_ids" else self.prompts.text(spec),
            max_tokens=n,
            stream=True,
            stream_options={"include_usage": True},
        )
        if self.opts.extensions:
            body.update(ignore_eos=True, min_tokens=n, return_token_ids=True)
            body["stream_options"]["continuous_usage_stats"] = True
        if self.salted and spec.tenant != "default":
            body["cache_salt"] = spec.tenant
        if spec.priority:
            body["priority"] = spec.priority
        return body, len(ids)

    # -- the server's metrics ---------------------------------------------------------------
    async def scrape(self, url: str) -> Sample:
        """One scrape of ``url``; `ValueError` when it is not a Prometheus exposition."""
        start = self.clock()
        raw = await _get_capped(self.http, url, MAX_METRICS_BYTES, self.opts.connect_timeout_s)
        mid = (start + self.clock()) / 2
        return parse_exposition(raw.decode("utf-8", "replace"), mid)

    async def scrape_loop(self, url: str) -> None:
        interval = self.opts.scrape_interval_s
        while True:
            next_at = self.clock() + interval
            try:
                self.collected.samples.append(await self.scrape(url))
            except (ValueError, OSError, KvsimError) as exc:
                self.collected.scrape_errors += 1
                self.collected.last_scrape_error = str(exc)[:200]
            except Exception as exc:  # httpx's errors: a failed scrape is counted, not fatal
                self.collected.scrape_errors += 1
                self.collected.last_scrape_error = f"{type(exc).__name__}: {str(exc)[:200]}"
            if self.done.is_set():
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.done.wait(), max(next_at - self.clock(), 0.0))

    async def tick(self) -> None:
        total = len(self.specs)
        while not self.done.is_set():
            if self.progress is not None:
                self.progress(self.clock(), self.collected.num_over(), total)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.done.wait(), 0.2)

    # -- stopping ----------------------------------------------------------------------------
    def interrupt(self) -> None:
        """Stop: requests in flight end as ``interrupted``, requests not yet due are not sent."""
        if self.interrupted:
            return
        self.interrupted = True
        for task in list(self.tasks):
            task.cancel()
        if not self.tasks:
            self.done.set()


def scenario_vocab(scenario: Scenario) -> int:
    """The vocabulary of the scenario's model (token ids are drawn below it)."""
    from kvsim.scenario.resolved import resolve_plan

    plan = resolve_plan(scenario)
    return int(plan.model.vocab_size)


async def _get_capped(http: Any, url: str, limit: int, timeout_s: float) -> bytes:
    """GET ``url``, at most ``limit`` bytes of it (`ValueError` beyond), raising on an HTTP error."""
    async with asyncio.timeout(max(timeout_s, 1.0) * 3):
        async with http.stream("GET", url, headers={"Accept-Encoding": "identity"}) as resp:
            if resp.status_code != 200:
                raise ValueError(f"HTTP {resp.status_code} from {url}")
            out = bytearray()
            async for data in resp.aiter_raw():
                out += data
                if len(out) > limit:
                    raise ValueError(f"{url}: longer than {limit:,} bytes")
            return bytes(out)


async def _preflight(http: Any, opts: ObserveOptions) -> tuple[str, str]:
    """The model to ask for and the server's version; `ServerUnreachable` if it does not answer."""
    import httpx

    url = opts.url + "/models"
    try:
        raw = await _get_capped(http, url, MAX_INFO_BYTES, opts.connect_timeout_s)
    except (httpx.HTTPError, OSError, TimeoutError) as exc:
        text = " ".join(str(exc).split()) or type(exc).__name__
        raise ServerUnreachable(
            f"--url {opts.url}: cannot reach the server ({text}); is it running and is the URL its "
            "OpenAI API (http://HOST:PORT/v1)?"
        ) from None
    except ValueError as exc:
        if opts.model is None:
            raise ServerUnreachable(
                f"--url {opts.url}: GET /models failed ({exc}); pass --model to name the served model"
            ) from None
        raw = b"{}"
    model = opts.model
    if model is None:
        try:
            data = json.loads(raw.decode("utf-8"))
            model = str(data["data"][0]["id"])
        except (ValueError, KeyError, IndexError, TypeError):
            raise ServerUnreachable(
                f"--url {opts.url}: GET /models lists no model; pass --model to name the served model"
            ) from None
    version = ""
    try:
        info = json.loads((await _get_capped(http, _version_url(opts.url), MAX_INFO_BYTES, 2.0)).decode())
        version = str(info.get("version", ""))[:100] if isinstance(info, dict) else ""
    except Exception:  # optional: vLLM and SGLang answer /version, others need not
        version = ""
    return model, printable(version)


async def _observe(
    scenario: Scenario,
    specs: list[RequestSpec],
    source: RequestSource,
    opts: ObserveOptions,
    progress: ObserveProgress | None,
) -> tuple[_Run, str, str, float, list[str]]:
    import httpx  # the observe extra

    headers = {"Authorization": f"Bearer {opts.api_key}"} if opts.api_key else {}
    timeout = httpx.Timeout(
        connect=opts.connect_timeout_s, read=opts.read_timeout_s, write=opts.read_timeout_s, pool=None
    )
    limits = httpx.Limits(max_connections=opts.max_in_flight + 4, max_keepalive_connections=256)
    notes: list[str] = []
    async with httpx.AsyncClient(
        timeout=timeout, limits=limits, headers=headers, follow_redirects=False, trust_env=False
    ) as http:
        model, version = await _preflight(http, opts)
        run = _Run(scenario, specs, source, opts, http, model, progress)
        metrics_url = default_metrics_url(opts.url) if opts.metrics_url is None else opts.metrics_url
        if metrics_url:
            try:
                probe = await run.scrape(metrics_url)
                run.collected.probe = probe
                if not probe.values:
                    notes.append(f"{metrics_url}: none of the metrics kvsim reads (vLLM's, SGLang's)")
            except Exception as exc:  # any failure: observe without the server's metrics
                notes.append(f"{metrics_url}: not scraped ({' '.join(str(exc).split())[:200]})")
                metrics_url = ""
        wall_start = time.time()
        run.t0 = run.loop.time()
        handler = _install_sigint(run)
        try:
            run.release(list(source.start()))
            if not run.tasks:
                run.done.set()
            background = [run.loop.create_task(run.tick())]
            if metrics_url:
                background.append(run.loop.create_task(run.scrape_loop(metrics_url)))
            await run.done.wait()
            await asyncio.gather(*background)
        finally:
            if handler:
                run.loop.remove_signal_handler(signal.SIGINT)
        run.collected.wall_s = run.clock()
        if run.stop_reason:
            notes.append(run.stop_reason)
        return run, model, version, wall_start, notes


def _install_sigint(run: _Run) -> bool:
    """Ctrl-C stops the observation (the first time; the handler is then removed, so a second
    one raises KeyboardInterrupt as usual). False where signals cannot be caught (a thread)."""

    def on_sigint() -> None:
        run.loop.remove_signal_handler(signal.SIGINT)
        run.stop_reason = run.stop_reason or "interrupted (Ctrl-C): kept what was measured"
        run.interrupt()

    try:
        run.loop.add_signal_handler(signal.SIGINT, on_sigint)
    except (NotImplementedError, RuntimeError, ValueError):
        return False
    return True


def observe(
    scenario: Scenario,
    opts: ObserveOptions,
    *,
    base_dir: Path | None = None,
    progress: ObserveProgress | None = None,
) -> Observation:
    """Send ``scenario``'s workload to the server of ``opts.url`` and record what it does.

    Raises `ObserveError` for what cannot be sent (exit 2) and `ServerUnreachable` when the
    server does not answer at the start; requests that fail later are recorded, not raised.
    """
    opts = _checked(opts)
    specs, source, work = _workload(scenario, base_dir)
    try:
        PromptBuilder(opts.vocab_size or scenario_vocab(scenario))
    except ValueError as exc:
        raise ObserveError(f"--vocab-size: {exc}") from None
    run, model, version, wall_start, notes = asyncio.run(_observe(scenario, specs, source, opts, progress))
    info = {
        "observed_url": opts.url,
        "observed_model": printable(model)[:200],
        "observed_server_version": version,
        "observed_started_at": dt.datetime.fromtimestamp(wall_start, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "observed_wall_s": run.collected.wall_s,
        "observed_interrupted": run.interrupted,
        "observed_prompt_format": opts.prompt_format,
        "observed_extensions": opts.extensions,
    }
    measured_start = source.measured_start_s if isinstance(source, BenchClientSource) else 0.0
    warmups = source.client.unmeasured if isinstance(source, BenchClientSource) else ()
    if isinstance(source, BenchClientSource) and math.isnan(measured_start):
        notes.append("the benchmark client's warm-ups did not all end: no measured run")
    result = build_result(
        scenario,
        list(run.specs.values()),
        run.collected,
        info=info,
        workload_summary=work.info.summary(),
        warmups=warmups,
        measured_start_s=measured_start,
        scrape_interval_s=opts.scrape_interval_s,
    )
    return Observation(result=result, interrupted=run.interrupted, notes=notes)


def _checked(opts: ObserveOptions) -> ObserveOptions:
    url = check_url(opts.url, "--url")
    metrics = opts.metrics_url
    if metrics:
        metrics = check_url(metrics, "--metrics-url")
    for name in ("connect_timeout_s", "read_timeout_s", "request_timeout_s", "scrape_interval_s"):
        value = getattr(opts, name)
        if not (math.isfinite(value) and value > 0):
            raise ObserveError(f"{name}: must be a finite number > 0, got {value}")
    if opts.retries < 0 or opts.max_in_flight < 1 or opts.max_connection_failures < 1:
        raise ObserveError("retries must be >= 0, max_in_flight and max_connection_failures >= 1")
    reserved = {"model", "prompt", "stream", "max_tokens"} & set(opts.extra_body)
    if reserved:
        raise ObserveError(
            f"--extra-body: sets {', '.join(sorted(reserved))}, which kvsim observe sets itself"
        )
    return ObserveOptions(**{**opts.__dict__, "url": url, "metrics_url": metrics})


__all__ = [
    "Observation",
    "ObserveError",
    "ObserveOptions",
    "ServerUnreachable",
    "check_url",
    "default_metrics_url",
    "observe",
]
