"""A training run survives preemption: the run directory (``plr_gym.run.RunDirectory``) and ``plr-gym train``.

In-process: a checkpoint round-trips the model (weights, optimizer, counters), the level source, the RNG
states, VecNormalize statistics and (opt-in) the replay buffer; a corrupt or mismatched checkpoint is
refused and changes nothing; restoring never unpickles; one trainer per directory (flock, stale locks);
the generation links of ``plr_gym.checkpoint``.

Real processes and signals: saves killed at every stage, a save under ``RLIMIT_FSIZE``, ``kill -9`` of
``plr-gym train`` at random moments, ``SIGTERM`` (saves at the current step, exits within 60 s,
resumes), a second trainer on a live directory, a read-only directory, and the one-line errors of
``--resume``.
"""

from __future__ import annotations

import csv
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("minigrid")

import torch as th
from stable_baselines3 import DQN, PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecNormalize

import plr_gym.run.manifest as manifest_module
from conftest import run_cli
from plr_gym import LevelWrapper, PLRCallback, PrioritizedLevelReplay, RunCheckpointCallback, RunDirectory
from plr_gym.checkpoint import CURRENT_LINK, checkpoint_files, write_checkpoint_dir
from plr_gym.run import DEFAULT_KEEP, LOCK_FILE, RunDirectoryError, RunLockedError, StopOnSignals

TESTS = Path(__file__).resolve().parent
SRC = TESTS.parent / "src"
ENV = "MiniGrid-Empty-5x5-v0"
# 2 envs x 64 steps per rollout, short episodes, 4 held-out levels, one torch thread
TINY = [
    "--n-envs", "2", "--n-steps", "64", "--batch-size", "64", "--n-epochs", "1", "--num-levels", "5",
    "--eval-levels", "1000:1004", "--eval-freq", "128", "--env-kwarg", "max_steps=20", "--no-progress",
    "--quiet", "--torch-threads", "1", "--no-tensorboard", "--no-eval-train-levels",
]  # fmt: skip


def child_env() -> dict[str, str]:
    """The environment of a child process; run ``python -c`` children with ``cwd=TESTS`` so that their
    ``from conftest import ...`` finds tests/conftest.py, not the repository root's."""
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), str(TESTS), env.get("PYTHONPATH", "")])
    return env


def build(
    seed: int = 0, normalize: bool = False, net: tuple[int, ...] = (16,), norm_obs: bool = True
) -> tuple[Any, PLRCallback]:
    """A tiny PPO on MiniGrid with PLR, and its PLRCallback."""
    from minigrid.wrappers import FlatObsWrapper

    venv: Any = make_vec_env(
        ENV, n_envs=2, seed=seed, env_kwargs={"max_steps": 20},
        wrapper_class=lambda e: LevelWrapper(FlatObsWrapper(e)),
    )  # fmt: skip
    venv = PrioritizedLevelReplay(venv, levels=range(10), seed=seed)
    if normalize:
        venv = VecNormalize(venv, norm_obs=norm_obs)
    model = PPO(
        "MlpPolicy", venv, n_steps=32, batch_size=64, n_epochs=1, seed=seed, device="cpu",
        policy_kwargs={"net_arch": list(net)},
    )  # fmt: skip
    return model, PLRCallback()


def zip_timesteps(path: Path) -> int:
    """``num_timesteps`` of an SB3 model.zip, from its JSON (no unpickling)."""
    with zipfile.ZipFile(path) as archive:
        return int(json.loads(archive.read("data"))["num_timesteps"])


def params_of(model: Any) -> dict[str, Any]:
    return {k: v.clone() for k, v in model.policy.state_dict().items()}


def optimizer_state(model: Any) -> list[Any]:
    return [t.clone() for s in model.policy.optimizer.state_dict()["state"].values() for t in s.values()]


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread: None) -> None:
    """Tiny networks: one torch thread."""


# --------------------------------------------------------------------------------------------------
# in-process: save / restore
# --------------------------------------------------------------------------------------------------
def test_checkpoint_round_trips_model_optimizer_level_source_and_rng(tmp_path: Path) -> None:
    with RunDirectory(tmp_path) as run:
        model, plr = build()
        model.learn(128, callback=[plr, RunCheckpointCallback(run, save_freq=64, plr_callback=plr)])
        ckpt = run.current()
        assert ckpt is not None and ckpt.timestep == model.num_timesteps == 128
        assert zip_timesteps(tmp_path / "model.zip") == 128
        assert json.loads((tmp_path / "checkpoint.json").read_text())["timestep"] == 128
        weights, moments = params_of(model), optimizer_state(model)
        sampler_state = plr.source.state_dict()
        n_updates, episodes = model._n_updates, list(model.ep_info_buffer)
        # the RNG states were saved with the checkpoint: the next draws after a restore are these
        draws = (np.random.random(), random.random(), th.rand(1).item())  # noqa: NPY002 (the global RNG)

        fresh, fresh_plr = build(seed=7)  # another seed: every restored part must come from the checkpoint
        assert not all(th.equal(weights[k], v) for k, v in fresh.policy.state_dict().items())
        assert run.restore(fresh, plr_callback=fresh_plr) == ckpt
    assert (np.random.random(), random.random(), th.rand(1).item()) == draws  # noqa: NPY002
    assert all(th.equal(weights[k], v) for k, v in fresh.policy.state_dict().items())
    assert all(th.equal(a, b) for a, b in zip(moments, optimizer_state(fresh), strict=True))
    assert fresh.num_timesteps == 128 and fresh._n_updates == n_updates > 0
    assert list(fresh.ep_info_buffer) == episodes
    restored = fresh.get_env().sampler.state_dict()
    for key, value in sampler_state.items():
        assert np.array_equal(np.asarray(value), np.asarray(restored[key])), key
    assert fresh_plr.resume_from == ckpt.path / "plr"  # the scorer's open episodes load at learn()


def test_the_run_directory_names_the_callback_that_replaced_its_factory(tmp_path: Path) -> None:
    """RunDirectory does not build its callback (the callback imports the run directory, never the other
    way round): the old ``run.callback(...)`` fails with a message naming the replacement."""
    run = RunDirectory(tmp_path)
    with pytest.raises(AttributeError, match=r"use plr_gym\.RunCheckpointCallback\(run, save_freq"):
        run.callback(save_freq=64)
    assert not hasattr(run, "callback")


