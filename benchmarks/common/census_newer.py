"""The bad-input census's newer surfaces (issue 43): prompt and verl checkpoints, the remote source's refills,
the legacy ``procgen-<game>-v0`` ids, subnormal temperatures, the run directory (torn first checkpoints,
unreadable generations, pruning, a full disk) and the command line (``--save-minutes``, ``--temperature``,
``eval.csv`` with a torn last row).

Imported by ``bad_input_census.py``, which passes its ``attempt`` (one case, classified) to :func:`run`.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import reliability_objects as ro
from plr_gym import LevelBuffer, LevelSampler
from plr_gym.checkpoint import load_npz, save_npz
from plr_gym.prompts import PromptCurriculum

Attempt = Callable[..., None]
#: Inputs accepted on purpose (each documented where its argument is): why.
ON_PURPOSE = {
    "game": "Gymnasium merges the caller's kwargs over the id's (as for every registered env): game= picks "
    "the game; plr-gym train --env-kwarg refuses a keyword its --env fixes",
    "retry_timeout": "math.inf: retry for ever while the actor restarts (RemoteLevelSource's docstring)",
    "push_every": "a very large push_every pushes only at end_rollout and flush (its docstring)",
    "torn": "a run killed inside its first checkpoint starts again from step 0 on --resume "
    "(RunDirectory.begin); the torn generation is kept aside as .plr-torn-N, named in a RunDirectoryWarning",
    "corrupt": "without .plr-current a resume passes over a newer generation that is corrupt (it cannot be "
    "used) to the newest that verifies, naming it in a RunDirectoryWarning (a 'note:' line of plr-gym train)",
}
TINY = 1e-320  # a subnormal: 1/x overflows to inf


def run(attempt: Attempt, tmp: Path) -> None:
    sampler_census(attempt)
    prompt_census(attempt, tmp)
    verl_census(attempt)
    remote_census(attempt)
    legacy_id_census(attempt)
    replay_space_census(attempt)
    cli_census(attempt)
    run_directory_census(attempt, tmp)


# ---------------------------------------------------------------------------------- the sampler
def sampler_census(attempt: Attempt) -> None:
    for name in ("temperature", "temperature_end", "staleness_temperature"):
        attempt(
            "LevelSampler",
            f"{name}={TINY!r}",
            lambda n=name: LevelSampler(range(4), **{n: TINY}),
            name,
        )
    attempt("LevelBuffer", f"temperature={TINY!r}", lambda: LevelBuffer(4, temperature=TINY), "temperature")


# ---------------------------------------------------------------------------------- prompts
def _curriculum(rounds: int) -> PromptCurriculum:
    cur = PromptCurriculum(12, seed=0)
    rng = np.random.default_rng(1)
    for _ in range(rounds):
        ids = np.repeat(cur.next_prompts(3), 4)
        cur.observe(ids, rng.random(ids.size) < 0.5)
    return cur


def prompt_census(attempt: Attempt, tmp: Path) -> None:
    options: dict[str, list[Any]] = {
        "num_prompts": [0, 1.5, True, "3", 10**15],
        "method": ["nope", None],
        "seed": [-1, 1.5, True],
        "replay_prob": [-0.1, 1.5, math.nan],
        "staleness_coef": [-0.1, 1.5, math.inf],
        "success_rate_alpha": [0.0, 1.5, math.nan],
        "spread": ["nope"],
        "reward_range": [(1, 0), (0, math.inf), "ab", (0, 1, 2)],
        "success_threshold": [math.nan, 2.0],
        "prior": [(0, 1), (math.inf, 1), [1, 1, 1]],
        "posterior_decay": [0.0, 1.5],
        "estimate": ["nope"],
        "evidence_half_life": [0.0, -1.0, math.inf, TINY],
        "ageing": ["nope"],
    }
    for option, values in options.items():
        for value in values:
            kw = {"num_prompts": 12, option: value}
            if option in ("success_threshold",):
                kw["reward_range"] = (0.0, 1.0)
            attempt("PromptCurriculum", f"{option}={value!r}", lambda k=kw: PromptCurriculum(**k), option)
    cur = _curriculum(3)
    for name, fn, keyword in [
        ("next_prompts(0)", lambda: cur.next_prompts(0), "k"),
        ("next_prompts(10**15)", lambda: cur.next_prompts(10**15), "n"),
        ("observe(ids out of range)", lambda: cur.observe([99], [1.0]), "prompt_ids"),
        ("observe(float ids)", lambda: cur.observe([1.5], [1.0]), "prompt_ids"),
        ("observe(rewards NaN)", lambda: cur.observe([1], [math.nan]), "rewards"),
        ("observe(rewards of another length)", lambda: cur.observe([1, 2], [1.0]), "rewards"),
        ("observe(groups sharing prompts)", lambda: cur.observe([1, 2], [1.0, 0.0], groups=[0, 0]), "groups"),
    ]:
        before = cur.state_dict()
        attempt("PromptCurriculum", name, fn, keyword, lambda b=before: ro.same(cur.state_dict(), b))
    _prompt_files(attempt, tmp)


def _edited(src: Path, dst: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    arrays = load_npz(src)
    meta = json.loads(str(arrays["meta"]))
    edit(meta)
    save_npz(dst, {**arrays, "meta": np.array(json.dumps(meta))})
    return dst


def _prompt_files(attempt: Attempt, tmp: Path) -> None:
    good = tmp / "prompts_good.npz"
    _curriculum(5).save(good, extra={"step": 7})
    crafted: dict[str, Callable[[dict[str, Any]], None]] = {
        "extra a list": lambda m: m.__setitem__("extra", [1, 2]),
        "extra a string": lambda m: m.__setitem__("extra", "ab"),
        "meta not an object": lambda m: (m.clear(), m.__setitem__("state", [])),
        "num_batches negative": lambda m: m["state"].__setitem__("num_batches", -1),
        "clock a float": lambda m: m["state"].__setitem__("clock", 2.5),
        "config of another curriculum": lambda m: m["state"]["config"].__setitem__("method", "thompson"),
        "version 2": lambda m: m["state"].__setitem__("version", 2),
    }
    for name, edit in crafted.items():
        path = _edited(good, tmp / "prompts_crafted.npz", edit)
        live = _curriculum(2)
        before = live.state_dict()
        attempt(
            "PromptCurriculum.load_from",
            name,
            lambda lv=live, p=path: lv.load_from(p),
            "prompts_crafted.npz",
            lambda lv=live, b=before: ro.same(lv.state_dict(), b),
        )
    data = good.read_bytes()
    start = data.find(b"\x93NUMPY")
    rng = np.random.default_rng(0)
    for bit in sorted({528, 636, *rng.integers(start * 8, (start + 128) * 8, size=10).tolist()}):
        flipped = bytearray(data)
        flipped[bit // 8] ^= 1 << (bit % 8)
        path = tmp / "prompts_flip.npz"
        path.write_bytes(bytes(flipped))
        live = _curriculum(2)
        before = live.state_dict()
        attempt(
            "PromptCurriculum.load_from (bit flip)",
            f"npy header bit {bit}",
            lambda lv=live, p=path: _only_value_error(lv.load_from, p),
            "prompts_flip.npz",
            lambda lv=live, b=before: ro.same(lv.state_dict(), b),
        )


def _only_value_error(load: Callable[[Path], Any], path: Path) -> None:
    try:
        load(path)
    except ValueError:
        raise
    except Exception as exc:  # documented: ValueError naming the file
        raise RuntimeError(f"not a ValueError: {type(exc).__name__}: {exc}") from exc


# ---------------------------------------------------------------------------------- verl
def verl_census(attempt: Attempt) -> None:
    try:
        from plr_gym.verl import _DrawLedger
    except ImportError:  # verl is not installed on this stack
        return
    ledger = _DrawLedger(_curriculum(2))
    ledger.draw(3)
    position, serial = ledger.take()
    ledger.record(serial, position, [1.0, 0.0])
    state = ledger.state_dict()
    for name, edit, keyword in [
        ("next_serial a float", {"next_serial": 2.7}, "next_serial"),
        ("next_serial a bool", {"next_serial": True}, "next_serial"),
        ("groups_without_outcome negative", {"groups_without_outcome": -1}, "groups_without_outcome"),
        ("outcome draw beyond next_serial", {"outcomes": [[5, 0, [1.0]]]}, "next_serial"),
        ("outcome draw twice", {"outcomes": [[0, 0, [1.0]], [0, 1, [1.0]]]}, "distinct"),
        ("outcome prompt out of range", {"outcomes": [[0, 99, [1.0]]]}, "prompt"),
        ("outcome rewards NaN", {"outcomes": [[0, 1, [math.nan]]]}, "rewards"),
        ("outcomes not a list", {"outcomes": "x"}, "outcomes"),
        ("missing next_serial", {"next_serial": None}, "next_serial"),
    ]:
        live = _DrawLedger(_curriculum(2))
        live.draw(2)
        before = (list(live.ready), dict(live.outstanding), live.next_serial, repr(live.outcomes))

        def same(lv: Any = live, b: Any = before) -> bool:
            return (list(lv.ready), dict(lv.outstanding), lv.next_serial, repr(lv.outcomes)) == b

        attempt(
            "verl ledger (V1 dataset state)",
            name,
            lambda lv=live, e=edit: lv.load_state_dict({**state, **e}),
            keyword,
            same,
        )


# ---------------------------------------------------------------------------------- the remote source
def remote_census(attempt: Attempt) -> None:
    try:
        from plr_gym.distributed import LevelSourceActor, RemoteLevelSource
    except ImportError:  # Ray is not installed on this stack
        return
    for option, values in {
        "prefetch": [-1, 1.5, True, 10**12],
        "prefetch_seconds": [-1.0, math.inf, math.nan, True],
        "min_refill": [-1, 10**12],
        "push_every": [0, 2.5],
        "retry_timeout": [0, -1.0, math.nan, True],
    }.items():
        for value in values:
            attempt(
                "RemoteLevelSource",
                f"{option}={value!r}",
                lambda o=option, v=value: RemoteLevelSource("x", **{o: v}),
                option,
            )
    for option, value in [("retry_timeout", math.inf), ("push_every", 10**18)]:
        attempt(
            "RemoteLevelSource",
            f"{option}={value!r}",
            lambda o=option, v=value: RemoteLevelSource("x", **{o: v}),
            option,
            on_purpose=ON_PURPOSE[option],
        )
    actor = LevelSourceActor(LevelSampler(range(8), seed=0))
    for name, fn, keyword in [
        ("draw(n=10**15) (a refill beyond memory)", lambda: actor.draw(10**15), "n"),
        ("draw(n=-1)", lambda: actor.draw(-1), "n"),
        ("draw(n=2.0)", lambda: actor.draw(2.0), "n"),
        ("plan(envs=[1.5])", lambda: actor.plan([1.5]), "envs"),
        ("plan(envs=[-1])", lambda: actor.plan([-1]), "envs"),
    ]:
        before = actor.source.state_dict()
        attempt(
            "LevelSourceActor (refills)",
            name,
            fn,
            keyword,
            lambda b=before: ro.same(actor.source.state_dict(), b),
        )


# ---------------------------------------------------------------------------------- legacy ids
def legacy_id_census(attempt: Attempt) -> None:
    import gymnasium as gym

    try:
        import plr_gym.envs  # noqa: F401  (registers the ids)

        gym.spec("procgen-coinrun-v0")
    except Exception:  # no Procgen build on this stack
        return
    for kw, keyword in [
        ({"num_levels": -1}, "num_levels"),
        ({"num_levels": 1.5}, "num_levels"),
        ({"start_level": 2**31}, "start_level"),
        ({"distribution_mode": "nope"}, "distribution_mode"),
        ({"use_backgrounds": "yes"}, "use_backgrounds"),
        ({"render_mode": "nope"}, "render_mode"),
    ]:
        attempt(
            "procgen-<game>-v0 (legacy id)",
            f"gym.make('procgen-coinrun-v0', {', '.join(f'{k}={v!r}' for k, v in kw.items())})",
            lambda k=kw: gym.make("procgen-coinrun-v0", **k).close(),
            keyword,
        )
    attempt(
        "procgen-<game>-v0 (legacy id)",
        "gym.make('procgen-coinrun-v0', game='bigfish')",
        lambda: gym.make("procgen-coinrun-v0", game="bigfish").close(),
        "game",
        on_purpose=ON_PURPOSE["game"],
    )


# ---------------------------------------------------------------------------------- replay spaces
def replay_space_census(attempt: Attempt) -> None:
    from gymnasium import spaces

    from plr_gym import PrioritizedReplayBuffer
    from plr_gym.replay import PrioritizedDictReplayBuffer

    box = spaces.Box(0, 1, (2,))
    for name, cls, space in [
        ("Dict with a nested Dict", PrioritizedDictReplayBuffer, spaces.Dict({"a": spaces.Dict({"b": box})})),
        ("Dict with a Tuple", PrioritizedDictReplayBuffer, spaces.Dict({"t": spaces.Tuple((box,))})),
        ("Dict with a Text", PrioritizedDictReplayBuffer, spaces.Dict({"t": spaces.Text(4)})),
        ("Tuple", PrioritizedReplayBuffer, spaces.Tuple((box,))),
        ("Sequence", PrioritizedReplayBuffer, spaces.Sequence(box)),
    ]:
        attempt(
            "PrioritizedReplayBuffer (observation spaces)",
            f"{cls.__name__}({name})",
            lambda c=cls, sp=space: c(8, sp, spaces.Discrete(2), device="cpu"),
            "observation_space",
        )


# ---------------------------------------------------------------------------------- the command line
def _parse(argv: list[str]) -> None:
    """``plr-gym`` argv through the parser only (nothing is run or written); argparse's exit 2 as a
    ValueError with its error line."""
    import contextlib
    import io

    from plr_gym.cli.main import build_parser

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            build_parser().parse_args(argv)
    except SystemExit as exc:
        if exc.code == 2:
            raise ValueError(err.getvalue().strip().splitlines()[-1]) from None
        raise


def cli_census(attempt: Attempt) -> None:
    base = ["train", "MiniGrid-Empty-5x5-v0", "--out", "/nonexistent/run"]
    for option, values in {
        "--save-minutes": ["1e307", "inf", "nan", "0", "-1"],
        "--temperature": ["1e-320", "0", "nan"],
        "--staleness-temperature": ["5e-324"],
        "--temperature-end": ["1e-320"],
        "--keep-checkpoints": ["0", "1.5"],
        "--save-freq": ["0", str(2**63)],
        "--seed": ["-1", str(2**40)],
        "--eval-levels": ["18446744073709551615", "5:5"],
    }.items():
        for value in values:
            attempt(
                "plr-gym train (parser)",
                f"{option} {value}",
                lambda o=option, v=value: _parse([*base, o, v]),
                option,
            )


# ---------------------------------------------------------------------------------- the run directory
def _generation(run: Path, n: int, manifest: str | None) -> Path:
    gen = run / f".plr-gen-{n:08d}"
    gen.mkdir(parents=True)
    (gen / "model.zip").write_bytes(b"x")
    if manifest is not None:
        (gen / "checkpoint.json").write_text(manifest)
    return gen


def _real_run(tmp: Path) -> Path:
    """A run directory with checkpoints at steps 0 and 64, without its .plr-current link."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
    from plr_gym import RunCheckpointCallback, RunDirectory
    from plr_gym.checkpoint import CURRENT_LINK
    from test_run_directory import build

    out = tmp / "census_run"
    with RunDirectory(out, keep=3) as run:
        run.write_config({"seed": 0})
        model, plr = build()
        model.learn(64, callback=[plr, RunCheckpointCallback(run, save_freq=64, plr_callback=plr)])
    os.unlink(out / CURRENT_LINK)
    return out


