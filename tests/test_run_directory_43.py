"""Issue 43's run-directory findings, with real processes, signals and files: a run killed (``kill -9``)
inside its first checkpoint restarts from step 0 on ``--resume`` (M1), SIGHUP saves and stops like SIGTERM
(M1), a resume never passes silently over a newer generation and never over one it cannot read, and a
resumed run never prunes a generation newer than its own (M2), a full disk while writing ``parameters.pt``
is one line naming the file (N3)."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("minigrid")

from conftest import run_cli
from plr_gym import RunDirectory
from plr_gym.checkpoint import CURRENT_LINK, generations
from test_run_directory import (
    ENV,
    TESTS,
    TINY,
    checkpoint_step,
    child_env,
    one_line_error,
    start_train,
    wait_for_checkpoint_after,
    zip_timesteps,
)

SHORT = [*TINY, "--timesteps", "256", "--save-freq", "128"]

# plr-gym train in a child process whose first checkpoint is cut by SIGKILL while its files are hashed for
# the manifest (everything but checkpoint.json written)
KILLED_IN_FIRST_SAVE = r"""
import os, signal, sys
import plr_gym.run.save as save_module
from plr_gym.cli import main

def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

save_module.file_entries = die
main(sys.argv[1:])
"""


def _gens(out: Path) -> list[str]:
    return [path.name for _, path in generations(out)]


# ---------------------------------------------------------------------------------- M1
def test_m1_kill_9_inside_the_first_checkpoint_then_resume_starts_again_at_step_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-c", KILLED_IN_FIRST_SAVE, "train", ENV, "--out", str(out), *SHORT],
        env=child_env(), capture_output=True, text=True, timeout=300, cwd=TESTS,
    )  # fmt: skip
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    assert _gens(out) == [".plr-gen-00000001"] and not os.path.lexists(out / CURRENT_LINK)
    assert not (out / ".plr-gen-00000001" / "checkpoint.json").exists()  # torn: never a checkpoint
    assert (out / "config.json").is_file()
    # the requeued command: --resume starts again at step 0 (it used to exit 2 for ever)
    code, _, err = run_cli(["train", ENV, "--out", str(out), *SHORT, "--resume"], capsys)
    assert code == 0, err
    notes = [line for line in err.splitlines() if line.startswith("note: ")]
    assert len(notes) == 1 and ".plr-torn-00000001 kept aside" in notes[0], err
    assert "starts again from step 0" in notes[0]
    torn = out / ".plr-torn-00000001"  # renamed for inspection, not deleted, no longer a generation
    assert (torn / "model.zip").is_file() and not (torn / "checkpoint.json").exists()
    assert checkpoint_step(out) == zip_timesteps(out / "model.zip") == 256
    assert json.loads((out / "evaluation.json").read_text())["timesteps"] == 256
    assert ".plr-torn-00000001" not in _gens(out)
    # --overwrite replaces the run, the torn generation set aside with it
    code, _, err = run_cli(
        ["train", ENV, "--out", str(out), *TINY, "--timesteps", "64", "--overwrite"], capsys
    )
    assert code == 0, err
    assert not torn.exists()


def test_m1_a_directory_with_a_torn_generation_and_a_corrupt_one_is_still_refused(tmp_path: Path) -> None:
    """Only a run that never completed a checkpoint starts again: a generation with a manifest that does
    not verify (a completed checkpoint, damaged since) is refused as before, nothing renamed."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.json").write_text("{}")
    for n, manifest in ((1, True), (2, False)):
        gen = out / f".plr-gen-0000000{n}"
        gen.mkdir()
        (gen / "model.zip").write_bytes(b"x")
        if manifest:
            (gen / "checkpoint.json").write_text("{")
    with RunDirectory(out) as run, pytest.raises(ValueError, match="none of its 2 checkpoint generations"):
        run.begin({}, resume=True)
    assert _gens(out) == [".plr-gen-00000001", ".plr-gen-00000002"]