def test_library_users_restore_both_with_one_call_and_continue(tmp_path: Path) -> None:
    with RunDirectory(tmp_path) as run:
        model, plr = build()
        model.learn(64, callback=[plr, RunCheckpointCallback(run, save_freq=1000, plr_callback=plr)])
    with RunDirectory(tmp_path) as run:
        model, plr = build()
        assert run.restore(model, plr_callback=plr) is not None
        saver = RunCheckpointCallback(run, save_freq=1000, plr_callback=plr)
        model.learn(64, callback=[plr, saver], reset_num_timesteps=False)
        assert saver.last is not None and saver.last.timestep == model.num_timesteps == 128
        assert plr.scorer is not None and plr.source.num_seen > 0


def test_restore_never_unpickles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pickle

    import cloudpickle
    import stable_baselines3.common.save_util as save_util

    with RunDirectory(tmp_path) as run:
        model, plr = build()
        model.learn(64, callback=[plr, RunCheckpointCallback(run, save_freq=64, plr_callback=plr)])

        def refuse(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError("resume unpickled something")

        for module, name in ((pickle, "loads"), (pickle, "load"), (cloudpickle, "loads")):
            monkeypatch.setattr(module, name, refuse)
        monkeypatch.setattr(save_util, "load_from_zip_file", refuse)
        monkeypatch.setattr(PPO, "load", refuse)
        fresh, fresh_plr = build(seed=3)
        assert run.restore(fresh, plr_callback=fresh_plr).timestep == 64  # type: ignore[union-attr]


def test_corrupt_or_mismatched_checkpoints_are_refused_and_change_nothing(tmp_path: Path) -> None:
    with RunDirectory(tmp_path) as run:
        model, plr = build()
        model.learn(64, callback=[plr, RunCheckpointCallback(run, save_freq=64, plr_callback=plr)])
        gen = checkpoint_files(tmp_path)

        other, other_plr = build(seed=5, net=(8,))  # another network: refused by shape
        before = params_of(other)
        with pytest.raises(RunDirectoryError, match="another configuration"):
            run.restore(other, plr_callback=other_plr)
        assert all(th.equal(before[k], v) for k, v in other.policy.state_dict().items())

        normalized, norm_plr = build(normalize=True)  # a VecNormalize the checkpoint does not have
        with pytest.raises(RunDirectoryError, match="without VecNormalize"):
            run.restore(normalized, plr_callback=norm_plr)

        fresh, fresh_plr = build(seed=5)
        weights, sampler = params_of(fresh), fresh.get_env().sampler.state_dict()
        data = bytearray((gen / "plr" / "plr_sampler.npz").read_bytes())
        data[len(data) // 2] ^= 0x01  # one bit flipped
        (gen / "plr" / "plr_sampler.npz").write_bytes(bytes(data))
        with pytest.raises(RunDirectoryError, match=r"plr_sampler\.npz is corrupt"):
            run.restore(fresh, plr_callback=fresh_plr)
        assert all(th.equal(weights[k], v) for k, v in fresh.policy.state_dict().items())
        after = fresh.get_env().sampler.state_dict()
        assert all(np.array_equal(np.asarray(sampler[k]), np.asarray(after[k])) for k in sampler)
        assert fresh.num_timesteps == 0 and fresh_plr.resume_from is None


def test_vecnormalize_statistics_are_part_of_the_checkpoint(tmp_path: Path) -> None:
    with RunDirectory(tmp_path) as run:
        model, plr = build(normalize=True)
        model.learn(64, callback=[plr, RunCheckpointCallback(run, save_freq=64, plr_callback=plr)])
        saved = model.get_env().obs_rms
        fresh, fresh_plr = build(normalize=True, seed=2)
        run.restore(fresh, plr_callback=fresh_plr)
        restored = fresh.get_env().obs_rms
        assert np.array_equal(saved.mean, restored.mean) and np.array_equal(saved.var, restored.var)
        assert saved.count == restored.count > 1


def test_reward_only_vecnormalize_is_saved_and_restored(tmp_path: Path) -> None:
    """``--normalize-reward`` (and the paper presets) wrap the env in ``VecNormalize(norm_obs=False)``,
    which has no ``obs_rms``: its return statistics are still saved and restored."""
    with RunDirectory(tmp_path) as run:
        model, plr = build(normalize=True, norm_obs=False)
        model.learn(64, callback=[plr, RunCheckpointCallback(run, save_freq=64, plr_callback=plr)])
        assert run.current().has("vecnormalize.npz")  # type: ignore[union-attr]
        saved = model.get_env().ret_rms
        returns = model.get_env().returns.copy()
        fresh, fresh_plr = build(normalize=True, norm_obs=False, seed=2)
        run.restore(fresh, plr_callback=fresh_plr)
        restored = fresh.get_env().ret_rms
        assert np.array_equal(saved.mean, restored.mean) and np.array_equal(saved.var, restored.var)
        assert saved.count == restored.count > 1
        assert np.array_equal(fresh.get_env().returns, returns)


def test_replay_buffer_is_saved_when_asked(tmp_path: Path) -> None:
    def dqn(seed: int) -> Any:
        return DQN("MlpPolicy", "CartPole-v1", buffer_size=300, learning_starts=50, seed=seed, device="cpu")

    with RunDirectory(tmp_path) as run:
        model = dqn(0)
        model.learn(120, callback=RunCheckpointCallback(run, save_freq=1000))
        assert not run.current().has("replay_buffer.npz")  # type: ignore[union-attr]  # opt-in: large
        run.save(model, replay_buffer=True)
        fresh = dqn(1)
        run.restore(fresh, replay_buffer=True)
    for name in ("observations", "actions", "rewards", "dones"):
        assert np.array_equal(getattr(model.replay_buffer, name), getattr(fresh.replay_buffer, name))
    assert fresh.replay_buffer.pos == model.replay_buffer.pos == 120 and fresh.num_timesteps == 120


def test_keeps_the_last_k_generations(tmp_path: Path) -> None:
    with RunDirectory(tmp_path, keep=2) as run:
        model, plr = build()
        model.learn(256, callback=[plr, RunCheckpointCallback(run, save_freq=64, plr_callback=plr)])
        kept = run.checkpoints()
        assert len(kept) == 2 and checkpoint_files(tmp_path) == kept[-1]
        assert [json.loads((g / "checkpoint.json").read_text())["timestep"] for g in kept] == [192, 256]
        partial = tmp_path / ".plr-gen-00000099"  # left by a save killed before its manifest
        (partial / "plr").mkdir(parents=True)
        run.save(model, plr_callback=plr)
        assert not partial.exists()  # removed; the good previous checkpoint is the one kept
        assert [p.name for p in run.checkpoints()] == [kept[-1].name, ".plr-gen-00000100"]


def test_logs_are_cut_back_to_the_checkpoint(tmp_path: Path) -> None:
    log = tmp_path / "eval.csv"
    with RunDirectory(tmp_path, logs=("eval.csv",)) as run:
        model, _ = build()
        log.write_text("timesteps\n0\n")
        run.save(model, plr_callback=None)
        log.write_text("timesteps\n0\n64\n128\n")  # rows written after the checkpoint
        run.restore(build()[0])
    assert log.read_text() == "timesteps\n0\n"


# --------------------------------------------------------------------------------------------------
# in-process: lock
# --------------------------------------------------------------------------------------------------
def test_one_trainer_per_directory_and_a_stale_lock_is_taken_over(tmp_path: Path) -> None:
    holder = RunDirectory(tmp_path).acquire()
    with pytest.raises(RunLockedError, match=f"in use by another trainer \\(pid {os.getpid()}\\)"):
        RunDirectory(tmp_path).acquire()
    holder.release()
    code = (
        "import os, signal, sys\n"
        "from plr_gym.run import RunDirectory\n"
        "RunDirectory(sys.argv[1]).acquire()\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], env=child_env(), cwd=TESTS)
    assert proc.wait(timeout=120) == -signal.SIGKILL
    assert (tmp_path / LOCK_FILE).read_text().strip() == str(proc.pid) != str(os.getpid())  # stale pid
    with RunDirectory(tmp_path) as run:  # the kernel released the dead holder's lock
        assert run.locked and (tmp_path / LOCK_FILE).read_text().strip() == str(os.getpid())


def test_save_and_restore_need_the_lock(tmp_path: Path) -> None:
    model, _ = build()
    with pytest.raises(RuntimeError, match="needs the lock"):
        RunDirectory(tmp_path).save(model)


def test_stop_on_signals_requests_once_and_a_second_ctrl_c_interrupts() -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)}
    for sig, code in ((signal.SIGTERM, 143), (signal.SIGUSR1, 138), (signal.SIGINT, 130)):
        stop = StopOnSignals()
        with stop.installed():
            os.kill(os.getpid(), sig)  # the first: a request, no exception
            assert stop.requested and stop.exit_code == code
            os.kill(os.getpid(), signal.SIGTERM)  # repeated SIGTERM: still a request
            if sig == signal.SIGINT:
                with pytest.raises(KeyboardInterrupt):
                    os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C twice: at once
    assert {s: signal.getsignal(s) for s in before} == before


def test_checkpoint_callback_saves_at_the_current_step_on_a_signal(tmp_path: Path) -> None:
    stop = StopOnSignals()
    with RunDirectory(tmp_path) as run, stop.installed():
        model, plr = build()
        saver = RunCheckpointCallback(run, save_freq=10_000, plr_callback=plr, stop=stop)
        # the signal arrives during step 70 (in the middle of the third rollout)
        model.learn(
            1000, callback=[plr, saver, _SignalAt(70, signal.SIGTERM)],
        )  # fmt: skip
    assert model.num_timesteps == 72  # stopped after the env step in progress (2 envs)
    assert RunDirectory(tmp_path).current().timestep == 72 == zip_timesteps(tmp_path / "model.zip")  # type: ignore[union-attr]


class _SignalAt:
    def __new__(cls, step: int, sig: int) -> Any:
        from stable_baselines3.common.callbacks import BaseCallback

        class SignalAt(BaseCallback):
            def _on_step(self) -> bool:
                if self.num_timesteps == step:
                    os.kill(os.getpid(), sig)
                return True

        return SignalAt()


# --------------------------------------------------------------------------------------------------
# checkpoint.py: generation links (regressions)
# --------------------------------------------------------------------------------------------------
def _write(directory: Path, value: int, keep: int = 1) -> None:
    write_checkpoint_dir(directory, {"a.txt": lambda p: p.write_text(str(value))}, keep=keep)


def test_a_link_named_like_the_next_generation_does_not_stop_saves(tmp_path: Path) -> None:
    _write(tmp_path, 1)
    elsewhere = tmp_path.parent / f"{tmp_path.name}-elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, tmp_path / ".plr-gen-00000002")  # a name the next save would have taken
    for value in (2, 3):
        _write(tmp_path, value)
        assert (tmp_path / "a.txt").read_text() == str(value)
    assert os.readlink(tmp_path / CURRENT_LINK) == ".plr-gen-00000004"
    assert (tmp_path / ".plr-gen-00000002").is_symlink()  # not ours: left alone


@pytest.mark.parametrize("keep", [1, 2, 3, 4, 5])
def test_keep_k_keeps_the_last_k_generations_for_any_k(tmp_path: Path, keep: int) -> None:
    for value in range(8):
        _write(tmp_path, value, keep=keep)
        kept = [int((path / "a.txt").read_text()) for path in RunDirectory(tmp_path).checkpoints()]
        assert kept == list(range(max(value + 1 - keep, 0), value + 1)), (keep, value)


def test_a_generation_that_links_outside_the_directory_is_not_read(tmp_path: Path) -> None:
    _write(tmp_path, 1)
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    (outside / "a.txt").write_text("not ours")
    os.symlink(outside, tmp_path / ".plr-gen-00000009")
    os.unlink(tmp_path / CURRENT_LINK)
    os.symlink(".plr-gen-00000009", tmp_path / CURRENT_LINK)
    with pytest.raises(ValueError, match="not a directory inside the checkpoint directory"):
        checkpoint_files(tmp_path)
    # a file inside a real generation that is a link: refused as well
    os.unlink(tmp_path / CURRENT_LINK)
    os.symlink(".plr-gen-00000001", tmp_path / CURRENT_LINK)
    os.unlink(tmp_path / ".plr-gen-00000001" / "a.txt")
    os.symlink(outside / "a.txt", tmp_path / ".plr-gen-00000001" / "a.txt")
    with pytest.raises(ValueError, match="is not a regular file"):
        checkpoint_files(tmp_path)


# --------------------------------------------------------------------------------------------------
# real processes: saves that fail or are killed
# --------------------------------------------------------------------------------------------------
# The child trains a tiny PPO and saves checkpoint A (step 64), trains on to step 128, then, for each way
# of failing, copies the run directory and forks a process that saves checkpoint B into the copy while
# failing: under RLIMIT_FSIZE (a write raises EFBIG), or killed with SIGKILL at one stage of the save
# (model written, weights written, while hashing for the manifest, at the first visible link, at the
# switch of .plr-current, while removing old generations).
SAVE_CHILD = r"""
import json, os, resource, shutil, signal, sys
from pathlib import Path
import plr_gym.checkpoint as ckpt_module
import plr_gym.run as run_module
import plr_gym.run.save as save_module
from plr_gym import RunCheckpointCallback
from test_run_directory import build

out = Path(sys.argv[1])
base = run_module.RunDirectory(out / "base").acquire()
model, plr = build()
model.learn(64, callback=[plr, RunCheckpointCallback(base, save_freq=64, plr_callback=plr)])
base.release()
model.learn(64, callback=[plr], reset_num_timesteps=False)  # step 128, unsaved

def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

def kill_at(module, name, nth):
    original, calls = getattr(module, name), [0]
    def wrapper(*args, **kwargs):
        calls[0] += 1
        if calls[0] == nth:
            die()
        return original(*args, **kwargs)
    setattr(module, name, wrapper)

def attempt(mode):
    target = out / mode
    shutil.copytree(out / "base", target, symlinks=True)
    pid = os.fork()
    if pid == 0:
        run = run_module.RunDirectory(target).acquire()
        if mode == "fsize":
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, resource.RLIM_INFINITY))  # < model.zip
        elif mode == "after_model":
            kill_at(save_module, "save_model_state", 1)
        elif mode == "after_weights":
            kill_at(save_module, "save_npz", 1)
        elif mode == "manifest":
            kill_at(save_module, "file_entries", 1)
        elif mode == "first_link":
            kill_at(ckpt_module, "_replace_link", 1)
        elif mode == "switch":
            kill_at(ckpt_module, "_replace_link", 4)  # after checkpoint.json, model.zip, plr: the switch
        elif mode == "prune":
            shutil.rmtree = die
        try:
            run.save(model, plr_callback=plr)
        except OSError:
            os._exit(3)  # the save raised, as it should under the file-size limit
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)

print(json.dumps({mode: attempt(mode) for mode in sys.argv[2:]}))
"""
# mode -> the checkpoint that must be current afterwards (killed after the switch: the new one)
SAVE_FAILURES = {
    "fsize": 64,
    "after_model": 64,
    "after_weights": 64,
    "manifest": 64,
    "first_link": 64,
    "switch": 64,
    "prune": 128,
}


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork, POSIX signals and resource limits")
def test_a_failed_or_killed_save_leaves_a_consistent_loadable_checkpoint(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SAVE_CHILD, str(tmp_path), *SAVE_FAILURES],
        env=child_env(), capture_output=True, text=True, timeout=600,
        cwd=TESTS,  # "-c" puts the working directory first on sys.path: tests/conftest.py, not the root's
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    codes = json.loads(proc.stdout.strip().splitlines()[-1])
    for mode, expected in SAVE_FAILURES.items():
        # the file-size limit made the save raise OSError (exit 3); every other mode was SIGKILLed
        assert codes[mode] == (3 if mode == "fsize" else -signal.SIGKILL), (mode, codes[mode])
        out = tmp_path / mode
        run = RunDirectory(out)
        ckpt = run.current()  # every file checked against the manifest
        assert ckpt is not None and ckpt.timestep == expected, mode
        assert json.loads((out / "checkpoint.json").read_text())["timestep"] == expected, mode
        assert zip_timesteps(out / "model.zip") == expected, mode
        with run:
            model, plr = build(seed=9)
            assert run.restore(model, plr_callback=plr) == ckpt
            assert model.num_timesteps == expected, mode


# --------------------------------------------------------------------------------------------------
# real processes: plr-gym train
# --------------------------------------------------------------------------------------------------
def start_train(out: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "plr_gym.cli", "train", ENV, "--out", str(out), *TINY, *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env(),
    )  # fmt: skip


def checkpoint_step(out: Path) -> int:
    try:
        return int(json.loads((out / "checkpoint.json").read_text())["timestep"])
    except (FileNotFoundError, json.JSONDecodeError):
        return -1


def wait_for_checkpoint_after(out: Path, step: int, proc: subprocess.Popen[str], timeout: float = 180) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = checkpoint_step(out)
        if now > step:
            return now
        if proc.poll() is not None:
            raise AssertionError(f"the trainer exited with {proc.returncode}: {proc.stderr.read()[-3000:]}")  # type: ignore[union-attr]
        time.sleep(0.05)
    raise AssertionError("no checkpoint in time")


def eval_steps(out: Path) -> list[int]:
    with (out / "eval.csv").open(newline="") as f:
        return [int(row["timesteps"]) for row in csv.DictReader(f)]


def assert_increasing(steps: list[int]) -> None:
    assert all(a < b for a, b in zip(steps, steps[1:], strict=False)), steps  # no duplicated/backward row


@pytest.mark.slow
def test_kill_9_at_random_moments_then_resume_finishes_with_consistent_files(tmp_path: Path) -> None:
    out = tmp_path / "run"
    rng = random.Random(0)
    resume = ["--resume", "--timesteps", "1000000", "--save-freq", "128"]
    last = -1
    for _ in range(5):
        proc = start_train(out, *resume)
        reached = wait_for_checkpoint_after(out, last, proc)  # training is under way
        time.sleep(rng.uniform(0.0, 1.5))  # then a random moment: in a rollout, an update, a save...
        proc.kill()
        proc.communicate(timeout=60)
        step = checkpoint_step(out)
        assert step >= reached > last  # nothing saved before the kill is lost
        assert step == zip_timesteps(out / "model.zip")
        assert RunDirectory(out).current().timestep == step  # type: ignore[union-attr]  # every file checked
        assert_increasing(eval_steps(out))
        last = step
    proc = start_train(out, "--resume", "--timesteps", str(last + 256), "--save-freq", "128")
    _, err = proc.communicate(timeout=900)  # seconds on an idle machine; CI can be loaded
    assert proc.returncode == 0, err[-3000:]
    final = json.loads((out / "evaluation.json").read_text())["timesteps"]
    assert final == checkpoint_step(out) == zip_timesteps(out / "model.zip") >= last + 256
    steps = eval_steps(out)
    assert_increasing(steps)
    assert steps[0] == 0 and steps[-1] == final
    assert len(json.loads((out / "config.json").read_text())["resumed_at"]) == 5


@pytest.mark.slow
def test_sigterm_saves_at_the_current_step_exits_in_time_and_resumes(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = start_train(out, "--timesteps", "1000000", "--save-freq", "1000000")
    wait_for_checkpoint_after(out, -1, proc)  # the step-0 checkpoint: training has started
    time.sleep(2.0)
    # a second trainer on the live directory is refused, naming the holder
    code, err = _cli_subprocess(["train", ENV, "--out", str(out), "--resume", "--timesteps", "999", *TINY])
    assert code == 2 and f"in use by another trainer (pid {proc.pid})" in err and "Traceback" not in err
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert time.monotonic() - sent < 60
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    stopped = int(err.split("stopped at step ")[1].split()[0])
    assert stopped > 0
    assert checkpoint_step(out) == zip_timesteps(out / "model.zip") == stopped
    assert not (out / "evaluation.json").exists()
    proc = start_train(out, "--resume", "--timesteps", str(stopped + 128))
    _, err = proc.communicate(timeout=900)  # seconds on an idle machine; CI can be loaded
    assert proc.returncode == 0, err[-3000:]
    assert checkpoint_step(out) == json.loads((out / "evaluation.json").read_text())["timesteps"]
    assert_increasing(eval_steps(out))


@pytest.mark.slow
def test_a_signal_to_the_process_group_of_a_subproc_run_saves_at_the_current_step(tmp_path: Path) -> None:
    """Ctrl-C in a terminal, ``scancel`` and preemption signal every process of the job: the
    ``SubprocVecEnv`` workers must outlive the signal so that the trainer can finish its step and save."""
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "plr_gym.cli", "train", ENV, "--out", str(out), *TINY, "--subproc",
         "--timesteps", "1000000", "--save-freq", "1000000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env(), start_new_session=True,
    )  # fmt: skip
    wait_for_checkpoint_after(out, -1, proc)  # the step-0 checkpoint: training has started
    time.sleep(2.0)
    os.killpg(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    stopped = int(err.split("stopped at step ")[1].split()[0])
    assert stopped > 0 and checkpoint_step(out) == zip_timesteps(out / "model.zip") == stopped


def test_sigterm_before_the_first_checkpoint_leaves_a_run_that_resume_starts_again(tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.json").write_text("{}")  # a run killed before its first save: config only
    with RunDirectory(out) as run:
        assert run.begin({"seed": 0}, resume=True) is None  # nothing to continue: step 0
    assert json.loads((out / "config.json").read_text()) == {"seed": 0}


def _cli_subprocess(args: list[str]) -> tuple[int, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "plr_gym.cli", *args],
        capture_output=True, text=True, env=child_env(), timeout=300,
    )  # fmt: skip
    return proc.returncode, proc.stderr


# --------------------------------------------------------------------------------------------------
# CLI errors: exit 2 and one line
# --------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from plr_gym.cli import main

    out = tmp_path_factory.mktemp("finished") / "run"
    assert main(["train", ENV, "--out", str(out), "--timesteps", "128", *TINY]) == 0
    return out


def copy_run(run: Path, tmp_path: Path) -> Path:
    target = tmp_path / "run"
    shutil.copytree(run, target, symlinks=True)
    return target


def one_line_error(code: int, err: str) -> str:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("plr-gym: error: "), err
    return lines[0]


def test_resume_errors_exit_2_with_one_line(
    finished_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = copy_run(finished_run, tmp_path)
    resume = ["train", ENV, "--resume", str(out), *TINY, "--timesteps", "256"]
    line = one_line_error(*run_cli([*resume, "--seed", "1"], capsys)[::2])
    assert "trained with seed=0 (now 1)" in line
    line = one_line_error(*run_cli([*resume, "--learning-rate", "0.1"], capsys)[::2])
    assert "learning_rate=0.0005 (now 0.1)" in line

    config = (out / "config.json").read_text()
    for bad, message in (("[]", "does not hold a JSON object"), ("{", "is not valid JSON")):
        (out / "config.json").write_text(bad)
        assert message in one_line_error(*run_cli(resume, capsys)[::2])
    (out / "config.json").write_text(config)

    gen = checkpoint_files(out)
    weights = gen / "parameters.pt"
    data = bytearray(weights.read_bytes())
    data[100] ^= 0xFF
    weights.write_bytes(bytes(data))
    assert "parameters.pt is corrupt" in one_line_error(*run_cli(resume, capsys)[::2])
    weights.write_bytes(b"")  # truncated, and the manifest too
    (gen / "checkpoint.json").write_text('{"format": "plr-gym-run-checkpoint/1", "timestep": 1e999}')
    assert "timestep must be an int" in one_line_error(*run_cli(resume, capsys)[::2])


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--seed", "99999999999", "expected a seed in [0, 2**32 - 2]"),
        ("--timesteps", "1" + "0" * 30, "expected at most 2**62"),
        ("--save-freq", "0", "expected a positive integer"),
        ("--keep-checkpoints", "0", "expected a positive integer"),
        ("--level-start", str(2**63 - 2), "level ids must fit in int64"),
    ],
)
def test_huge_values_exit_2_with_one_line(
    option: str, value: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_cli(["train", ENV, "--out", str(tmp_path / "r"), *TINY, option, value], capsys)
    assert code == 2 and message in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs POSIX resource limits")
def test_a_save_that_fails_in_training_exits_2_with_one_line(tmp_path: Path) -> None:
    import resource

    def limit() -> None:  # Python ignores SIGXFSZ: a write past the limit fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, resource.RLIM_INFINITY))

    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "plr_gym.cli", "train", ENV, "--out", str(out), "--timesteps", "128", *TINY],
        capture_output=True, text=True, env=child_env(), timeout=600, preexec_fn=limit,
    )  # fmt: skip
    line = one_line_error(proc.returncode, proc.stderr)
    assert "cannot save a checkpoint at step 0" in line and "File too large" in line
    assert RunDirectory(out).current() is None and not [
        p for p in out.iterdir() if p.name.startswith(".plr-gen")
    ]


