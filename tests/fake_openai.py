"""A fake OpenAI-compatible server for the tests: real HTTP on 127.0.0.1, scripted token timings.

    with FakeServer(script) as server:       # script(body, index) -> Reply
        url = server.url                     # http://127.0.0.1:PORT/v1

``POST /v1/completions`` (stream: true) answers with server-sent events as vLLM 0.32 writes
them (one event per token with ``token_ids`` and continuous usage, a usage event, ``[DONE]``),
chunked, each event written ``Reply.ttft_s`` after the request arrived, then every
``Reply.itl_s``. A reply can also fail: an HTTP status, a connection closed after some
tokens, more tokens than max_tokens, or a stream that never ends. ``GET /metrics`` serves
vLLM's gauges and counters as the server's own state (running streams, tokens sent).
``server.events`` lists when each token was written (``time.monotonic()``), per request.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Reply:
    """What the fake server does with one request."""

    ttft_s: float = 0.05
    itl_s: float = 0.02
    status: int = 200
    message: str = "scripted failure"
    #: Close the connection (no [DONE]) after this many tokens.
    cut_after: int | None = None
    #: Tokens sent beyond max_tokens (a server that ignores it).
    extra_tokens: int = 0
    #: Never stop sending tokens (until the client goes away).
    forever: bool = False
    cached_tokens: int = 0
    #: Send token_ids and continuous usage (vLLM's extensions) in each event.
    extensions: bool = True
    #: Stop early with finish_reason "stop" after this many tokens (a server honouring EOS).
    stop_after: int | None = None
    #: Characters of the first event's text (a huge line).
    text_bytes: int = 0


Script = Callable[[dict[str, Any], int], Reply]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send_json(self, code: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            self._send_json(200, {"object": "list", "data": [{"id": "fake-model", "object": "model"}]})
        elif self.path == "/version":
            self._send_json(200, {"version": "fake-0.1"})
        elif self.path == "/metrics":
            data = self.server.owner.metrics_text().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        else:
            self._send_json(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:
        arrived = time.monotonic()
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length))
        owner = self.server.owner
        with owner.lock:
            index = len(owner.bodies)
            owner.bodies.append(body)
        reply = owner.script(body, index)
        if reply.status != 200:
            self._send_json(reply.status, {"error": {"message": reply.message, "code": reply.status}})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        prompt = body["prompt"]
        n_prompt = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
        max_tokens = int(body["max_tokens"])
        total = max_tokens + reply.extra_tokens
        times: list[float] = []
        owner.running += 1
        try:
            k = 0
            while reply.forever or k < total:
                due = arrived + reply.ttft_s + k * reply.itl_s
                time.sleep(max(due - time.monotonic(), 0.0))
                if reply.cut_after is not None and k == reply.cut_after:
                    self.connection.shutdown(socket.SHUT_RDWR)  # no [DONE], no final chunk
                    return
                k += 1
                stop = reply.stop_after is not None and k == reply.stop_after
                finish = "stop" if stop else ("length" if k == total else None)
                text = "x" * reply.text_bytes if k == 1 and reply.text_bytes else f" t{k}"
                choice: dict[str, Any] = {"index": 0, "text": text, "finish_reason": finish}
                event: dict[str, Any] = {"id": "cmpl-fake", "object": "text_completion", "choices": [choice]}
                if reply.extensions:
                    choice["token_ids"] = [100 + k]
                    event["usage"] = {"prompt_tokens": n_prompt, "completion_tokens": k}
                self._chunk(f"data: {json.dumps(event)}\n\n".encode())
                times.append(time.monotonic())
                owner.generated += 1
                if stop:
                    break
            usage = {
                "prompt_tokens": n_prompt,
                "completion_tokens": k,
                "prompt_tokens_details": {"cached_tokens": reply.cached_tokens},
            }
            self._chunk(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
            self._chunk(b"data: [DONE]\n\n")
            self._chunk(b"")
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass  # the client went away (it closed an overlong stream, or was interrupted)
        finally:
            owner.running -= 1
            with owner.lock:
                owner.events[index] = (arrived, times)
                owner.prompt_tokens += n_prompt

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: FakeServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that went away (a keep-alive connection closed while the handler waits
        # for its next request, an overlong stream cut) is no error of the server's; the
        # default prints a traceback into whatever sys.stderr is then (the CLI fuzz reads it).
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)


class FakeServer:
    """The server (see the module docstring); a context manager that starts and stops it."""

    def __init__(self, script: Script | None = None) -> None:
        self.script: Script = script or (lambda body, index: Reply())
        self.bodies: list[dict[str, Any]] = []
        self.events: dict[int, tuple[float, list[float]]] = {}
        self.lock = threading.Lock()
        self.running = 0
        self.generated = 0
        self.prompt_tokens = 0
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.owner = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def metrics_text(self) -> str:
        labels = '{engine="0",model_name="fake-model"}'
        return "\n".join(
            [
                "# HELP vllm:num_requests_running Number of requests in model execution batches.",
                "# TYPE vllm:num_requests_running gauge",
                f"vllm:num_requests_running{labels} {float(self.running)}",
                "# TYPE vllm:num_requests_waiting gauge",
                f"vllm:num_requests_waiting{labels} 0.0",
                "# TYPE vllm:kv_cache_usage_perc gauge",
                f"vllm:kv_cache_usage_perc{labels} {self.running / 10}",
                "# TYPE vllm:generation_tokens counter",
                f"vllm:generation_tokens_total{labels} {float(self.generated)}",
                "# TYPE vllm:prompt_tokens counter",
                f"vllm:prompt_tokens_total{labels} {float(self.prompt_tokens)}",
                "# TYPE vllm:num_preemptions counter",
                f"vllm:num_preemptions_total{labels} 0.0",
                "# TYPE vllm:cache_config_info gauge",
                'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="1000"} 1.0',
                "# TYPE other_metric gauge",
                "other_metric 1.0",
                "",
            ]
        )

    def __enter__(self) -> FakeServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
