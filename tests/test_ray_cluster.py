"""``kvsim sweep --executor ray --address`` against a real Ray head, as docs/sweeps.md says.

A one-CPU head is started on this machine with ``ray start --head --block`` (its own
process group, its own temporary folder, free ports, token authentication with a token of
its own in the environment, nothing written to ~/.ray) and stopped at the end by killing
that process group; never ``ray stop``, which would stop every Ray on the machine. Both
address forms run a sweep through the CLI: ``HOST:PORT`` (the GCS port) and
``ray://HOST:PORT`` (the Ray Client server, which needs the ``ray[client]`` extra). The
unreachable cases (nothing listening, a port that accepts and never answers) run as
subprocesses, so that a Ray left connecting in a thread cannot leak into other tests:
each must end within its ``--connect-timeout`` with exit 2 and a one-line error.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("ray") is None, reason="ray not installed (pip install -e '.[ray]')"
    ),
]

RAY = Path(sys.executable).with_name("ray")
#: Seconds a head may take to come up on a loaded machine.
HEAD_START_S = 180.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answers(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """End the head: its whole process group (GCS, raylet, workers), gently, then for good."""
    for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue
        if sig == signal.SIGTERM:  # the group's other members may outlive their leader
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        return


@pytest.fixture(scope="module")
def ray_head() -> Iterator[dict[str, str]]:
    """A running one-CPU head: the addresses to use and the environment a driver needs."""
    if not RAY.exists():
        pytest.skip(f"no ray command beside {sys.executable}")
    temp = Path(tempfile.mkdtemp(prefix="kvray", dir="/tmp"))  # short: Ray's socket paths must fit
    gcs, client = _free_port(), _free_port()
    env = {
        **os.environ,
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": secrets.token_hex(32),
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    env.pop("RAY_ADDRESS", None)
    cmd = [
        str(RAY), "start", "--head", "--block", "--node-ip-address", "127.0.0.1",
        "--port", str(gcs), "--ray-client-server-port", str(client), "--num-cpus", "1",
        "--dashboard-port", str(_free_port()), "--dashboard-agent-listen-port", str(_free_port()),
        "--temp-dir", str(temp), "--disable-usage-stats",
    ]  # fmt: skip
    log = (temp / "head.log").open("wb")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + HEAD_START_S
        while not (_answers(gcs) and _answers(client)):
            if proc.poll() is not None or time.monotonic() > deadline:
                log.flush()
                tail = (temp / "head.log").read_text(errors="replace")[-3000:]
                pytest.fail(f"the Ray head did not come up (exit {proc.poll()}):\n{tail}")
            time.sleep(0.5)
        yield {
            "gcs": f"127.0.0.1:{gcs}",
            "client": f"ray://127.0.0.1:{client}",
            "RAY_AUTH_MODE": env["RAY_AUTH_MODE"],
            "RAY_AUTH_TOKEN": env["RAY_AUTH_TOKEN"],
        }
    finally:
        _stop(proc)
        log.close()
        shutil.rmtree(temp, ignore_errors=True)


SCENARIO = "name: tiny\nworkload: {num_requests: 5}\n"


def _sweep(tmp_path: Path) -> Path:
    (tmp_path / "base.yaml").write_text(SCENARIO)
    (tmp_path / "s.yaml").write_text("base: base.yaml\ngrid: {seed: [1, 2]}\n")
    return tmp_path / "s.yaml"


@pytest.mark.parametrize("form", ["gcs", "client"])
def test_a_sweep_runs_on_a_ray_cluster(form: str, ray_head: dict[str, str], tmp_path: Path) -> None:
    # In a subprocess too: Ray caches the token it loads for the whole process, and the
    # local instance of tests/test_sweep.py must not inherit this cluster's.
    out = tmp_path / "out"
    for _attempt in range(3):
        code, err, _ = _kvsim(
            ["sweep", str(_sweep(tmp_path)), "--out", str(out), "--executor", "ray",
             "--address", ray_head[form], "--connect-timeout", "60"],
            timeout_s=300,
            env={"RAY_AUTH_MODE": ray_head["RAY_AUTH_MODE"], "RAY_AUTH_TOKEN": ray_head["RAY_AUTH_TOKEN"]},
        )  # fmt: skip
        # Ray's client proxy starts a server per client on a port of 23000-24000, shared by
        # every Ray on the machine, and that server calls ray.init() itself; on a loaded
        # machine either can fail, on Ray's side, after kvsim has reached the cluster (CI,
        # stop 42: "Initialization failure from server"). Such a failure is retried.
        if "Initialization failure from server" not in err and "Starting Ray client server failed" not in err:
            break
        assert err.count("\n") == 1 and err.startswith(f"kvsim: error: --address {ray_head[form]}:"), err
        time.sleep(5.0)
    assert code == 0, err
    assert [line for line in err.splitlines() if not line.startswith("[")] == []  # progress lines only
    table = pd.read_parquet(out / "results.parquet")
    assert list(table["status"]) == ["ok", "ok"] and list(table["num_finished"]) == [5, 5]


def _kvsim(args: list[str], timeout_s: float, env: dict[str, str] | None = None) -> tuple[int, str, float]:
    """``python -m kvsim ARGS`` in a subprocess (killed after ``timeout_s``), with no RAY_ variable
    but those of ``env``: exit code, stderr, wall seconds."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")} | (env or {})
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "kvsim", *args], capture_output=True, text=True, timeout=timeout_s, env=env
    )
    return proc.returncode, proc.stderr, time.monotonic() - start


