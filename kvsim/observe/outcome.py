"""What one request of an observation did: its `Record`, the statuses it can end in, and
the `Limits` it is sent under (no HTTP here: reading an observation needs no client)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

STATUSES: dict[str, str] = {
    "ok": "the requested number of tokens, then the end of the stream",
    "short": "the stream ended before the requested number of tokens (an end-of-sequence token?)",
    "overlong": "the server sent more tokens than max_tokens; the stream was closed at the first extra one",
    "stream_cut": "the connection broke after the response began",
    "timeout": "no byte for read_timeout_s, or the whole request took longer than request_timeout_s",
    "http_error": "the server answered with an HTTP error status",
    "connection_error": "no connection could be made, or it broke before the response began",
    "bad_response": "the response was not server-sent events of JSON objects, or broke a bound",
    "interrupted": "the observation was stopped while the request ran",
    "not_sent": "the observation stopped before the request was due",
    "parent_failed": "an earlier turn of its conversation failed, so it was never sent",
}


@dataclass(frozen=True)
class Limits:
    """Timeouts, retries and size bounds of each request."""

    connect_timeout_s: float = 10.0
    read_timeout_s: float = 120.0
    request_timeout_s: float = 3600.0
    retries: int = 2
    retry_backoff_s: float = 0.5


@dataclass
class Record:
    """What one request did, as the client saw it (times in seconds since the start)."""

    request_id: int
    requested_tokens: int
    status: str = "not_sent"
    error: str = ""
    send_s: float = math.nan
    token_times_s: list[float] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    http_status: int | None = None
    num_attempts: int = 0
    #: Whether the last attempt may be retried (no response began, or a busy status).
    retryable: bool = False

    @property
    def num_tokens(self) -> int:
        return len(self.token_times_s)

    @property
    def first_token_s(self) -> float:
        return self.token_times_s[0] if self.token_times_s else math.nan

    @property
    def finish_s(self) -> float:
        return self.token_times_s[-1] if self.token_times_s else math.nan


__all__ = ["STATUSES", "Limits", "Record"]