@pytest.mark.slow
def test_m1_sighup_saves_at_the_current_step_and_stops_like_sigterm(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = start_train(out, "--timesteps", "1000000", "--save-freq", "1000000")
    wait_for_checkpoint_after(out, -1, proc)  # the step-0 checkpoint: training has started
    time.sleep(2.0)
    proc.send_signal(signal.SIGHUP)  # the terminal or SSH session closed
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGHUP, err[-3000:]
    stopped = int(err.split("stopped at step ")[1].split()[0])
    assert stopped > 0 and checkpoint_step(out) == zip_timesteps(out / "model.zip") == stopped
    assert "SIGHUP: saving at this step and stopping" in err


# ---------------------------------------------------------------------------------- M2
@pytest.fixture(scope="module")
def three_checkpoints(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from plr_gym.cli import main

    out = tmp_path_factory.mktemp("three") / "run"
    assert main(["train", ENV, "--out", str(out), *SHORT, "--keep-checkpoints", "3"]) == 0
    assert [checkpoint_step(out)] == [256] and len(_gens(out)) == 3  # steps 0, 128, 256
    return out


def _copy_without_link(run: Path, tmp_path: Path) -> Path:
    import shutil

    out = tmp_path / "run"
    shutil.copytree(run, out, symlinks=True)
    os.unlink(out / CURRENT_LINK)  # a copy by a tool that skips links
    (out / "evaluation.json").unlink()  # not finished: --timesteps 384 continues it
    return out


def _without_dac_override() -> None:
    """In the child, before exec: root without CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH (bounding set), so
    that a file's permissions apply to it as to another user."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX permissions")
def test_m2_an_unreadable_newest_generation_is_never_passed_over(
    three_checkpoints: Path, tmp_path: Path
) -> None:
    out = _copy_without_link(three_checkpoints, tmp_path)
    newest = out / _gens(out)[-1] / "parameters.pt"
    newest.chmod(0)  # intact, but another user's to this trainer
    before = {p.name: os.lstat(p).st_mtime_ns for p in out.iterdir() if p.name != ".plr-lock"}
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "plr_gym.cli", "train", ENV, "--out", str(out), *TINY,
             "--timesteps", "384", "--save-freq", "128", "--resume"],
            env=child_env(), capture_output=True, text=True, timeout=300,
            preexec_fn=_without_dac_override if os.geteuid() == 0 else None,
        )  # fmt: skip
    finally:
        newest.chmod(0o644)
    line = one_line_error(proc.returncode, proc.stderr)
    assert f"checkpoint file {newest} is unreadable: Permission denied" in line, line
    assert "never from an older one" in line and "nothing was changed" in line
    after = {p.name: os.lstat(p).st_mtime_ns for p in out.iterdir() if p.name != ".plr-lock"}
    assert after == before  # no link made, no generation written or removed, config.json as it was
    # readable again: it resumes from the newest, 256
    proc = start_train(out, "--timesteps", "384", "--save-freq", "128", "--resume")
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    assert json.loads((out / "config.json").read_text())["resumed_at"] == [256]


def test_m2_a_corrupt_newest_generation_is_named_and_never_pruned(
    three_checkpoints: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _copy_without_link(three_checkpoints, tmp_path)
    newest = out / _gens(out)[-1]
    with (newest / "parameters.pt").open("r+b") as f:  # one byte changed: the manifest's hash fails
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 1]))
    command = ["train", ENV, "--out", str(out), *TINY, "--timesteps", "640", "--save-freq", "128", "--resume"]
    code, _, err = run_cli(command, capsys)
    assert code == 0, err
    notes = [line for line in err.splitlines() if line.startswith("note: ")]
    assert len(notes) == 1 and "resuming from .plr-gen-00000002 (step 128)" in notes[0], err
    assert f"checkpoint file {newest / 'parameters.pt'} is corrupt" in notes[0]
    assert json.loads((out / "config.json").read_text())["resumed_at"] == [128]
    # four saves later (keep 2), the newer generation the run did not resume from is still there
    assert checkpoint_step(out) == 640 and newest.is_dir()
    assert newest.name in _gens(out) and len(_gens(out)) == 3


# ---------------------------------------------------------------------------------- N3
@contextlib.contextmanager
def _nearly_full_filesystem(tmp_path: Path, free: int) -> Any:
    """A 1 MiB tmpfs with ``free`` bytes left (a real "No space left on device", after a partial write)."""
    mount = tmp_path / "small"
    mount.mkdir()
    if (
        os.geteuid() != 0
        or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True
        ).returncode
    ):
        pytest.skip("needs root and mount to make a small file system")
    try:
        fill = os.statvfs(mount)
        (mount / "filler").write_bytes(b"\0" * (fill.f_bavail * fill.f_frsize - free))
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_n3_a_full_disk_while_writing_parameters_pt_exits_2_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import builtins

    import plr_gym.run.parts as parts

    out = tmp_path / "run"
    with _nearly_full_filesystem(tmp_path, free=16 * 1024) as small:
        calls = [0]

        def open_(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
            if str(file).endswith("parameters.pt") and "w" in mode:
                calls[0] += 1
                if calls[0] == 2:  # the checkpoint at step 128: its weights go to the full file system
                    return builtins.open(small / "parameters.pt", mode, *args, **kwargs)
            return builtins.open(file, mode, *args, **kwargs)

        monkeypatch.setattr(parts, "open", open_, raising=False)
        line = one_line_error(*run_cli(["train", ENV, "--out", str(out), *SHORT], capsys)[::2])
    assert "No space left on device" in line and "parameters.pt" in line, line
    assert "Traceback" not in line and "RuntimeError" not in line
    kept = RunDirectory(out).current()
    assert kept is not None and kept.timestep == 0 and "the checkpoint at step 0 is kept" in line


# ---------------------------------------------------------------------------------- M3, M4
@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        (
            "--save-minutes",
            "1e307",
            r"argument --save-minutes: expected minutes in (0, 10,000,000], got '1e307'",
        ),
        ("--save-minutes", "0", "argument --save-minutes: expected minutes in (0, 10,000,000]"),
        ("--temperature", "1e-320", "argument --temperature: expected a number >= 2.225e-308"),
        (
            "--staleness-temperature",
            "5e-324",
            "argument --staleness-temperature: expected a number >= 2.225e-308",
        ),
    ],
)
def test_m3_an_option_that_would_overflow_is_refused_at_parse_time_and_nothing_is_written(
    option: str, value: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    code, _, err = run_cli(["train", ENV, "--out", str(out), *SHORT, option, value], capsys)
    assert code == 2 and message in err and "Traceback" not in err, err
    assert not out.exists()  # no config.json: a retry needs no --overwrite


def test_m4_compare_and_resume_read_a_run_whose_eval_csv_ends_in_half_a_row(
    three_checkpoints: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    run = tmp_path / "run"
    shutil.copytree(three_checkpoints, run, symlinks=True)
    log = run / "eval.csv"
    whole = log.read_bytes()
    log.write_bytes(whole + b"384,test,4,0.1")  # an older plr-gym's append cut by a full disk
    code, _, err = run_cli(["compare", str(run), "--out", str(tmp_path / "cmp")], capsys)
    assert code == 0, err
    assert [line for line in err.splitlines() if line.startswith("note: ")] == [
        f"note: {log}: its last row is torn (an append cut short, e.g. by a full disk): ignored"
    ], err
    assert (tmp_path / "cmp" / "comparison.md").is_file()
    # a resume puts the log back as of its checkpoint (the torn row goes) and appends whole rows
    (run / "evaluation.json").unlink()
    command = ["train", ENV, "--out", str(run), *TINY, "--timesteps", "384", "--save-freq", "128", "--resume"]
    code, _, err = run_cli(command, capsys)
    assert code == 0, err
    rows = log.read_text().splitlines()
    assert rows[-1].startswith("384,") and all(not r.startswith("384,test,4,0.1\r") for r in rows)
    assert log.read_bytes().endswith(b"\n") and len([r for r in rows if r.startswith("384,")]) == 1


def test_m1_a_run_cut_in_its_first_save_again_and_again_resumes_and_keeps_only_the_latest_cut_save(
    tmp_path: Path,
) -> None:
    """Under a requeue loop a run can be killed in its first save more than once: the second cut save
    reuses the generation number set aside the first time (renaming onto it failed: ENOTEMPTY, the requeue
    blocked for good). The latest cut save replaces the earlier one, so they do not accumulate either."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.json").write_text("{}")
    first = out / ".plr-torn-00000001"  # set aside by the first resume
    first.mkdir()
    (first / "model.zip").write_bytes(b"first")
    (out / ".plr-torn-00000002").mkdir()  # an older leftover of another number
    cut = out / ".plr-gen-00000001"  # the second cut save, same number
    cut.mkdir()
    (cut / "model.zip").write_bytes(b"second")
    with pytest.warns(UserWarning, match=r"\.plr-torn-00000001 kept aside"), RunDirectory(out) as run:
        assert run.begin({}, resume=True) is None  # starts again from step 0
    assert _gens(out) == []
    assert sorted(p.name for p in out.glob(".plr-torn-*")) == [".plr-torn-00000001"]
    assert (out / ".plr-torn-00000001" / "model.zip").read_bytes() == b"second"