def test_a_run_without_a_checkpoint_is_not_resumed_from_an_old_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "old"
    out.mkdir()
    (out / "config.json").write_text("{}")
    (out / "model.zip").write_bytes(b"PK")  # a run of an older version: no checkpoint.json
    line = one_line_error(*run_cli(["train", ENV, "--resume", str(out), *TINY], capsys)[::2])
    assert "holds a run without checkpoint.json" in line


def test_a_read_only_run_directory_fails_at_start(finished_run: Path, tmp_path: Path) -> None:
    out = copy_run(finished_run, tmp_path)
    command = [
        sys.executable,
        "-m",
        "plr_gym.cli",
        "train",
        ENV,
        "--resume",
        str(out),
        *TINY,
        "--timesteps",
        "512",
    ]
    if os.geteuid() != 0:
        os.chmod(out, 0o555)
        prefix: list[str] = []
    else:  # root writes through permissions: a read-only bind mount in a private mount namespace
        if (
            shutil.which("unshare") is None
            or subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False).returncode
        ):
            pytest.skip("running as root without unshare -m: no way to make a read-only directory here")
        mount = f'mount --bind -o ro {out} {out} && exec "$@"'
        prefix = ["unshare", "-m", "sh", "-c", mount, "sh"]
    started = time.monotonic()
    proc = subprocess.run([*prefix, *command], capture_output=True, text=True, env=child_env(), timeout=300)
    os.chmod(out, 0o755)
    line = one_line_error(proc.returncode, proc.stderr)
    assert "Read-only file system" in line or "Permission denied" in line
    assert time.monotonic() - started < 60  # before any env or model is built


