"""The docs print what the tool prints: every quoted command of the reference pages is run.

Each fenced block of docs/cli.md, docs/limits.md, docs/presets.md and docs/sweeps.md that
opens with ``$ kvsim ...`` holds commands (``$ ...``, continued by a trailing backslash)
and what each prints, stdout and stderr as a terminal shows them; ``$ echo $?`` quotes the
exit code of the command before it. The test runs every command in a scratch folder that
holds the example files the pages name (`FILES`, and ``scenarios/`` of the repository) and
checks that the quoted lines appear, in order within their stream, up to runs of spaces: a
line ``...`` stands for lines left out, and ``...`` inside a line for text left out.
(docs/questions.md has its own test, tests/test_questions.py, with the same conventions.)
A change that alters what a quoted command prints must update the page in the same commit.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, TRACES

PAGES = ["docs/cli.md", "docs/limits.md", "docs/presets.md", "docs/sweeps.md"]
BLOCK = re.compile(r"```(?:text)?\n(\$ kvsim [^\n]*\n.*?)```", re.S)

#: The example files the pages' commands name, as the pages describe them.
FILES: dict[str, bytes] = {
    "bad.yaml": b"replicas: [{tp: 0}]\nworkload: {bogus: 1}\n",
    "big.yaml": b"seed: " + b"9" * 5000 + b"\n",
    "latin1.yaml": b"name: ok\ndescription: caf\xe9\n",
    "dup.yaml": b"seed: 1\nname: a\nseed: 2\n",
    "s.yaml": b"workload: {arrival: {kind: diurnal, mean_rate_per_s: 1, phase_s: .nan}}\n",
    "zero.yaml": b"workload: {kind: trace, path: /dev/zero, format: mooncake}\n",
    "bomb.yaml": b"".join(
        f"{k}: &{k} [{','.join([f'*{p}'] * 9) if p else ','.join(['x'] * 9)}]\n".encode()
        for p, k in zip(["", "a", "b", "c", "d"], "abcde", strict=True)
    ),
}


def _commands(page: str) -> list[tuple[str, list[str], int | None]]:
    """(command, quoted lines, quoted exit code or None) of every command quoted on ``page``."""
    out: list[tuple[str, list[str], int | None]] = []
    for block in BLOCK.findall((ROOT / page).read_text()):
        lines = block.rstrip("\n").splitlines()
        i = 0
        while i < len(lines):
            command = lines[i][2:]
            while command.endswith("\\"):
                i += 1
                command = command[:-1] + " " + lines[i].strip()
            i += 1
            quoted = []
            while i < len(lines) and not lines[i].startswith("$ "):
                quoted.append(lines[i])
                i += 1
            if command.strip() == "echo $?":
                cmd, previous, _ = out[-1]
                out[-1] = (cmd, previous, int(quoted[0]))
            else:
                out.append((command, quoted, None))
    return out


CASES = [(page, *case) for page in PAGES for case in _commands(page)]


def _norm(line: str) -> str:
    return " ".join(line.split())


def _matches(want: str, line: str) -> bool:
    parts = [re.escape(p) for p in _norm(want).split("...")]
    return re.fullmatch(".*?".join(parts), line) is not None


def test_the_pages_quote_commands() -> None:
    by_page = {page: [c for p, c, _, _ in CASES if p == page] for page in PAGES}
    assert all(by_page.values()), by_page
    assert any("validate bad.yaml" in c for c in by_page["docs/cli.md"])


@pytest.mark.slow
@pytest.mark.parametrize(
    ("page", "command", "quoted", "code"), CASES, ids=[f"{p.split('/')[-1]}-{c[:50]}" for p, c, _, _ in CASES]
)
def test_every_quoted_command_prints_what_the_page_quotes(
    page: str, command: str, quoted: list[str], code: int | None, tmp_path: Path
) -> None:
    if ("azure" in command or "mooncake" in command) and not TRACES.is_dir():
        pytest.skip(f"real traces not found at {TRACES}")
    for name, data in FILES.items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / "scenarios").symlink_to(ROOT / "scenarios")
    args = shlex.split(command)
    assert args[0] == "kvsim"
    proc = subprocess.run([sys.executable, "-m", "kvsim", *args[1:]], cwd=tmp_path, capture_output=True,
                          text=True, timeout=900, check=False)  # fmt: skip
    if code is not None:
        assert proc.returncode == code, proc.stderr[-2000:]
    streams = {
        "out": [_norm(x) for x in proc.stdout.splitlines()],
        "err": [_norm(x) for x in proc.stderr.splitlines()],
    }
    at = {"out": 0, "err": 0}
    for want in quoted:
        if want.strip() in ("", "..."):  # blank lines are layout; "..." stands for lines left out
            continue
        for name, lines in streams.items():
            found = next((j for j in range(at[name], len(lines)) if _matches(want, lines[j])), None)
            if found is not None:
                at[name] = found + 1
                break
        else:
            pytest.fail(
                f"{page}: {command}\nexpected (in order): {want!r}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
            )
