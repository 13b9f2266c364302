"""Output paths, as issue 19 found them: kvsim replaces only what it can prove it wrote.

Every command that writes is driven at folders and files in every state a user leaves
them in (their own files under kvsim's names, look-alikes of kvsim's temporary folders, a
filesystem root, the home folder, names too long for the file system) and must refuse
with exit 2 naming the path and the rule, leaving every user file as it was; and kvsim's
own outputs must still be replaced, atomically.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import kvsim
from kvsim.cli import main
from kvsim.cost.fit import Point, point_time_s, write_points
from kvsim.cost.profile import shipped_profiles, write_profile
from kvsim.cost.roofline import RooflineCostModel
from kvsim.errors import KvsimError
from kvsim.model.presets import GPU_PRESETS, MODEL_PRESETS
from kvsim.outputs import MARKER_FILE, OutputError, file_format, marker_kind, write_file, write_marker
from kvsim.planning.sweep import SweepError, run_sweep
from kvsim.results.io import RESULT_FILES, ResultDirError, clean_stale, load_result, save_result

SMALL = "workload: {num_requests: 3}\n"


def _code(argv: list[str]) -> int:
    """``main``'s exit code, argparse's refusals (SystemExit) included."""
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


def _tree(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` with its content (folders as '/'), for before/after checks."""
    out = {}
    for path in sorted(folder.rglob("*")):
        rel = str(path.relative_to(folder))
        out[rel] = "/" if path.is_dir() else path.read_bytes().decode("latin-1")
    return out


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.fixture
def scenario(tmp_path: Path) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(SMALL)
    return path


# --------------------------------------------------------------------------- kvsim run --out