def test_a_run_stopped_after_its_last_checkpoint_is_finished_by_resume(
    finished_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Killed (or stopped by SIGTERM during the final evaluation) after the checkpoint at --timesteps was
    saved but before evaluation.json was written: the same command with --resume finishes the run."""
    out = copy_run(finished_run, tmp_path)
    (out / "evaluation.json").unlink()
    rows = eval_steps(out)
    code, _, err = run_cli(["train", ENV, "--resume", str(out), *TINY, "--timesteps", "128"], capsys)
    assert code == 0, err
    result = json.loads((out / "evaluation.json").read_text())
    assert result["timesteps"] == 128 == checkpoint_step(out) == zip_timesteps(out / "model.zip")
    assert sorted(int(k) for k in result["returns"]) == list(range(1000, 1004))
    assert eval_steps(out) == rows  # the evaluation at step 128 is logged once
    code, _, err = run_cli(["train", ENV, "--resume", str(out), *TINY, "--timesteps", "128"], capsys)
    assert code == 0 and json.loads((out / "evaluation.json").read_text()) == result  # finished: no-op


def test_resume_may_switch_between_dummy_and_subproc_envs(
    finished_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--subproc`` may change on resume (docs/cli.md); it sets ``vec_env``, which must not refuse it."""
    out = copy_run(finished_run, tmp_path)
    (out / "evaluation.json").unlink()  # resume only checks, restores and evaluates (the run has its steps)
    resume = ["train", ENV, "--resume", str(out), *TINY, "--timesteps", "128"]
    code, _, err = run_cli([*resume, "--subproc"], capsys)
    assert code == 0, err
    assert json.loads((out / "config.json").read_text())["vec_env"] == "subproc"
    line = one_line_error(*run_cli([*resume, "--seed", "3"], capsys)[::2])  # other options still count
    assert "trained with seed=0 (now 3)" in line


def test_a_resumed_run_keeps_the_evaluation_schedule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Resumed from a checkpoint between two evaluations, the run evaluates at the steps the uninterrupted
    run does (``merge_seeds`` averages seeds only at common steps)."""
    out = tmp_path / "run"
    command = ["train", ENV, "--out", str(out), *TINY, "--timesteps", "384", "--eval-freq", "256"]
    code, _, err = run_cli([*command, "--save-freq", "128", "--keep-checkpoints", "4"], capsys)
    assert code == 0, err
    assert eval_steps(out) == [0, 256, 384]  # the uninterrupted run
    older = next(g for g in RunDirectory(out).checkpoints() if checkpoint_step(g) == 128)
    os.unlink(out / CURRENT_LINK)
    os.symlink(older.name, out / CURRENT_LINK)  # as if killed after the checkpoint at step 128
    code, _, err = run_cli([*command, "--resume"], capsys)
    assert code == 0, err
    assert eval_steps(out) == [0, 256, 384]


# --------------------------------------------------------------------------------------------------
# issue 34: faults (each test failed before its fix)
# --------------------------------------------------------------------------------------------------
def _copy_without_links(run: Path, tmp_path: Path) -> Path:
    """Copy a run directory as a tool that skips symbolic links does (``.plr-current`` is lost)."""
    target = tmp_path / "run"
    shutil.copytree(run, target, ignore=lambda d, names: [n for n in names if os.path.islink(Path(d, n))])
    return target


def test_n1_a_missing_current_link_resumes_from_the_newest_verified_generation(
    finished_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _copy_without_links(finished_run, tmp_path)
    assert not os.path.lexists(out / CURRENT_LINK) and len(RunDirectory(out).checkpoints()) == 2
    assert RunDirectory(out).current().timestep == 128  # type: ignore[union-attr]  # the newest: step 128
    # the run is finished: nothing to do, but the links are back (plr-gym evaluate reads RUN/model.zip)
    code, _, err = run_cli(["train", ENV, "--resume", str(out), *TINY, "--timesteps", "128"], capsys)
    assert code == 0, err
    assert zip_timesteps(out / "model.zip") == checkpoint_step(out) == 128
    assert len(RunDirectory(out).checkpoints()) == 2
    code, _, err = run_cli(["train", ENV, "--resume", str(out), *TINY, "--timesteps", "256"], capsys)
    assert code == 0, err
    assert json.loads((out / "config.json").read_text())["resumed_at"] == [128]  # not a restart at 0
    assert checkpoint_step(out) == 256 and eval_steps(out)[0] == 0
    assert_increasing(eval_steps(out))


def test_n1_without_the_link_a_corrupt_newest_generation_falls_back_and_none_is_ever_deleted(
    tmp_path: Path,
) -> None:
    with RunDirectory(tmp_path, keep=3) as run:
        model, plr = build()
        model.learn(128, callback=[plr, RunCheckpointCallback(run, save_freq=64, plr_callback=plr)])
    gens = RunDirectory(tmp_path).checkpoints()
    assert [checkpoint_step(g) for g in gens] == [0, 64, 128]
    os.unlink(tmp_path / CURRENT_LINK)
    (gens[-1] / "rng.npz").write_bytes(b"torn")  # the newest no longer verifies
    assert RunDirectory(tmp_path).current().path == gens[1]  # type: ignore[union-attr]
    for gen in gens[:2]:
        (gen / "state.json").write_text("{}")  # now none verifies
    run = RunDirectory(tmp_path)
    with pytest.raises(RunDirectoryError, match=r"no \.plr-current link and none of its 3 checkpoint"):
        run.begin({"seed": 0}, resume=True)
    assert RunDirectory(tmp_path).checkpoints() == gens and not run.locked  # nothing deleted


def test_n1_pruning_never_deletes_the_verified_generation_a_resume_fell_back_to(tmp_path: Path) -> None:
    with RunDirectory(tmp_path, keep=2) as run:
        run.write_config({"seed": 0})
        model, plr = build()
        model.learn(128, callback=[plr, RunCheckpointCallback(run, save_freq=64, plr_callback=plr)])
    good, torn = RunDirectory(tmp_path).checkpoints()
    assert [checkpoint_step(good), checkpoint_step(torn)] == [64, 128]
    os.unlink(tmp_path / CURRENT_LINK)
    (torn / "rng.npz").write_bytes(b"torn")  # the newest no longer verifies (its manifest is intact)
    run = RunDirectory(tmp_path, keep=2)
    assert run.begin({"seed": 0}, resume=True).path == good  # type: ignore[union-attr]
    try:
        model.learn(64, reset_num_timesteps=False, callback=plr)
        new = run.save(model, plr_callback=plr).path
    finally:
        run.release()
    # keep=2: the new generation and the newest *verified* older one; the newer one the resume passed over
    # (it has a manifest) is never pruned either: it may be intact and unreadable to this run (issue 43, M2)
    assert RunDirectory(tmp_path).checkpoints() == [good, torn, new] and checkpoint_step(good) == 64
    os.unlink(tmp_path / CURRENT_LINK)
    (new / "rng.npz").write_bytes(b"torn")  # should the new one be lost too, resume still has a checkpoint
    assert RunDirectory(tmp_path).current().path == good  # type: ignore[union-attr]


def test_the_generation_a_resume_verified_is_not_hashed_again_by_the_next_save(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with RunDirectory(tmp_path, keep=2) as run:
        run.write_config({"seed": 0})
        model, plr = build()
        model.learn(64, callback=[plr, RunCheckpointCallback(run, save_freq=64, plr_callback=plr)])
    old = RunDirectory(tmp_path).checkpoints()[-1]  # step 64 (step 0 is the other)
    run = RunDirectory(tmp_path, keep=2)
    assert run.begin({"seed": 0}, resume=True).path == old  # type: ignore[union-attr]  # hashes it once
    hashed: list[Path] = []
    real = manifest_module.sha256
    monkeypatch.setattr(manifest_module, "sha256", lambda path: hashed.append(Path(path)) or real(path))
    try:
        model.learn(64, reset_num_timesteps=False, callback=plr)
        new = run.save(model, plr_callback=plr).path
    finally:
        run.release()
    assert RunDirectory(tmp_path).checkpoints() == [old, new]  # pruning kept it: it verified at the resume
    assert not [p for p in hashed if old in p.parents]  # without reading its files again
    (old / "rng.npz").write_bytes(b"torn")  # a change to its files is seen: it is hashed (and fails) again
    hashed.clear()
    assert not run._verifies(old) and [p for p in hashed if old in p.parents]


LOCK_HOLDER = r"""
import sys
from plr_gym.run import RunDirectory, RunLockedError
try:
    RunDirectory(sys.argv[1]).acquire()
except RunLockedError as exc:
    print("refused:", exc, flush=True)
    sys.exit(3)
print("locked", flush=True)
sys.stdin.read()  # hold the lock until the test closes stdin
"""


def test_n2_deleting_the_lock_file_does_not_let_a_second_writer_in(tmp_path: Path) -> None:
    def start() -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-c", LOCK_HOLDER, str(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True, env=child_env(), cwd=TESTS,
        )  # fmt: skip

    first = start()
    try:
        assert first.stdout is not None and first.stdout.readline().strip() == "locked"
        os.unlink(tmp_path / LOCK_FILE)  # by hand, or by a cleanup script
        second = start()
        out, _ = second.communicate(timeout=120)
        assert second.returncode == 3, out
        assert "in use by another trainer" in out
        with pytest.raises(RunLockedError):  # nor a third, in this process
            RunDirectory(tmp_path).acquire()
    finally:
        first.communicate(timeout=120)
    with RunDirectory(tmp_path) as run:  # the holder is gone: free again
        assert run.locked and (tmp_path / LOCK_FILE).read_text().strip() == str(os.getpid())


# ENOSPC where the issue found it: one write is sent to /dev/full (a real "No space left on device" from the
# kernel) while plr-gym train runs in-process: the write of parameters.pt at the second checkpoint (step
# 128), TensorBoard's event file from its 30th write on (after the checkpoint at step 128; its writer thread
# fails, the main thread reports it), evaluation.json once training is over.
def _inject_disk_full(where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = [0]
    if where == "weights":  # parameters.pt is serialised in memory, then written with one write (issue 43)
        import builtins

        import plr_gym.run.parts as parts

        def open_(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
            if str(file).endswith("parameters.pt") and "w" in mode:
                calls[0] += 1
                if calls[0] == 2:
                    return builtins.open("/dev/full", mode, *args, **kwargs)
            return builtins.open(file, mode, *args, **kwargs)

        monkeypatch.setattr(parts, "open", open_, raising=False)
    elif where == "tensorboard":
        from tensorboard.compat.tensorflow_stub.io.gfile import LocalFileSystem

        real_write = LocalFileSystem._write

        def write(self: Any, filename: Any, content: Any, mode: str) -> Any:
            if b"tfevents" in (filename if isinstance(filename, bytes) else str(filename).encode()):
                calls[0] += 1
                if calls[0] >= 30:
                    return real_write(self, "/dev/full", content, "wb")
            return real_write(self, filename, content, mode)

        monkeypatch.setattr(LocalFileSystem, "_write", write)
    else:
        import contextlib

        import plr_gym.checkpoint

        real_open = plr_gym.checkpoint.atomic_open

        @contextlib.contextmanager
        def atomic_open(path: Any) -> Any:
            if str(path).endswith("evaluation.json"):
                with open("/dev/full", "wb") as full:
                    yield full
                    full.flush()
            else:
                with real_open(path) as f:
                    yield f

        monkeypatch.setattr(plr_gym.checkpoint, "atomic_open", atomic_open)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
@pytest.mark.parametrize("where", ["weights", "tensorboard", "evaluation"])
def test_n3_disk_full_in_the_weights_tensorboard_or_evaluation_exits_2_with_one_line(
    where: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    if where == "tensorboard":
        pytest.importorskip("tensorboard")
    out = tmp_path / "run"
    tiny = [a for a in TINY if a != "--no-tensorboard"] if where == "tensorboard" else TINY
    _inject_disk_full(where, monkeypatch)
    command = ["train", ENV, "--out", str(out), *tiny, "--timesteps", "256", "--save-freq", "128"]
    line = one_line_error(*run_cli(command, capsys)[::2])
    assert "No space left on device" in line, line
    kept = RunDirectory(out).current()
    assert kept is not None and f"at step {kept.timestep} is kept" in line
    assert kept.timestep == {"weights": 0, "tensorboard": 128, "evaluation": 256}[where]
    assert len(RunDirectory(out).checkpoints()) <= DEFAULT_KEEP  # no partial generation left


def test_n5_a_manifest_claiming_more_steps_than_its_files_is_not_finished(
    finished_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = copy_run(finished_run, tmp_path)
    manifest = checkpoint_files(out) / "checkpoint.json"
    data = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**data, "timestep": 10**6}))  # the files still hold step 128
    line = one_line_error(
        *run_cli(["train", ENV, "--resume", str(out), *TINY, "--timesteps", "256"], capsys)[::2]
    )
    assert "state.json says step 128" in line and "1000000" in line
    manifest.write_text(json.dumps(data))
    # evaluation.json of another step: not finished either, the final evaluation is made
    evaluation = json.loads((out / "evaluation.json").read_text())
    (out / "evaluation.json").write_text(json.dumps({**evaluation, "timesteps": 64}))
    code, _, err = run_cli(["train", ENV, "--resume", str(out), *TINY, "--timesteps", "128"], capsys)
    assert code == 0, err
    assert json.loads((out / "evaluation.json").read_text())["timesteps"] == 128


def _scalar_steps(tb: Path) -> list[tuple[str, int]]:
    """Every (tag, step) of every scalar summary in the event files under ``tb``."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    seen = []
    for path in sorted(tb.rglob("events.out.tfevents.*")):
        for event in EventFileLoader(str(path)).Load():
            seen += [(value.tag, int(event.step)) for value in event.summary.value]
    return seen


def test_n6_tensorboard_logs_are_cut_back_to_the_checkpoint_on_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("tensorboard")
    out = tmp_path / "run"
    tiny = [a for a in TINY if a != "--no-tensorboard"]
    command = ["train", ENV, "--out", str(out), *tiny, "--timesteps", "384", "--save-freq", "128"]
    code, _, err = run_cli([*command, "--keep-checkpoints", "4"], capsys)
    assert code == 0, err
    uninterrupted = sorted(set(_scalar_steps(out / "tb")))
    assert max(step for _, step in uninterrupted) == 384
    older = next(g for g in RunDirectory(out).checkpoints() if checkpoint_step(g) == 128)
    os.unlink(out / CURRENT_LINK)
    os.symlink(older.name, out / CURRENT_LINK)  # as if killed after the checkpoint at step 128
    with next((out / "tb").rglob("events.out.tfevents.*")).open("ab") as f:
        f.write(b"\x20\x00\x00")  # and in the middle of writing an event
    code, _, err = run_cli([*command, "--resume"], capsys)
    assert code == 0, err
    resumed = _scalar_steps(out / "tb")
    assert len(resumed) == len(set(resumed)), "a (tag, step) logged twice: duplicated curves"
    assert {step for _, step in resumed} == {step for _, step in uninterrupted}


def test_n7_resumed_at_is_not_written_when_the_resume_fails(finished_run: Path, tmp_path: Path) -> None:
    out = copy_run(finished_run, tmp_path)
    run = RunDirectory(out)
    config = run.read_config()
    assert config is not None and "resumed_at" not in config
    assert run.begin(config, resume=True) is not None
    try:
        other, other_plr = build(net=(8,))  # restore refuses it
        with pytest.raises(RunDirectoryError, match=r"parameters\.pt: the saved network has other layers"):
            run.restore(other, plr_callback=other_plr)
    finally:
        run.release()
    assert run.read_config() == config  # no resumed_at: the run was not resumed


def test_n8_a_run_copied_with_links_dereferenced_resumes_or_gets_a_correct_message(
    finished_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    shutil.copytree(finished_run, out, symlinks=False)  # cp -rL: every link becomes a copy
    assert (out / CURRENT_LINK).is_dir() and not (out / CURRENT_LINK).is_symlink()
    changed = tmp_path / "changed"
    shutil.copytree(out, changed)
    (changed / "curriculum.npz").write_bytes(b"edited")  # a copy that is not the generation's any more

    # the copies are identical to the generation .plr-current held: its links come back, and it resumes
    code, _, err = run_cli(["train", ENV, "--resume", str(out), *TINY, "--timesteps", "256"], capsys)
    assert code == 0, err
    assert all((out / name).is_symlink() for name in (CURRENT_LINK, "checkpoint.json", "model.zip", "plr"))
    assert json.loads((out / "config.json").read_text())["resumed_at"] == [128]
    assert checkpoint_step(out) == zip_timesteps(out / "model.zip") == 256

    line = one_line_error(
        *run_cli(["train", ENV, "--resume", str(changed), *TINY, "--timesteps", "256"], capsys)[::2]
    )
    assert "links dereferenced" in line and "cp -a" in line, line
    assert len(RunDirectory(changed).checkpoints()) == 2 and (changed / CURRENT_LINK).is_dir()  # untouched


def test_d9_huge_eval_levels_and_a_one_step_batch_exit_2_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["train", ENV, "--out", str(tmp_path / "r"), *TINY, "--timesteps", "64"]
    for levels in ("18446744073709551615", "18446744073709551610:18446744073709551615"):
        code, _, err = run_cli([*base, "--eval-levels", levels], capsys)  # argparse's usage and error
        assert code == 2 and "argument --eval-levels: levels must be in [0, 2**63 - 1]" in err, err
        assert "Traceback" not in err
    tiny = [*base, "--n-envs", "1", "--n-steps", "1", "--batch-size", "1"]
    line = one_line_error(*run_cli(tiny, capsys)[::2])
    assert "--batch-size must be at least 2, got 1" in line
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--out", ""], "--out must name a directory"),
        (["--env-kwarg", "size=3"], "--env-kwarg size=3: MiniGrid-Empty-5x5-v0 fixes size=5"),
        (["--env-kwarg", "max_steps=2O"], "--env-kwarg max_steps=2O: the value is not valid JSON"),
        (
            ["--env-kwarg", "max_steps=20", "--env-kwarg", "max_steps=30"],
            "--env-kwarg max_steps is given twice",
        ),
        (["--env-kwarg", "max steps=20"], "--env-kwarg: 'max steps' is not a keyword name"),
    ],
)
def test_d13_an_empty_out_and_malformed_env_kwargs_exit_2_with_one_line(
    args: list[str],
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    tiny = [a for a in TINY if a not in ("--env-kwarg", "max_steps=20")]
    argv = ["train", ENV, *tiny, "--timesteps", "64", *args]
    if "--out" not in args:
        argv += ["--out", "r"]
    line = one_line_error(*run_cli(argv, capsys)[::2])
    assert message in line, line
    assert not any(tmp_path.iterdir())  # refused before anything is written (no runs/run, no r)
