"""Reading a streamed completion: server-sent events, one JSON object per event, bounded.

An OpenAI-compatible server streams ``/v1/completions`` as server-sent events::

    data: {"choices": [{"text": " t343", "token_ids": [343], "finish_reason": null}],
           "usage": {"prompt_tokens": 35, "completion_tokens": 1}}
    <blank line>
    ...
    data: {"choices": [], "usage": {..., "prompt_tokens_details": {"cached_tokens": 32}}}
    data: [DONE]

`SseLines` cuts the byte stream into lines, none longer than ``max_line_bytes`` and none
after ``max_total_bytes`` (a server that streams a huge line or forever is stopped there);
`parse_event` reads one ``data:`` payload into an `Event`: how many tokens it brings, their
ids, the finish reason, the usage, or the error the server put in the stream.

How many tokens an event brings, best source first: the growth of
``usage.completion_tokens`` (vLLM with ``continuous_usage_stats``), the length of
``choices[0].token_ids`` (vLLM's ``return_token_ids``), else one per event that carries
text (``--stream-interval 1``, every server's default). `TokenCounter` keeps the running count.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

#: The payload that ends an OpenAI stream.
DONE = "[DONE]"


class StreamError(ValueError):
    """The stream broke a bound or is not server-sent events of JSON objects."""


class SseLines:
    """Lines of a server-sent event stream, fed bytes as they arrive; bounded.

    ``feed(data)`` returns the complete lines (without their line break, decoded as UTF-8);
    a line longer than ``max_line_bytes`` or more than ``max_total_bytes`` in all raises
    `StreamError`.
    """

    def __init__(self, max_line_bytes: int, max_total_bytes: int) -> None:
        self.max_line_bytes = max_line_bytes
        self.max_total_bytes = max_total_bytes
        self.total_bytes = 0
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[str]:
        self.total_bytes += len(data)
        if self.total_bytes > self.max_total_bytes:
            raise StreamError(f"the response is longer than {self.max_total_bytes:,} bytes")
        self._buffer += data
        lines = []
        while True:
            end = self._buffer.find(b"\n")
            if end < 0:
                break
            raw = bytes(self._buffer[:end])
            del self._buffer[: end + 1]
            lines.append(self._decode(raw.removesuffix(b"\r")))
        if len(self._buffer) > self.max_line_bytes:
            raise StreamError(f"a line of the stream is longer than {self.max_line_bytes:,} bytes")
        return lines

    def close(self) -> list[str]:
        """What is left once the stream has ended (a last line without a line break)."""
        rest, self._buffer = bytes(self._buffer), bytearray()
        return [self._decode(rest.removesuffix(b"\r"))] if rest else []

    def _decode(self, raw: bytes) -> str:
        if len(raw) > self.max_line_bytes:
            raise StreamError(f"a line of the stream is longer than {self.max_line_bytes:,} bytes")
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise StreamError(f"the stream is not UTF-8 (byte {exc.start} of a line)") from None


def data_payloads(lines: list[str]) -> Iterator[str]:
    """The ``data:`` payloads among event-stream lines (comments, ``event:``, ``id:`` and
    blank lines skipped). An event split over several ``data:`` lines is not produced by
    OpenAI-compatible servers; each line is taken as one payload."""
    for line in lines:
        if line.startswith("data:"):
            yield line[5:].strip()


@dataclass(frozen=True)
class Event:
    """One streamed JSON object, as far as timing is concerned."""

    #: Tokens generated so far as the server counts them (``usage.completion_tokens``), or None.
    completion_tokens: int | None = None
    #: The token ids this event carries (``choices[0].token_ids``), or None.
    token_ids: tuple[int, ...] | None = None
    #: Whether the event carries output text (or a token) for the request.
    has_output: bool = False
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    #: The server's error message when it put one in the stream.
    error: str | None = None


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and (not math.isfinite(value) or not value.is_integer()):
        return None
    return int(value) if 0 <= value < 2**53 else None


def error_text(payload: Any, limit: int = 300) -> str:
    """A short, printable message from an error payload (``{"error": {"message": ...}}``,
    ``{"message": ...}``, ``{"detail": ...}`` or plain text)."""
    message: Any = payload
    if isinstance(payload, dict):
        inner = payload.get("error", payload)
        message = (inner.get("message") or inner.get("detail") or inner) if isinstance(inner, dict) else inner
        if message is payload and "detail" in payload:
            message = payload["detail"]
    text = message if isinstance(message, str) else json.dumps(message, default=str)[:limit]
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def parse_event(payload: str) -> Event:
    """One ``data:`` payload (not ``[DONE]``) as an `Event`; `StreamError` if it is not a JSON object."""
    try:
        obj = json.loads(payload)
    except (ValueError, RecursionError):
        raise StreamError(f"an event is not JSON: {payload[:80]!r}") from None
    if not isinstance(obj, dict):
        raise StreamError(f"an event is not a JSON object: {payload[:80]!r}")
    if "error" in obj and obj.get("error") is not None:
        return Event(error=error_text(obj))
    usage = obj.get("usage") if isinstance(obj.get("usage"), dict) else None
    completion = prompt = cached = None
    if usage is not None:
        completion = _int(usage.get("completion_tokens"))
        prompt = _int(usage.get("prompt_tokens"))
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict):
            cached = _int(details.get("cached_tokens"))
    choices = obj.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else None
    token_ids = None
    has_output = False
    finish = None
    if choice is not None:
        ids = choice.get("token_ids")
        if isinstance(ids, list) and all(_int(i) is not None for i in ids):
            token_ids = tuple(int(i) for i in ids)
        text = choice.get("text")
        if text is None and isinstance(choice.get("delta"), dict):  # a chat stream
            text = choice["delta"].get("content")
        has_output = bool(text) or bool(token_ids)
        reason = choice.get("finish_reason")
        finish = reason if isinstance(reason, str) else None
    return Event(
        completion_tokens=completion,
        token_ids=token_ids,
        has_output=has_output,
        finish_reason=finish,
        prompt_tokens=prompt,
        cached_tokens=cached,
    )


class TokenCounter:
    """How many tokens each event brings (see the module docstring), and the ids seen."""

    def __init__(self) -> None:
        self.num_tokens = 0
        self.token_ids: list[int] = []
        self._usage_seen = False

    def new_tokens(self, event: Event) -> int:
        """Tokens ``event`` adds to the count (0 for events without output)."""
        if event.token_ids:
            self.token_ids += event.token_ids
        if event.completion_tokens is not None and (self._usage_seen or event.has_output):
            self._usage_seen = True
            added = max(event.completion_tokens - self.num_tokens, 0)
        elif event.token_ids is not None:
            added = len(event.token_ids)
        else:
            added = 1 if event.has_output else 0
        self.num_tokens += added
        return added


__all__ = [
    "DONE",
    "Event",
    "SseLines",
    "StreamError",
    "TokenCounter",
    "data_payloads",
    "error_text",
    "parse_event",
]