@pytest.mark.parametrize("form", ["{port}", "ray://127.0.0.1:{port}", "127.0.0.1:{port}"])
def test_nothing_listening_is_one_line_within_the_timeout(form: str, tmp_path: Path) -> None:
    address = form.format(port=_free_port())  # bound and closed: nothing listens there
    code, err, wall_s = _kvsim(
        ["sweep", str(_sweep(tmp_path)), "--out", str(tmp_path / "out"), "--executor", "ray",
         "--address", address, "--connect-timeout", "5"],
        timeout_s=60,
    )  # fmt: skip
    if form == "{port}":  # not an address at all: Ray's own error, still one line
        assert code == 2 and err.count("\n") == 1 and err.startswith(f"kvsim: error: --address {address}:"), (
            err
        )
        return
    assert code == 2, err
    assert err == (
        f"kvsim: error: --address {address}: cannot reach a Ray cluster there: Connection refused; "
        "check the address and port, or start one with `ray start --head`\n"
    )
    assert wall_s < 30  # Ray alone retries for minutes
    assert not (tmp_path / "out").exists()  # nothing written before the cluster answers


@pytest.mark.parametrize("scheme", ["", "ray://"])
def test_a_port_that_never_answers_ends_at_the_timeout(scheme: str, tmp_path: Path) -> None:
    with socket.socket() as silent:  # accepts connections (the kernel does) and never speaks
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        address = f"{scheme}127.0.0.1:{silent.getsockname()[1]}"
        code, err, wall_s = _kvsim(
            ["sweep", str(_sweep(tmp_path)), "--out", str(tmp_path / "out"), "--executor", "ray",
             "--address", address, "--connect-timeout", "4"],
            timeout_s=90,
        )  # fmt: skip
    ours = [line for line in err.splitlines() if line.startswith("kvsim:")]
    assert code == 2 and ours == [
        f"kvsim: error: --address {address}: no Ray cluster answered within 4 s (--connect-timeout); "
        "check the address, or start one with `ray start --head`; a cluster with token authentication "
        "(Ray's default) also needs RAY_AUTH_MODE=token here"
    ], err
    assert "Traceback" not in err
    assert wall_s < 4 + 20  # the timeout, plus starting Python and importing Ray on a loaded machine
    assert not (tmp_path / "out").exists()


def test_an_error_relayed_with_a_traceback_is_one_line() -> None:
    from kvsim.planning.sweep import _one_line

    relayed = ConnectionError(
        "Initialization failure from server:\nTraceback (most recent call last):\n"
        '  File "proxier.py", line 772, in Datapath\n    raise RuntimeError(\n'
        "RuntimeError: Starting Ray client server failed. See ray_client_server_23000.err for detailed logs.\n"
    )
    assert _one_line(relayed) == (
        "ConnectionError: RuntimeError: Starting Ray client server failed. See "
        "ray_client_server_23000.err for detailed logs."
    )
    assert _one_line(ValueError("Invalid address format: 5\nmore")) == "ValueError: Invalid address format: 5"
    # The server's own reason, without a traceback (CI, stop 42: only the header was shown).
    assert _one_line(
        ConnectionAbortedError(
            "Initialization failure from server:\nCall to `ray.init()` on the server failed with: timed out"
        )
    ) == (
        "ConnectionAbortedError: Initialization failure from server: Call to `ray.init()` on the "
        "server failed with: timed out"
    )
    assert len(_one_line(RuntimeError("x" * 5000))) < 330