def test_run_never_deletes_user_folders_that_look_like_kvsim_temporaries(
    tmp_path: Path, scenario: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    pid = _dead_pid()
    mine = [
        ".res.old-backup",
        ".res.tmp-mine",
        f".res.tmp-{pid}-0badf00d",  # kvsim's old naming: no marker, so not provably kvsim's
        f".res.old-{pid}-0badf00d",
        f".res.kvsim-tmp-{pid}-0badf00d",  # kvsim's name, but no marker inside
    ]
    for name in mine:
        (work / name).mkdir()
        (work / name / "thesis.tex").write_text("keep me")
    before = _tree(work)
    assert main(["run", str(scenario), "--out", str(work / "res")]) == 0
    after = _tree(work)
    assert {k: v for k, v in after.items() if not k.startswith("res")} == before
    assert sorted(p.name for p in (work / "res").iterdir()) == sorted(RESULT_FILES)
    assert "removed" not in capsys.readouterr().err


@pytest.mark.parametrize(
    "layout",
    [
        {"summary.json": '{"mine": 1}'},  # the user's own summary.json, nothing else
        {"summary.json": "{}", "requests.parquet/": None},  # a user sub-folder with a result name
        {"notes.txt": "keep me"},
        {MARKER_FILE: '{"kvsim": "sweep"}', "results.csv": "x"},  # kvsim's, but a sweep
        {MARKER_FILE: '{"kvsim": "result"}', "summary.json": "{}", "thesis.tex": "x"},
        {MARKER_FILE: "not json", "summary.json": "{}"},
    ],
    ids=["own_summary", "subfolder_named_parquet", "notes", "sweep_folder", "extra_file", "bad_marker"],
)
def test_run_out_replaces_only_a_result_folder_kvsim_wrote(
    tmp_path: Path, scenario: Path, capsys: pytest.CaptureFixture[str], layout: dict[str, str | None]
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    for name, text in layout.items():
        if text is None:
            (out / name).mkdir()
            (out / name / "data.bin").write_text("keep")
        else:
            (out / name).write_text(text)
    before = _tree(out)
    assert main(["run", str(scenario), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{out}: not replaced because it holds files other than a kvsim result" in err, err
    assert "Traceback" not in err
    assert _tree(out) == before
    with pytest.raises(ResultDirError):
        save_result(kvsim.run(scenario), out)
    assert _tree(out) == before


def test_run_out_replaces_its_own_result_and_an_empty_folder(tmp_path: Path, scenario: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    assert main(["run", str(scenario), "--out", str(out), "--quiet"]) == 0  # empty: filled
    assert marker_kind(out) == "result"
    assert main(["run", str(scenario), "--out", str(out), "--quiet", "--set", "seed=4"]) == 0  # its own
    assert load_result(out).scenario.seed == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "s.yaml"]


@pytest.mark.parametrize("where", ["root", "home", "home_slash", "tilde", "long_name", "long_path", "nul"])
def test_out_refuses_roots_home_and_impossible_names(
    tmp_path: Path,
    scenario: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    where: str,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    out = {
        "root": "/",
        "home": str(home),
        "home_slash": str(home) + "/sub/..",
        "tilde": "~",
        "long_name": str(tmp_path / ("r" * 300)),
        "long_path": str(tmp_path / "/".join(["d" * 200] * 30)),
        "nul": str(tmp_path / "a\x00b"),
    }[where]
    commands = [
        ["run", str(scenario), "--out", out],
        ["sweep", str(_sweep_file(tmp_path)), "--out", out, "--jobs", "1"],
        ["calibrate", "--fit-measurements", str(_measurements(tmp_path)), "--model", "llama-3-8b",
         "--gpu", "h100-sxm", "--out", out],
    ]  # fmt: skip
    for argv in commands:
        code = _code(argv)
        err = capsys.readouterr().err
        assert code == 2, (argv[0], err)
        assert "Traceback" not in err and len(err) < 2000, err
    assert sorted(p.name for p in home.iterdir()) == []


def test_run_out_is_never_the_current_folder_even_empty(
    tmp_path: Path, scenario: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.chdir(empty)
    assert main(["run", str(scenario), "--out", "."]) == 2
    assert "is the current folder" in capsys.readouterr().err
    assert empty.is_dir() and list(empty.iterdir()) == []


def test_a_killed_run_leaves_only_what_kvsim_marked_and_the_next_run_cleans_it(
    tmp_path: Path, scenario: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pid = _dead_pid()
    ours = tmp_path / f".out.kvsim-tmp-{pid}-12345678"
    ours.mkdir()
    write_marker(ours, "result")
    (ours / "summary.json").write_text("{")  # half-written
    assert main(["run", str(scenario), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    assert not ours.exists()
    assert clean_stale(tmp_path / "out") == []


# --------------------------------------------------------------------------- kvsim sweep --out


def _sweep_file(tmp_path: Path) -> Path:
    (tmp_path / "base.yaml").write_text(SMALL)
    path = tmp_path / "sweep.yaml"
    path.write_text("base: base.yaml\ngrid: {seed: [1]}\n")
    return path


@pytest.mark.parametrize(
    "layout",
    [
        {"results.csv": "my,own\n1,2\n"},
        {"points/": None},
        {MARKER_FILE: '{"kvsim": "result"}', "summary.json": "{}"},
    ],
    ids=["own_results_csv", "own_points_folder", "result_folder"],
)
def test_sweep_out_is_new_empty_or_a_sweep_folder_kvsim_marked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], layout: dict[str, str | None]
) -> None:
    sweep = _sweep_file(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    for name, text in layout.items():
        if text is None:
            (out / name).mkdir()
        else:
            (out / name).write_text(text)
    before = _tree(out)
    assert main(["sweep", str(sweep), "--out", str(out), "--jobs", "1"]) == 2
    err = capsys.readouterr().err
    assert "holds files other than a kvsim sweep" in err and str(out) in err, err
    assert _tree(out) == before


def test_sweep_reuses_its_own_folder_and_writes_atomically(tmp_path: Path) -> None:
    sweep = _sweep_file(tmp_path)
    out = tmp_path / "out"
    report = run_sweep(sweep, out)
    assert report.num_ok == 1 and marker_kind(out) == "sweep"
    again = run_sweep(sweep, out)
    assert again.num_skipped == 1
    assert sorted(p.name for p in out.iterdir()) == [MARKER_FILE, "points", "results.csv", "results.parquet"]
    with pytest.raises(SweepError, match="holds files other than a kvsim sweep"):
        run_sweep(sweep, out / "points")  # a folder inside, unmarked


# --------------------------------------------------------------------------- single files


def _measurements(tmp_path: Path) -> Path:
    path = tmp_path / "m.csv"
    if not path.exists():
        model = RooflineCostModel(MODEL_PRESETS["llama-3-8b"], GPU_PRESETS["h100-sxm"])
        points = [Point(1, "prefill", 1, n, 0) for n in (128, 512, 2048)]
        points += [Point(1, "decode", b, 0, 1024) for b in (1, 8, 64)]
        write_points([Point(1, p.phase, p.batch_size, p.prompt_tokens, p.context_tokens,
                            point_time_s(model, p)) for p in points], path)  # fmt: skip
    return path


def _fit(tmp_path: Path, out: Path | str) -> list[str]:
    return ["calibrate", "--fit-measurements", str(_measurements(tmp_path)), "--model", "llama-3-8b",
            "--gpu", "h100-sxm", "--out", str(out)]  # fmt: skip


@pytest.mark.parametrize(
    "content",
    [b"my notes\n", b'{"format": "mine"}', b'{"name": "x", "format": "kvsim-profile"}', b""],
    ids=["text", "other_json", "format_not_first", "empty"],
)
def test_calibrate_out_never_overwrites_a_file_kvsim_did_not_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes
) -> None:
    notes = tmp_path / "notes.json"
    notes.write_bytes(content)
    assert main(_fit(tmp_path, notes)) == 2
    err = capsys.readouterr().err
    assert f"--out {notes}: not replaced: it is not a file kvsim wrote" in err, err
    assert notes.read_bytes() == content


def test_calibrate_out_replaces_its_own_profile_and_refuses_folders_links_and_special_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fit = tmp_path / "fit.json"
    assert main(_fit(tmp_path, fit)) == 0
    assert file_format(fit) == "kvsim-profile"
    first = fit.read_text()
    assert main(_fit(tmp_path, fit)) == 0  # its own: replaced
    assert json.loads(fit.read_text())["format"] == json.loads(first)["format"]
    (tmp_path / "link.json").symlink_to(fit)
    (tmp_path / "folder").mkdir()
    os.mkfifo(tmp_path / "fifo")
    for target, rule in [
        ("link.json", "is a symbolic link"),
        ("folder", "is a folder"),
        ("fifo", "is not a regular file"),
        ("/", "is a filesystem root"),
    ]:
        assert _code(_fit(tmp_path, tmp_path / target)) == 2
        err = capsys.readouterr().err
        assert rule in err and "Traceback" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "fit.json", "folder", "link.json", "m.csv"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "p.json"
    path.write_bytes(b'{"format": "kvsim-profile"}\n')

    def fail(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="No space left"):
        write_file(path, b'{"format": "kvsim-profile", "new": 1}', "profile", "kvsim-profile")
    assert path.read_bytes() == b'{"format": "kvsim-profile"}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["p.json"]


def test_csv_outputs_never_replace_an_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "steps.csv"
    path.write_text("mine\n")
    with pytest.raises(OutputError, match="already exists; kvsim does not replace a file it cannot prove"):
        write_points([Point(1, "prefill", 1, 10, 0, 0.1)], path)
    assert path.read_text() == "mine\n"


def test_write_profile_api_follows_the_same_rule(tmp_path: Path) -> None:
    data = json.loads(shipped_profiles()[0].read_text())
    with pytest.raises(KvsimError, match="is a filesystem root"):
        write_profile(data, "/")
    (tmp_path / "notes.json").write_text("{}")
    with pytest.raises(OutputError, match="not replaced"):
        write_profile(data, tmp_path / "notes.json")
    assert (tmp_path / "notes.json").read_text() == "{}"
    write_profile(data, tmp_path / "p.json")
    write_profile(data, tmp_path / "p.json")  # its own
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.json", "p.json"]


def test_an_output_folder_that_cannot_be_written_is_refused_before_any_work(
    tmp_path: Path, scenario: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_run(*args: object, **kwargs: object) -> None:
        raise AssertionError("simulated although the output cannot be written")

    monkeypatch.setattr(kvsim, "run", no_run)
    monkeypatch.setattr(os, "access", lambda path, mode: False)  # as for a user without write permission
    for argv in (
        ["run", str(scenario), "--out", str(tmp_path / "new")],
        ["sweep", str(_sweep_file(tmp_path)), "--out", str(tmp_path / "sw")],
    ):
        assert main(argv) == 2
        assert "permission denied" in capsys.readouterr().err