def run_directory_census(attempt: Attempt, tmp: Path) -> None:
    import shutil
    import warnings

    from plr_gym import RunCheckpointCallback, RunDirectory
    from plr_gym.checkpoint import commit_generation

    for name, kw in [("keep=0", {"keep": 0}), ("keep=1.5", {"keep": 1.5}), ("keep=True", {"keep": True})]:
        attempt("RunDirectory", name, lambda k=kw: RunDirectory(tmp / "census_kw", **k), "keep")
    attempt("RunDirectory", "logs=['../x']", lambda: RunDirectory(tmp / "census_kw", logs=["../x"]), "logs")
    for value in (math.inf, math.nan, 0.0, -1.0, True):
        attempt(
            "RunCheckpointCallback",
            f"save_seconds={value!r}",
            lambda v=value: RunCheckpointCallback(RunDirectory(tmp / "census_kw"), 64, save_seconds=v),
            "save_seconds",
        )
    attempt(
        "pruning (commit_generation)",
        "keep=0",
        lambda: commit_generation(tmp / "census_kw", tmp / "census_kw" / ".plr-gen-1", [], keep=0),
        "keep",
    )
    # torn and corrupt generations without .plr-current
    torn = tmp / "census_torn"
    torn.mkdir()
    (torn / "config.json").write_text("{}")
    _generation(torn, 1, None)

    def resume_torn() -> None:
        with RunDirectory(torn) as run, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                ckpt = run.begin({}, resume=True)
            except ValueError as exc:  # a refusal here is the bug (M1): not a clear error
                raise AssertionError(f"refused a run that never completed a checkpoint: {exc}") from None
            if ckpt is not None or not (torn / ".plr-torn-00000001").is_dir():
                raise AssertionError("a torn first checkpoint must restart at step 0, kept aside")

    attempt(
        "RunDirectory (resume)",
        "only a torn first generation",
        resume_torn,
        "",
        on_purpose=ON_PURPOSE["torn"],
    )
    damaged = tmp / "census_damaged"
    _generation(damaged, 1, None)
    _generation(damaged, 2, "{")  # a manifest that is not JSON: a completed checkpoint, damaged
    (damaged / "config.json").write_text("{}")

    def resume_damaged() -> None:
        with RunDirectory(damaged) as run:
            run.begin({}, resume=True)

    attempt("RunDirectory (resume)", "a torn and a damaged generation", resume_damaged, "checkpoint.json")
    real = _real_run(tmp)
    newest = sorted(real.glob(".plr-gen-*"))[-1]
    unreadable = tmp / "census_unreadable"
    shutil.copytree(real, unreadable, symlinks=True)
    import plr_gym.run.manifest as manifest_module

    real_sha = manifest_module.sha256

    def sha256(path: Path) -> str:  # an intact file this trainer may not read (another user's)
        if path.name == "parameters.pt" and path.parent.name == newest.name:
            raise PermissionError(13, "Permission denied", str(path))
        return real_sha(path)

    def resume_unreadable() -> None:
        manifest_module.sha256 = sha256
        try:
            with RunDirectory(unreadable) as run:
                run.begin({"seed": 0}, resume=True)
        finally:
            manifest_module.sha256 = real_sha

    attempt(
        "RunDirectory (resume)", "newest generation unreadable, no link", resume_unreadable, "parameters.pt"
    )
    corrupt = tmp / "census_corrupt"
    shutil.copytree(real, corrupt, symlinks=True)
    with (corrupt / newest.name / "rng.npz").open("r+b") as f:
        f.write(b"torn")

    def resume_corrupt() -> None:
        with RunDirectory(corrupt) as run, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ckpt = run.begin({"seed": 0}, resume=True)
            if (
                ckpt is None
                or ckpt.timestep != 0
                or not any("not a checkpoint" in str(w.message) for w in caught)
            ):
                raise AssertionError("the fallback must be named")
            if newest.name not in {p.name for p in run._generations.protected}:
                raise AssertionError("the newer generation must be kept from pruning")

    attempt(
        "RunDirectory (resume)",
        "newest generation corrupt, no link",
        resume_corrupt,
        "",
        on_purpose=ON_PURPOSE["corrupt"],
    )
