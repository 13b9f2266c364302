"""One streamed completion, timed token by token: the HTTP side of `kvsim observe` (httpx).

    record = await send_completion(http, endpoint, body, requested_tokens=n, clock=clock, limits=limits)

An attempt POSTs the body, reads the server-sent events as they arrive (`kvsim.observe.stream`)
and stamps each token with ``clock()`` (seconds since the observation started) when the bytes
carrying it were read. It ends in one of these statuses (`STATUSES`):

    ok                the requested number of tokens, then the end of the stream
    short             the stream ended early (the server stopped at an end-of-sequence token)
    overlong          more tokens than max_tokens: the stream is closed at the first extra token
    stream_cut        the connection broke after the response began (tokens kept)
    timeout           no byte for read_timeout_s, or the request took request_timeout_s
    http_error        the server answered with an HTTP error status (its message kept)
    connection_error  no connection, or it broke before the response began
    bad_response      not server-sent events of JSON, or beyond a bound (line, total size)
    interrupted       the observation was stopped (Ctrl-C) while the request ran

Attempts that got no response (a connection refused or reset) or a status in
`RETRY_STATUSES` are retried up to ``limits.retries`` times, ``retry_backoff_s`` doubling in
between; a request that produced any token is never sent again. The send time of the last
attempt is the request's; ``num_attempts`` says how many there were.

Every read is bounded: an error body is read to `MAX_ERROR_BODY_BYTES`, a stream's line to
`kvsim.limits.MAX_SSE_LINE_BYTES`, a whole stream to `response_byte_limit` (a server that
streams forever is cut there, or by the token count, or by the timeouts).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx

from kvsim.limits import MAX_SSE_LINE_BYTES, MAX_STREAM_BYTES_PER_TOKEN
from kvsim.observe.outcome import Limits, Record
from kvsim.observe.stream import (
    DONE,
    SseLines,
    StreamError,
    TokenCounter,
    data_payloads,
    error_text,
    parse_event,
)

#: HTTP statuses worth another attempt: the server is busy or briefly unavailable.
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
#: Most bytes of an error response read for its message.
MAX_ERROR_BODY_BYTES = 65_536
#: Longest wait between two attempts, seconds.
MAX_BACKOFF_S = 10.0


def response_byte_limit(requested_tokens: int, prompt_tokens: int) -> int:
    """Most bytes read from one stream: the prompt echoed back as token ids, plus a bound per
    output token (`kvsim.limits.MAX_STREAM_BYTES_PER_TOKEN`), and at least 1 MiB."""
    return max(2**20, 16 * prompt_tokens + MAX_STREAM_BYTES_PER_TOKEN * (requested_tokens + 16))


def _reset_attempt(rec: Record) -> None:
    rec.status, rec.error, rec.retryable = "not_sent", "", False
    rec.token_times_s, rec.token_ids = [], []
    rec.prompt_tokens = rec.completion_tokens = rec.cached_tokens = rec.http_status = None


async def _read_capped(resp: httpx.Response, limit: int) -> bytes:
    out = bytearray()
    async for data in resp.aiter_raw():
        out += data[: limit - len(out)]
        if len(out) >= limit:
            break
    return bytes(out)


def _error_message(resp: httpx.Response, raw: bytes) -> str:
    text = raw.decode("utf-8", "replace")
    try:
        return error_text(json.loads(text))
    except ValueError:
        return error_text(text.strip() or resp.reason_phrase)


async def _read_stream(resp: httpx.Response, rec: Record, clock: Callable[[], float], limit: int) -> None:
    """Read the events of a 200 response into ``rec`` until the stream ends or must be cut."""
    lines = SseLines(MAX_SSE_LINE_BYTES, limit)
    counter = TokenCounter()
    finished = done = False
    async for data in resp.aiter_raw():
        now = clock()
        for payload in data_payloads(lines.feed(data)):
            if payload == DONE:
                done = True
                break
            event = parse_event(payload)
            if event.error is not None:
                rec.status, rec.error = "http_error", f"error in the stream: {event.error}"
                return
            added = counter.new_tokens(event)
            rec.token_times_s += [now] * added
            rec.prompt_tokens = event.prompt_tokens if event.prompt_tokens is not None else rec.prompt_tokens
            rec.completion_tokens = event.completion_tokens or rec.completion_tokens
            rec.cached_tokens = event.cached_tokens if event.cached_tokens is not None else rec.cached_tokens
            finished = finished or event.finish_reason is not None
            if rec.num_tokens > rec.requested_tokens:
                rec.status = "overlong"
                rec.error = (
                    f"the server sent more than the {rec.requested_tokens} tokens asked for (max_tokens); "
                    "stream closed"
                )
                rec.token_ids = counter.token_ids
                return
        if done:
            break
    rec.token_ids = counter.token_ids
    if not (done or finished):
        rec.status, rec.error = "stream_cut", f"the stream ended without [DONE] after {rec.num_tokens} tokens"
        return
    # Tokens the usage counts but no event carried one by one (a server streaming several
    # tokens per event without saying how many): stamped with the last event's time.
    if rec.completion_tokens is not None and rec.completion_tokens > rec.num_tokens and rec.token_times_s:
        extra = min(rec.completion_tokens, rec.requested_tokens + 1) - rec.num_tokens
        rec.token_times_s += [rec.token_times_s[-1]] * extra
    if rec.num_tokens > rec.requested_tokens:
        rec.status, rec.error = (
            "overlong",
            f"the server sent more than the {rec.requested_tokens} tokens asked for",
        )
    elif rec.num_tokens < rec.requested_tokens:
        rec.status = "short"
        rec.error = f"the stream ended after {rec.num_tokens} of {rec.requested_tokens} tokens"
    else:
        rec.status = "ok"


async def _attempt(
    http: httpx.AsyncClient,
    endpoint: str,
    body: dict[str, Any],
    rec: Record,
    clock: Callable[[], float],
    limits: Limits,
    prompt_tokens: int,
) -> None:
    """One attempt; its outcome is left in ``rec``."""
    _reset_attempt(rec)
    rec.num_attempts += 1
    rec.send_s = clock()
    began = False
    try:
        async with asyncio.timeout(limits.request_timeout_s):
            async with http.stream(
                "POST", endpoint, json=body, headers={"Accept-Encoding": "identity"}
            ) as resp:
                began = True
                rec.http_status = resp.status_code
                if resp.status_code != 200:
                    raw = await _read_capped(resp, MAX_ERROR_BODY_BYTES)
                    rec.status = "http_error"
                    rec.error = f"HTTP {resp.status_code}: {_error_message(resp, raw)}"
                    rec.retryable = resp.status_code in RETRY_STATUSES
                    return
                await _read_stream(resp, rec, clock, response_byte_limit(rec.requested_tokens, prompt_tokens))
    except TimeoutError:
        rec.status = "timeout"
        rec.error = f"the request took longer than {limits.request_timeout_s:g} s (request_timeout_s)"
    except httpx.TimeoutException as exc:
        if isinstance(exc, httpx.ConnectTimeout | httpx.PoolTimeout):
            rec.status, rec.retryable = "connection_error", True
            rec.error = f"no connection within {limits.connect_timeout_s:g} s"
        else:
            rec.status = "timeout"
            rec.error = (
                f"no data for {limits.read_timeout_s:g} s (read_timeout_s) after {rec.num_tokens} tokens"
            )
    except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError, httpx.ConnectError) as exc:
        if began and rec.http_status == 200:
            rec.status = "stream_cut"
            rec.error = f"the connection broke after {rec.num_tokens} tokens: {_exc_text(exc)}"
        else:
            rec.status, rec.retryable = "connection_error", not rec.token_times_s
            rec.error = f"cannot reach the server: {_exc_text(exc)}"
    except (httpx.HTTPError, StreamError) as exc:
        rec.status, rec.error = "bad_response", _exc_text(exc)


def _exc_text(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


async def send_completion(
    http: httpx.AsyncClient,
    endpoint: str,
    body: dict[str, Any],
    *,
    request_id: int,
    requested_tokens: int,
    prompt_tokens: int,
    clock: Callable[[], float],
    limits: Limits,
) -> Record:
    """Send one streamed completion (retried as the module says) and return its `Record`.

    Cancelling the task (the observation stopped) returns the record so far, ``interrupted``.
    """
    rec = Record(request_id, requested_tokens)
    try:
        for attempt in range(limits.retries + 1):
            await _attempt(http, endpoint, body, rec, clock, limits, prompt_tokens)
            if not rec.retryable or attempt == limits.retries:
                break
            await asyncio.sleep(min(limits.retry_backoff_s * 2**attempt, MAX_BACKOFF_S))
    except asyncio.CancelledError:
        rec.status = "interrupted"
        rec.error = f"the observation stopped after {rec.num_tokens} tokens"
    return rec


__all__ = ["RETRY_STATUSES", "response_byte_limit", "send_completion"]
