"""The differential harness's own pieces: tokens, conversion, the recorder's isolation."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, spec

from kvsim.request import RequestSpec, Segment
from kvsim.validation import convert, generate, kvsim_side
from kvsim.validation.workload import DiffRequest, Knobs, TokenStreams, prompt_token_ids

KNOBS = Knobs(block_size=32, num_gpu_blocks=24, max_num_batched_tokens=256, max_num_seqs=8)


def test_equal_content_gives_equal_tokens_and_prefixes() -> None:
    a, b = TokenStreams(), TokenStreams()
    assert a.tokens(7, 50) == b.tokens(7, 50)  # the same in every process
    assert a.tokens(7, 20) == a.tokens(7, 50)[:20]
    assert a.tokens(7, 32) != a.tokens(8, 32)
    assert all(3 <= t < 2048 for t in a.tokens(9, 1000))
    req = DiffRequest(2, 0, ((7, 10), (-1, 3), (8, 5)), 4, parent=0)
    ids = prompt_token_ids(req, a, {0: [100, 101, 102, 103]})
    assert ids == [*a.tokens(7, 10), 100, 101, 102, *a.tokens(8, 5)]


def test_conversion_keeps_content_identity_and_turns() -> None:
    first = spec(10, [(500, 40), (900, 20)], 8, arrival=0.4)
    second = RequestSpec(
        request_id=11,
        arrival_s=0.4,
        prompt=(Segment(500, 40), Segment(900, 20), Segment(-11, 8), Segment(901, 5)),
        output_tokens=3,
        parent_id=10,
        think_time_s=1.5,
    )
    other = spec(12, [(500, 40), (-11, 4)], 2, arrival=2.0)  # re-sends a non-ancestor's output
    wl = convert.from_request_specs([first, second, other], KNOBS, name="t")
    r0, r1, r2 = wl.requests
    assert r0.prompt == ((1, 40), (2, 20)) and r0.arrival_step == 1
    assert r1.parent == 0 and r1.think_steps == 2
    assert r1.prompt == ((1, 40), (2, 20), (-1, 8), (3, 5))
    assert r2.prompt[0] == (1, 40) and r2.prompt[1][0] > 0  # not reproducible: plain content
    assert not wl.problems()
    scaled = convert.from_request_specs([first, second], KNOBS, name="t", scale=8)
    assert scaled.requests[1].prompt == ((1, 5), (2, 3), (-1, 1), (3, 1))


def test_replay_releases_turns_after_their_parent() -> None:
    wl = convert.from_request_specs(
        [
            spec(0, 40, 3),
            RequestSpec(
                1, 0.0, (Segment(1000, 40), Segment(-1, 3), Segment(7, 4)), 2, parent_id=0, think_time_s=2.0
            ),
        ],
        KNOBS,
        name="t",
    )
    rec = kvsim_side.replay(wl)
    parent, child = rec["requests"][0], rec["requests"][1]
    assert child["arrival"] == parent["finish"] + 1 + 2
    assert child["hits"] == [32]  # the parent's first block (its prompt and answer are cached)


def test_catalogue_is_pinned() -> None:
    a = generate.catalogue(mooncake_path=None)
    b = generate.catalogue(mooncake_path=None)
    assert [w.to_dict() for w in a] == [w.to_dict() for w in b]
    assert len(a) >= 300
    assert all(not w.problems() for w in a)


def test_recorder_modules_need_only_the_standard_library() -> None:
    """The recorder runs in vLLM's venv: its siblings must load without kvsim's deps."""
    recorder = ROOT / "kvsim" / "validation" / "vllm_engine.py"
    code = (
        "import runpy, sys; sys.argv = ['x', '--help'];\n"
        "try:\n"
        f"    runpy.run_path({str(recorder)!r}, run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'kvsim', 'pydantic', 'simpy', 'numpy', 'pandas', 'yaml', 'vllm', 'torch'})\n"
        "assert not bad, bad\n"
        "assert 'kvsim_validation.workload' in sys.modules and 'kvsim_validation.fixtures' in sys.modules\n"
    )
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, cwd=Path("/"))
    assert out.returncode == 0, out.stderr
    assert "--workloads" in out.stdout


def test_importing_kvsim_does_not_import_the_harness() -> None:
    code = (
        "import sys, kvsim, kvsim.cli\n"
        "bad = sorted(m for m in sys.modules if m.startswith(('vllm', 'torch', 'kvsim.validation.vllm_engine')))\n"
        "assert not bad, bad\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


@pytest.mark.slow
def test_cli_compares_kvsim_with_the_fixtures(capsys) -> None:
    from kvsim.cli import main

    code = main(["verify-vllm", "--fixtures", "--groups", "handcrafted", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert out["totals"]["workloads"] == 7
    by_name = {w["name"]: w for w in out["workloads"]}
    assert by_name["evict-order"]["identical"]
    assert code == (0 if out["totals"]["workloads_identical"] == 7 else 1)
    code = main(["verify-vllm", "--fixtures", "--groups", "handcrafted"])
    text = capsys.readouterr().out
    assert "workloads identical:" in text
    if code == 1:
        assert "first diverging step" in text


def test_cli_names_a_missing_vllm_interpreter(capsys) -> None:
    from kvsim.cli import main

    assert main(["verify-vllm", "--vllm-python", "/nonexistent/python"]) == 2
    assert "--vllm-python /nonexistent/python: no such file" in capsys.readouterr().err
