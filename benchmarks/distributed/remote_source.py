"""A level source shared by many processes over Ray: plr_gym's remote source next to Syllabus's curriculum.

Both systems host one PLR sampler in a Ray actor (``N`` levels, every level already scored, so each draw
replays) and are driven by ``C`` client processes (Ray actors), each simulating an env runner with
``--envs`` envs whose episodes have no env steps: only the curriculum's cost is measured.

- **Levels served/s**: each client loops over its envs; one *reset* is the curriculum work an env does
  when an episode ends: report the finished episode's score and get the next level. plr_gym:
  ``RemoteLevelSource.update_batch`` + ``next_levels`` (queue of ``--prefetch`` levels per env, refilled
  without blocking; scores pushed every ``--push-every`` episodes). Syllabus: what its
  ``RayGymnasiumSyncWrapper.reset`` does, a non-blocking progress message and a blocking
  ``ray.get(curriculum.sample.remote())``. Levels served/s = resets of all clients / seconds.
- **Per-reset latency** (median, p99, mean = amortized cost): the time one reset takes, seen by the env.
- **Scores absorbed/s**: every client reports scores as fast as it can for ``--seconds``, then waits
  until the actor has applied all of them; rate = scores the actor applied / (start → last client done).

Syllabus specifics (``syllabus-rl`` 0.7): the actor is ``RayCurriculumWrapper`` made by
``make_ray_curriculum`` around a ``DirectPrioritizedLevelReplay`` with the PLR paper's settings (as in
``sampler_speed.py``). Its env wrapper ``RayGymnasiumSyncWrapper.reset`` first calls
``curriculum.update.remote(...)``, which raises ``AttributeError`` (the actor has no ``update`` method),
so the benchmark sends the message the wrapper means to send through the method the actor has,
``update_task_progress.remote(task, progress)``, then the blocking ``sample``. That actor exposes no method
that stores a PLR *score* from an env process (the curriculum's ``update(tasks, scores, dones)`` is not an
actor method), so its "scores absorbed" column counts these per-episode progress messages, which do not
change the replay distribution.

Usage::

    python benchmarks/distributed/remote_source.py                # C = 1, 8, 32, 128, 4 s per run
    python benchmarks/distributed/remote_source.py --quick        # C = 1, 2, 0.5 s per run (the test suite)
    python benchmarks/distributed/remote_source.py --clients 1,8,32 --no-syllabus
    python benchmarks/distributed/remote_source.py --clients 32x4   # 128 clients: 32 processes × 4 threads
"""

from __future__ import annotations

import argparse
import copy
import datetime
import importlib.metadata
import os
import platform
import shlex
import sys
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sampler"))  # sampler_speed
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # benchmarks/common: _provenance
import sampler_speed
from _provenance import cpu_model, git_commit, load_average

ROOT = Path(__file__).resolve().parents[2]


def _library_src() -> Path:
    """``--src DIR`` (read before the imports below): benchmark the plr_gym in ``DIR`` (e.g. an older
    commit's ``src``, for before/after runs), else this checkout's."""
    for k, arg in enumerate(sys.argv):
        if arg == "--src" and k + 1 < len(sys.argv):
            return Path(sys.argv[k + 1]).resolve()
        if arg.startswith("--src="):
            return Path(arg.split("=", 1)[1]).resolve()
    return ROOT / "src"


SRC = _library_src()
sys.path.insert(0, str(SRC))  # benchmark the library in this checkout (or --src)

import ray  # noqa: E402

from plr_gym import LevelSampler  # noqa: E402
from plr_gym.distributed import RemoteLevelSource, host_level_source  # noqa: E402

OURS = "plr_gym RemoteLevelSource"
THEIRS = "Syllabus RayCurriculumWrapper"
# The PLR paper's Procgen setting, spelled for each library: sampler_speed.py's, without the argument of
# Syllabus's bare TaskSampler that its curriculum sets itself (num_actors).
OUR_KWARGS: dict[str, Any] = dict(sampler_speed.OUR_KWARGS)
SYLLABUS_KWARGS: dict[str, Any] = {
    k: v for k, v in sampler_speed.SYLLABUS_KWARGS.items() if k != "num_actors"
}
MAX_LATENCIES = 100_000  # per client and run


# --------------------------------------------------------------------------------------------------
# clients
# --------------------------------------------------------------------------------------------------
@ray.remote(num_cpus=0)
class Client:
    """One client process: ``threads`` env runners (one thread each, ``n_envs`` envs each) whose episodes
    end at once. With ``threads`` > 1 each thread has its own ``RemoteLevelSource`` (a separate client of
    the actor, as a separate process would be)."""

    def __init__(self, n_envs: int, threads: int = 1) -> None:
        self.n_envs = n_envs
        self.threads = threads
        self.rng = np.random.default_rng(os.getpid())

    def pid(self) -> int:
        return os.getpid()

    def rss_mb(self) -> float:
        with open("/proc/self/status", encoding="utf-8") as f:
            for line in f:
                if line.startswith("VmRSS"):
                    return int(line.split()[1]) / 1024
        return float("nan")

    # ------------------------------------------------------------------ setup (not timed)
    def prepare(self, system: str, target: Any) -> float:
        """Connect to the host and get each env's first level (imports, queue fill); returns the seconds."""
        t0 = time.perf_counter()
        if system == OURS:
            # a RemoteLevelSource, unpickled here: this process's own client; each copy is another client
            self.sources: list[Any] = [target] + [copy.copy(target) for _ in range(self.threads - 1)]
            self.currents = [
                [int(x) for x in source.next_levels(np.arange(self.n_envs))] for source in self.sources
            ]
        else:
            self.curriculum: Any = ray.get_actor(target)
            self.currents = [
                [int(ray.get(self.curriculum.sample.remote())[0]) for _ in range(self.n_envs)]
                for _ in range(self.threads)
            ]
        return time.perf_counter() - t0

    def _in_threads(self, job: Callable[[int], dict[str, Any]]) -> list[dict[str, Any]]:
        """``job(k)`` for every thread ``k`` (in this thread when there is one)."""
        if self.threads == 1:
            return [job(0)]
        results: list[dict[str, Any]] = [{} for _ in range(self.threads)]

        def run(k: int) -> None:
            results[k] = job(k)

        workers = [threading.Thread(target=run, args=(k,)) for k in range(self.threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        return results

    # ------------------------------------------------------------------ timed
    def resets(self, system: str, start: float, seconds: float) -> dict[str, Any]:
        """Episodes end back to back on the envs in turn: report the score, get the next level."""
        late = time.time() - start
        _wait_until(start)
        end = start + seconds
        cpu = time.process_time()
        out = self._in_threads(lambda k: self._resets(system, k, end))
        cpu = time.process_time() - cpu  # this process, all its threads (Ray's included)
        return {
            "calls": sum(o["calls"] for o in out),
            "resets": sum(o["resets"] for o in out),
            "latency_ns": np.concatenate([o["latency_ns"] for o in out]),
            "waited": sum(o["waited"] for o in out),
            "late": late,
            "cpu": cpu,
        }

    def _resets(self, system: str, k: int, end: float) -> dict[str, Any]:
        lat = np.empty(MAX_LATENCIES, dtype=np.int64)
        scores = np.random.default_rng([os.getpid(), k]).random(4096)
        current, n_envs = self.currents[k], self.n_envs
        clock = time.perf_counter_ns
        n = 0
        calls = 0
        if system == OURS:
            source, envs = self.sources[k], [np.array([i]) for i in range(n_envs)]
            calls = -(source.pushes + source.draw_calls)
            while time.time() < end:
                for e in range(n_envs):
                    t0 = clock()
                    source.update_batch([current[e]], scores[n % 4096 : n % 4096 + 1])
                    current[e] = int(source.next_levels(envs[e])[0])
                    t1 = clock()
                    if n < MAX_LATENCIES:
                        lat[n] = t1 - t0
                    n += 1
            calls += source.pushes + source.draw_calls  # before the final flush: calls in the timed loop
            source.flush()
            waited = source.blocking_calls
        else:
            curriculum = self.curriculum
            while time.time() < end:
                for e in range(n_envs):
                    t0 = clock()
                    # RayGymnasiumSyncWrapper.reset: the episode's message, then a blocking sample
                    curriculum.update_task_progress.remote(current[e], float(scores[n % 4096]))
                    current[e] = int(ray.get(curriculum.sample.remote())[0])
                    t1 = clock()
                    if n < MAX_LATENCIES:
                        lat[n] = t1 - t0
                    n += 1
            waited = n
            calls = 2 * n  # a message and a blocking sample per reset
        return {"resets": n, "latency_ns": lat[: min(n, MAX_LATENCIES)], "waited": waited, "calls": calls}

    def scores(self, system: str, start: float, seconds: float) -> dict[str, Any]:
        """Report scores as fast as possible, then wait until the actor has applied every one."""
        _wait_until(start)
        end = start + seconds
        out = self._in_threads(lambda k: self._scores(system, k, end))
        return {
            "scores": sum(o["scores"] for o in out),
            "done": max(o["done"] for o in out),
            "pushes": sum(o["pushes"] for o in out),
        }

    def _scores(self, system: str, k: int, end: float) -> dict[str, Any]:
        scores = np.random.default_rng([os.getpid(), k, 1]).random(4096)
        levels = list(self.currents[k])
        n = 0
        pushes = 0
        if system == OURS:
            source = self.sources[k]
            pushes = -source.pushes
            while time.time() < end:
                for level in levels:
                    source.update_batch([level], scores[n % 4096 : n % 4096 + 1])
                    n += 1
            source.flush()  # every score applied by the actor
            pushes += source.pushes
        else:
            curriculum = self.curriculum
            while time.time() < end:
                for level in levels:
                    curriculum.update_task_progress.remote(level, float(scores[n % 4096]))
                    n += 1
            ray.get(curriculum.get_remote_attr.remote("num_tasks"))  # runs after every message above
            pushes = n
        return {"scores": n, "done": time.time(), "pushes": pushes}


def _wait_until(t: float) -> None:
    while time.time() < t:
        time.sleep(min(0.01, max(0.0, t - time.time())))


# --------------------------------------------------------------------------------------------------
# hosts
# --------------------------------------------------------------------------------------------------
def host_ours(n_levels: int, seed: int) -> Any:
    sampler = LevelSampler(range(n_levels), seed=seed, **OUR_KWARGS)
    sampler.update_batch(np.arange(n_levels), np.random.default_rng(seed).random(n_levels))
    return host_level_source(sampler)


def host_syllabus(n_levels: int, n_clients: int, name: str) -> Any:
    """A filled ``DirectPrioritizedLevelReplay`` in Syllabus's ``RayCurriculumWrapper`` actor."""
    saved = np.geterr()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from syllabus.core import make_ray_curriculum
        from syllabus.curricula import DirectPrioritizedLevelReplay
        from syllabus.task_space import DiscreteTaskSpace
    np.seterr(**saved)  # Syllabus runs np.seterr(all="raise") at import
    curriculum = DirectPrioritizedLevelReplay(
        DiscreteTaskSpace(n_levels),
        task_sampler_kwargs_dict=dict(SYLLABUS_KWARGS),
        num_processes=max(1, n_clients),
        suppress_usage_warnings=True,
    )
    sampler = curriculum._task_sampler
    sampler.task_scores[:] = np.random.default_rng(0).random(n_levels)  # as sampler_speed.fill_syllabus
    sampler.unseen_task_weights[:] = 0.0
    wrapper = make_ray_curriculum(curriculum, actor_name=name)
    return wrapper.curriculum  # the actor lives as long as this handle


# --------------------------------------------------------------------------------------------------
# runs
# --------------------------------------------------------------------------------------------------
def run_one(
    system: str,
    clients: list[Any],
    args: argparse.Namespace,
    tag: str,
    prefetch: int = 0,
    threads: int = 1,
) -> dict[str, Any]:
    c = len(clients) * threads  # clients: processes × client threads in each
    if system == OURS:
        actor = host_ours(args.levels, seed=0)
        target: Any = RemoteLevelSource(actor, prefetch=prefetch, push_every=args.push_every)
        probe = target
        assert probe.num_levels == args.levels  # the actor is up
    else:
        target = f"curriculum-{tag}"
        probe = None
        actor = host_syllabus(args.levels, c, target)
        ray.get(actor.get_remote_attr.remote("num_tasks"))  # the actor is up
    ray.get([cl.prepare.remote(system, target) for cl in clients])
    before = probe.actor_stats() if system == OURS else None
    start = time.time() + 1.0 + 0.02 * c
    out = ray.get([cl.resets.remote(system, start, args.seconds) for cl in clients])
    late = max(o["late"] for o in out)
    if late > 0:
        print(f"<!-- {system} C={c}: a client started {late:.2f} s late -->")
    n_resets = sum(o["resets"] for o in out)
    lat = np.concatenate([*(o["latency_ns"] for o in out), np.zeros(0)]) / 1e3
    if lat.size == 0:
        raise RuntimeError(f"{system}: no reset completed in {args.seconds} s with {c} clients")
    middle = probe.actor_stats() if system == OURS else None
    start = time.time() + 1.0 + 0.02 * c
    got = ray.get([cl.scores.remote(system, start, args.seconds) for cl in clients])
    n_scores = sum(g["scores"] for g in got)
    absorbed_s = max(g["done"] for g in got) - start
    row = {
        "system": f"{system} (prefetch {prefetch})" if system == OURS else system,
        "ours": system == OURS,
        "prefetch": prefetch,
        "clients": c,
        "label": str(c) if threads == 1 else f"{c} ({len(clients)} processes × {threads} threads)",
        "levels_per_s": n_resets / args.seconds,
        "scores_per_s": n_scores / absorbed_s,
        "median_us": float(np.median(lat)),
        "p99_us": float(np.percentile(lat, 99)),
        "mean_us": float(lat.mean()),
        "waited": sum(o["waited"] for o in out) / max(1, n_resets),
        "client_cpu_us": 1e6 * sum(o["cpu"] for o in out) / max(1, n_resets),
        "calls_per_s": sum(o["calls"] for o in out) / args.seconds,
        "pushes_per_s": sum(g["pushes"] for g in got) / absorbed_s,
        "load": os.getloadavg()[0],
    }
    if system == OURS:
        assert before is not None and middle is not None
        stats = probe.actor_stats()
        row["check"] = stats["scores_absorbed"] - middle["scores_absorbed"] == n_scores and (
            stats["batches_refused"] == 0
        )
        row["actor_us_per_reset"] = 1e6 * (middle["cpu_seconds"] - before["cpu_seconds"]) / max(1, n_resets)
        row["actor_us_per_score"] = 1e6 * (stats["cpu_seconds"] - middle["cpu_seconds"]) / max(1, n_scores)
        # the actor's CPU seconds per wall second while the clients reset (1.0: one core, saturated)
        row["actor_busy"] = (middle["cpu_seconds"] - before["cpu_seconds"]) / args.seconds
        row["actor_busy_scores"] = (stats["cpu_seconds"] - middle["cpu_seconds"]) / absorbed_s

    ray.kill(actor)
    return row


def inprocess_costs(n_levels: int, seconds: float) -> list[str]:
    """The actor's own work without Ray: CPU µs per level drawn, per score pushed and per episode part
    joined (two parts per episode, ``value_l1``), by items per call, on a ``LevelSourceActor`` in this
    process (``time.process_time``: CPU time, which other processes' load inflates less than wall time)."""
    from plr_gym.distributed import LevelSourceActor, pack_batches
    from plr_gym.episode_parts import make_part
    from plr_gym.scoring import EpisodeData, strategy_spec

    sampler = LevelSampler(range(n_levels), seed=0, **OUR_KWARGS)
    sampler.update_batch(np.arange(n_levels), np.random.default_rng(0).random(n_levels))
    actor = LevelSourceActor(sampler)
    info = strategy_spec("value_l1")
    rng = np.random.default_rng(1)
    adv = rng.normal(size=40)
    made = 0  # parts made so far
    lines = [
        "| items per call | draw: µs CPU per level | push: µs CPU per score "
        "| parts: µs CPU per part (2 per episode) |",
        "|---|---|---|---|",
    ]
    seq = 0
    for batch in (1, 32, 128):
        costs = []
        for job in ("draw", "push", "parts"):
            spent, n = 0.0, 0  # CPU seconds inside the actor's method (making the arguments excluded)
            while spent < seconds:
                seq += 1
                args: tuple[Any, ...]
                if job == "draw":
                    method, args = actor.draw, (batch,)
                elif job == "push":
                    levels, scores = rng.integers(0, n_levels, batch), rng.random(batch)
                    packed = pack_batches([(levels[i : i + 1], scores[i : i + 1]) for i in range(batch)])
                    method, args = actor.push, ("c", seq, packed)
                else:  # part 0 then part 1 of episode e (20 steps each), consecutive over the calls
                    parts = []
                    for k in range(made, made + batch):
                        e, second = divmod(k, 2)
                        data = EpisodeData(advantages=adv[20 * second : 20 * second + 20])
                        parts.append(make_part(info, f"e{e}", 20 * second, e % n_levels, bool(second), data))
                    made += batch
                    method, args = actor.push, ("c", seq, [], 0, parts)
                t0 = time.process_time()
                method(*args)
                spent += time.process_time() - t0
                n += batch
            costs.append(1e6 * spent / n)
        lines.append(f"| {batch} | {costs[0]:.1f} | {costs[1]:.1f} | {costs[2]:.1f} |")
    return lines


def shard_difference(n_levels: int, draws: int) -> list[str]:
    """How far the simplest sharded design is from one sampler: ``S`` samplers, each owning ``N / S`` of the
    levels (level ``l`` in shard ``l mod S``), clients spread evenly over them (draws round-robin), each
    shard ranking and counting staleness among its own levels. Every level scored once (the same scores
    in both designs, fixed); ``draws`` draws. Total variation distance (TV) of the replay distributions
    before the first draw and of the draws' level frequencies, next to the TV of two seeds of one sampler
    (the noise floor of the frequencies)."""
    scores = np.random.default_rng(0).random(n_levels)

    def one(seed: int) -> LevelSampler:
        sampler = LevelSampler(range(n_levels), seed=seed, **OUR_KWARGS)
        sampler.update_batch(np.arange(n_levels), scores)
        return sampler

    def frequencies(samplers: list[LevelSampler]) -> npt.NDArray[np.float64]:
        counts = np.zeros(n_levels)
        for k in range(draws):
            counts[int(samplers[k % len(samplers)].sample())] += 1
        return counts / draws

    exact = one(0)
    exact_weights = exact.sample_weights()
    exact_freq, floor_freq = frequencies([exact]), frequencies([one(1)])
    top = np.argsort(-scores)[:10]
    lines = [
        f"| shards | TV of the replay distribution | TV of {draws:,} draws' frequencies (one sampler, "
        "another seed: noise floor) | draws on the 10 best-scored levels: one sampler / sharded |",
        "|---|---|---|---|",
    ]
    for n_shards in (2, 4, 8, 16):
        shards = []
        weights = np.zeros(n_levels)
        for k in range(n_shards):
            own = np.arange(k, n_levels, n_shards)
            shard = LevelSampler(own, seed=k, **OUR_KWARGS)
            shard.update_batch(own, scores[own])
            weights[own] = shard.sample_weights() / n_shards
            shards.append(shard)
        freq = frequencies(shards)
        floor = 0.5 * np.abs(floor_freq - exact_freq).sum()
        lines.append(
            f"| {n_shards} | {0.5 * np.abs(weights - exact_weights).sum():.3f} | "
            f"{0.5 * np.abs(freq - exact_freq).sum():.3f} ({floor:.3f}) | "
            f"{exact_freq[top].sum():.3f} / {freq[top].sum():.3f} |"
        )
    return lines


# --------------------------------------------------------------------------------------------------
# load test: emulated RLlib env runners at plr_ppo_config's defaults
# --------------------------------------------------------------------------------------------------
class _MetricsStub:
    """What ``PLRGeneralAdvantageEstimation._log`` needs of RLlib's metrics logger (values dropped)."""

    def log_value(self, *args: Any, **kwargs: Any) -> None:
        pass


def _stand_in_env(env_config: Any) -> Any:
    """An env whose whole episode is one ``step()``: ``reset(seed=level)`` draws the episode's length (in
    the env steps it stands for) from ``env_config["lengths"]`` and puts it in ``info["steps"]``."""
    import gymnasium as gym

    class StandIn(gym.Env[Any, Any]):
        observation_space = gym.spaces.Discrete(1)
        action_space = gym.spaces.Discrete(1)

        def __init__(self, lengths: tuple[int, int], seed: int) -> None:
            self.lengths = lengths
            self.rng = np.random.default_rng(seed)

        def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
            super().reset(seed=seed)
            self.steps = int(self.rng.integers(self.lengths[0], self.lengths[1] + 1))
            return 0, {"steps": self.steps}

        def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
            return 0, float(self.rng.random() < 0.5), True, False, {"steps": self.steps}

    seed = 1000 * int(env_config.worker_index) + int(env_config.vector_index)
    return StandIn(tuple(env_config["lengths"]), seed)


@ray.remote(num_cpus=0)
class LoadRunners:
    """One process emulating ``k`` RLlib env runners, each as RLlib makes it: :class:`PLREnvCreator` pickled
    into the runner (so the runner has its own ``RemoteLevelSource`` client, with the source's settings)
    and called once per sub-env with an ``EnvContext``. Each env plays its episodes through
    :class:`~plr_gym.rllib.PLREnv` (``reset`` draws the level from the client's queue, an outcome strategy
    reports from ``step``); the env steps themselves are not run: an episode of ``L`` steps ends
    ``L × envs / steps_per_s`` seconds after it began (the runner steps its envs in lockstep). A learner
    stand-in (:class:`~plr_gym.rllib.PLRGeneralAdvantageEstimation` with ``join_here``, as with one
    learner: it joins the episodes itself and sends the source one score per episode) scores every
    ``iteration`` seconds the episodes of this process's runners that ended, one chunk each, and pushes
    them (one push per process and iteration, where one real learner makes one push in all: a little more
    traffic than a real run); the stand-in of the process holding env runner 1 also closes the source's
    rollout as the first learner does (``end_rollout``, ``rollout_stats``, ``begin_rollout``)."""

    def __init__(self) -> None:
        from plr_gym import rllib  # the imports a runner pays once (Ray's RLlib, torch)

        self.rllib = rllib

    def setup(
        self,
        first: int,
        k: int,
        envs: int,
        source: Any,
        steps_per_s: float,
        lengths: tuple[int, int],
        iteration: float,
        min_refill: int | None = None,
    ) -> None:
        """Env runners ``first`` ... ``first + k - 1`` over ``source`` (each its own client of it)."""
        from ray import cloudpickle  # what Ray ships the env creator to its env runners with
        from ray.rllib.env.env_context import EnvContext

        creator = self.rllib.PLREnvCreator(_stand_in_env, source, envs)
        self.envs: list[list[Any]] = []
        self.clients: list[Any] = []
        for w in range(first, first + k):
            mine = cloudpickle.loads(cloudpickle.dumps(creator))  # as RLlib ships it to env runner w
            config = {"lengths": list(lengths)}
            if min_refill is not None:
                mine.source.min_refill = min_refill
            self.envs.append([mine(EnvContext(config, worker_index=w, vector_index=j)) for j in range(envs)])
            self.clients.append(mine.source)
        self.learner = self.rllib.PLRGeneralAdvantageEstimation(
            gamma=0.99, lambda_=0.95, source=cloudpickle.loads(cloudpickle.dumps(source)), join_here=True
        )
        self.outcome = self.learner.strategy_info.outcome
        self.seconds_per_step = envs / steps_per_s
        self.iteration = iteration
        self.rng = np.random.default_rng(first)
        self.ended: list[tuple[Any, int]] = []  # (level, steps) of the episodes not scored yet
        self.episodes = 0  # episodes that ended
        self.scored = 0  # episodes the learner scored
        self.iterations_done = 0
        self.rank0 = first == 1  # the process holding env runner 1 stands in for the first learner
        self.heap: list[tuple[float, int, int]] = []

    def begin(self, start: float) -> None:
        """First resets (the blocking first draw of every runner), then episodes from ``start`` on."""
        import heapq

        for r, envs in enumerate(self.envs):
            for j, env in enumerate(envs):
                _, info = env.reset()
                heapq.heappush(self.heap, (start + info["steps"] * self.seconds_per_step, r, j))

    def counters(self) -> dict[str, Any]:
        """Calls made so far: the runners' draws and pushes, the learner's pushes and rollout calls."""
        clients = [*self.clients, self.learner.source]
        return {
            "calls": sum(c.draw_calls + c.pushes for c in clients)
            + (0 if _has_next_rollout() or not self.rank0 else 3) * self.iterations_done,
            "levels": sum(c.levels_requested for c in self.clients),
            "blocking": sum(c.blocking_calls for c in self.clients),
        }

    def play(self, until: float) -> dict[str, Any]:
        """Play episodes (end, reset on the next level) until ``until``; score every ``iteration`` s."""
        import heapq

        heap, envs, per_step = self.heap, self.envs, self.seconds_per_step
        resets = 0
        behind = 0.0  # the largest delay of an episode's end behind its schedule (the process too slow)
        next_iteration = time.time() + self.iteration
        cpu = time.process_time()
        while True:
            now = time.time()
            if now >= next_iteration:
                self._score()
                next_iteration += self.iteration
            t, r, j = heap[0]
            if t >= until or now >= until:  # a process behind its schedule stops at the deadline too
                break
            if t > now:
                time.sleep(min(t, next_iteration) - now)
                continue
            behind = max(behind, now - t)
            env = envs[r][j]
            _, _, _, _, info = env.step(0)
            self.ended.append((env.level, info["steps"]))
            self.episodes += 1
            _, info = env.reset()
            resets += 1
            heapq.heapreplace(heap, (t + info["steps"] * per_step, r, j))
        return {"resets": resets, "behind": behind, "cpu": time.process_time() - cpu}

    def _score(self) -> None:
        """The learner's step: score the episodes that ended (one chunk each), then close the rollout."""
        self.iterations_done += 1
        ended, self.ended = self.ended, []
        if ended and not self.outcome:
            marks = [
                {
                    "id": f"{id(self)}-{self.scored + i}",
                    "t_started": 0,
                    "len": steps,
                    "terminated": True,
                    "done": True,
                    "level": level,
                    "rewards": np.zeros(steps),
                }
                for i, (level, steps) in enumerate(ended)
            ]
            total = sum(steps + 1 for _, steps in ended)
            values = self.rng.random(total)
            self.learner._score(marks, values, self.rng.normal(size=total))
            self.scored += len(self.learner.last_scored)
        if self.rank0:  # one learner closes the source's rollout (RLlib: the first learner)
            self.learner._log(_MetricsStub(), [])  # end_rollout (push), rollout_stats, begin_rollout
        else:
            self.learner.source.flush()  # pushes its scores (and waits, as a learner does)

    def finish(self) -> dict[str, Any]:
        """Score what ended and push everything: afterwards the actor holds every score sent."""
        self._score()
        for client in self.clients:
            client.flush()
        self.learner.source.flush()
        out = {"scored": self.scored, "episodes": self.episodes, **self.counters()}
        del self.envs, self.clients, self.learner
        return out


def _client_of(source: Any, min_refill: int | None) -> Any:
    """One runner's client, as RLlib ships it (``cloudpickle``), with ``min_refill`` if given."""
    from ray import cloudpickle

    client = cloudpickle.loads(cloudpickle.dumps(source))
    if min_refill is not None:
        client.min_refill = min_refill
    return client


def _has_next_rollout() -> bool:
    """Whether the library has ``plr_gym.source.next_rollout`` (the learner's step in one call)."""
    import plr_gym.source

    return hasattr(plr_gym.source, "next_rollout")


def _learner_step(client: Any) -> None:
    """What the RLlib connector's first learner does between batches: ``plr_gym.source.next_rollout``
    (one call) where the library has it, else (before it) ``end_rollout``, ``rollout_stats``,
    ``begin_rollout``."""
    try:
        from plr_gym.source import next_rollout
    except ImportError:  # a library from before next_rollout (--src)
        client.end_rollout()
        client.rollout_stats(full=False)
        client.begin_rollout()
    else:
        next_rollout(client, full=False)


_SLACK = 0.002  # seconds: EventRunners plays episode ends due this soon without sleeping first


@ray.remote(num_cpus=0)
class EventRunners:
    """``k`` emulated env runners in one process, cheaply (``--emulation events``): each runner is its own
    ``RemoteLevelSource`` client, unpickled as RLlib ships a runner its env creator's source, and each of
    its envs calls ``client.next_levels([j])`` when an episode ends, on a schedule (an episode of ``L``
    steps ends ``L × envs / steps_per_s`` seconds after it began): the call ``PLREnv.reset`` makes, without
    the env, its wrappers or the GAE connector. Every ``iteration`` seconds a learner stand-in sends the
    ended episodes' levels with random scores in one ``update_batch`` and makes the learner's step
    (``plr_gym.source.next_rollout``, or the three calls before it) as the first learner does; the other
    processes' stand-ins push with ``flush()``. The actor sees the calls the connector makes."""

    def setup(
        self,
        first: int,
        k: int,
        envs: int,
        source: Any,
        steps_per_s: float,
        lengths: tuple[int, int],
        iteration: float,
        min_refill: int | None = None,
    ) -> None:
        self.clients = [_client_of(source, min_refill) for _ in range(k)]
        self.learner = _client_of(source, min_refill)
        self.env_ids = [np.array([j], dtype=np.int64) for j in range(envs)]
        self.rng = np.random.default_rng(first)
        self.lengths = self.rng.integers(lengths[0], lengths[1] + 1, size=65536).tolist()
        self.k = 0
        self.seconds_per_step = envs / steps_per_s
        self.iteration = iteration
        self.ended: list[Any] = []
        self.episodes = 0
        self.scored = 0
        self.iterations_done = 0
        self.rank0 = first == 1
        self.heap: list[tuple[float, int, int]] = []

    def _length(self) -> int:
        self.k = (self.k + 1) & 65535
        return int(self.lengths[self.k])

    def begin(self, start: float) -> None:
        import heapq

        self.levels_now = [[client.next_levels(env)[0] for env in self.env_ids] for client in self.clients]
        for r in range(len(self.clients)):  # the first draws above were each env's first (blocking) reset
            for j in range(len(self.env_ids)):
                heapq.heappush(self.heap, (start + self._length() * self.seconds_per_step, r, j))

    def counters(self) -> dict[str, Any]:
        clients = [*self.clients, self.learner]
        return {
            "calls": sum(c.draw_calls + c.pushes for c in clients)
            + (0 if _has_next_rollout() or not self.rank0 else 3) * self.iterations_done,
            "levels": sum(c.levels_requested for c in self.clients),
            "blocking": sum(c.blocking_calls for c in self.clients),
        }

    def play(self, until: float) -> dict[str, Any]:
        import heapq

        heap, clients, env_ids, per_step = self.heap, self.clients, self.env_ids, self.seconds_per_step
        levels_now, ended = self.levels_now, self.ended
        resets = 0
        behind = 0.0
        next_iteration = time.time() + self.iteration
        cpu = time.process_time()
        while True:
            now = time.time()
            if now >= next_iteration:
                self._score()
                next_iteration += self.iteration
            t, r, j = heap[0]
            if t >= until or now >= until:
                break
            if t > now + _SLACK:  # events due within _SLACK are played now: fewer, longer sleeps
                time.sleep(min(t, next_iteration, until) - now)
                continue
            behind = max(behind, now - t)
            ended.append(levels_now[r][j])
            levels_now[r][j] = clients[r].next_levels(env_ids[j])[0]
            resets += 1
            heapq.heapreplace(heap, (t + self._length() * per_step, r, j))
        self.episodes += resets
        return {"resets": resets, "behind": behind, "cpu": time.process_time() - cpu}

    def _score(self) -> None:
        self.iterations_done += 1
        ended = self.ended[:]
        self.ended.clear()  # in place: play() holds this list
        if ended:
            self.learner.update_batch(np.asarray(ended, dtype=np.int64), self.rng.random(len(ended)))
            self.scored += len(ended)
        if self.rank0:
            _learner_step(self.learner)
        else:
            self.learner.flush()

    def finish(self) -> dict[str, Any]:
        self._score()
        for client in self.clients:
            client.flush()
        self.learner.flush()
        out = {"scored": self.scored, "episodes": self.episodes, **self.counters()}
        del self.clients, self.learner
        return out


def run_load(
    source: Any, n_runners: int, hosts: list[Any], args: argparse.Namespace, probe: Any
) -> dict[str, Any]:
    """``n_runners`` emulated env runners over the ``hosts`` processes; one measurement window."""
    lengths = (args.episode_steps[0], args.episode_steps[1])
    m = len(hosts)
    split = [n_runners // m + (i < n_runners % m) for i in range(m)]
    hosts = [h for h, k in zip(hosts, split) if k]
    split = [k for k in split if k]
    firsts = np.cumsum([1, *split[:-1]]).tolist()
    ray.get(
        [
            h.setup.remote(
                f, k, args.runner_envs, source, args.steps_per_s, lengths, args.iteration, args.min_refill
            )
            for h, f, k in zip(hosts, firsts, split)
        ]
    )
    idle = probe.actor_stats()["cpu_seconds"]  # the actor's own background CPU (Ray's threads), idle
    time.sleep(args.idle)
    idle = (probe.actor_stats()["cpu_seconds"] - idle) / args.idle
    start = time.time() + 0.5
    ray.get([h.begin.remote(start) for h in hosts])
    ray.get([h.play.remote(start + args.warmup) for h in hosts])  # blocks sized to the measured rates
    before, counters0 = probe.actor_stats(), ray.get([h.counters.remote() for h in hosts])
    t0 = time.time()
    refs = [h.play.remote(t0 + args.seconds) for h in hosts]
    latencies = []  # round trips of a small call to the actor during the window (its queue, if any)
    while len(ray.wait(refs, num_returns=len(refs), timeout=args.latency_every)[0]) < len(refs):
        t = time.perf_counter()
        probe.actor_stats()
        latencies.append(time.perf_counter() - t)
    out = ray.get(refs)
    wall = time.time() - t0
    after, counters1 = probe.actor_stats(), ray.get([h.counters.remote() for h in hosts])
    done = ray.get([h.finish.remote() for h in hosts])
    final = probe.actor_stats()
    resets = sum(o["resets"] for o in out)
    calls = sum(c1["calls"] - c0["calls"] for c0, c1 in zip(counters0, counters1)) + len(latencies)
    cpu = after["cpu_seconds"] - before["cpu_seconds"]
    offered = n_runners * args.steps_per_s / (0.5 * (lengths[0] + lengths[1]))
    return {
        "runners": n_runners,
        "processes": len(hosts),
        "offered": offered,
        "resets_per_s": resets / wall,
        "drawn_per_s": (after["levels_served"] - before["levels_served"]) / wall,
        "calls_per_s": calls / wall,
        "levels_per_call": (after["levels_served"] - before["levels_served"]) / max(calls, 1),
        "actor_us_per_reset": 1e6 * cpu / max(resets, 1),
        "actor_idle_ms_per_s": 1e3 * idle,
        "actor_us_per_reset_net": 1e6 * max(0.0, cpu - idle * wall) / max(resets, 1),
        "actor_us_per_call": 1e6 * cpu / max(calls, 1),
        "actor_busy": cpu / wall,
        "client_us_per_reset": 1e6 * sum(o["cpu"] for o in out) / max(resets, 1),
        "behind_s": max(o["behind"] for o in out),
        "blocking": sum(c1["blocking"] - c0["blocking"] for c0, c1 in zip(counters0, counters1)),
        "scored": sum(d["scored"] for d in done),
        "episodes": sum(d["episodes"] for d in done),
        "absorbed": final["scores_absorbed"],
        "levels_requested": sum(d["levels"] for d in done),
        "levels_served": final["levels_served"],
        "refused": final["batches_refused"],
        "load": os.getloadavg()[0],
        "latency_ms": 1e3 * float(np.median(latencies)) if latencies else float("nan"),
        "latency_max_ms": 1e3 * max(latencies) if latencies else float("nan"),
    }


def main_load(args: argparse.Namespace) -> None:
    """The load test (``--load``): emulated env runners at ``plr_ppo_config``'s defaults, scaled up."""
    from plr_gym.scoring import strategy_spec

    counts = [int(x) for x in args.runners.split(",")]
    settings = [float(x) for x in args.prefetch_seconds.split(",")]
    t_start = time.time()
    print(
        f"- load test setup: {args.levels} levels, strategy {args.strategy}; each env runner: "
        f"{args.runner_envs} env(s) stepping {args.steps_per_s:g} env steps/s in all, episodes of "
        f"{args.episode_steps[0]}–{args.episode_steps[1]} steps (uniform), a learner step every "
        f"{args.iteration:g} s; runners spread over {args.processes} client processes "
        f"(emulation: {args.emulation}); {args.warmup:g} s warm-up, then {args.seconds:g} s measured; "
        f"client: prefetch 2 per env, push_every None, prefetch_seconds as in each row, min_refill "
        f"{'the library default' if args.min_refill is None else args.min_refill}; a probe call every "
        f"{args.latency_every:g} s measures the actor's latency (counted in calls)"
    )
    print()
    outcome = strategy_spec(args.strategy).outcome
    n_hosts = min(args.processes, max(counts))
    kind = EventRunners if args.emulation == "events" else LoadRunners
    hosts = [kind.remote() for _ in range(n_hosts)]  # type: ignore[attr-defined]
    rows = []
    for seconds in settings:
        for n in counts:
            sampler = LevelSampler(range(args.levels), strategy=args.strategy, seed=0)
            actor = host_level_source(sampler)
            source = RemoteLevelSource(actor, prefetch=2, prefetch_seconds=seconds)
            probe = RemoteLevelSource(actor, prefetch=0)
            assert probe.num_levels == args.levels  # the actor is up
            row = run_load(source, n, hosts, args, probe)
            row["prefetch_seconds"] = seconds
            # exactly once: every score the learners (or the runners, for outcomes) sent was applied once;
            # every level the runners' clients asked for was drawn once
            sent = row["episodes"] if outcome else row["scored"]
            row["check"] = (
                row["refused"] == 0
                and row["levels_requested"] == row["levels_served"]
                and row["absorbed"] == sent
                and (outcome or row["scored"] == row["episodes"])
            )
            rows.append(row)
            ray.kill(actor)
            print(
                f"<!-- prefetch_seconds {seconds:g}, {n} runners done at {time.time() - t_start:.0f} s -->",
                flush=True,
            )
    print()
    print(
        "| prefetch_seconds | env runners | offered resets/s | served resets/s | levels drawn/s "
        "| actor calls/s | levels per call | actor CPU µs per reset | ... less its idle CPU "
        "| actor idle CPU ms/s | actor CPU µs per call | actor CPU busy | client CPU µs per reset | "
        "runners behind (max s) | probe latency median / max ms | exactly once (scores absorbed / sent, "
        "levels drawn / asked) | load (1 min) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        sent = f"{r['episodes'] if outcome else r['scored']:,}"
        print(
            f"| {r['prefetch_seconds']:g} | {r['runners']} | {r['offered']:,.0f} | "
            f"{r['resets_per_s']:,.0f} | {r['drawn_per_s']:,.0f} | {r['calls_per_s']:,.1f} | "
            f"{r['levels_per_call']:.1f} | "
            f"{r['actor_us_per_reset']:.1f} | {r['actor_us_per_reset_net']:.1f} | "
            f"{r['actor_idle_ms_per_s']:.1f} | "
            f"{r['actor_us_per_call']:.0f} | {r['actor_busy']:.2f} | {r['client_us_per_reset']:.1f} | "
            f"{r['behind_s']:.2f} | {r['latency_ms']:.1f} / {r['latency_max_ms']:.0f} | "
            f"{'yes' if r['check'] else 'NO'} ({r['absorbed']:,} / {sent}, "
            f"{r['levels_served']:,} / {r['levels_requested']:,}) | {r['load']:.1f} |"
        )
    print()
    for h in hosts:
        ray.kill(h)
    bad = [(r["prefetch_seconds"], r["runners"]) for r in rows if not r["check"]]
    if bad:
        print(f"- CHECK FAILED: scores or levels not exactly once at (prefetch_seconds, runners) = {bad}")
    print(f"- load test wall time: {time.time() - t_start:.0f} s")
    if bad:
        sys.exit(1)


# --------------------------------------------------------------------------------------------------
# where the actor's CPU goes: one call at a time, by kind (--actor-costs)
# --------------------------------------------------------------------------------------------------
def _thread_cpu() -> dict[str, float]:
    """CPU seconds of each thread of this process (Linux ``/proc``), by ``name:tid``."""
    out = {}
    tick = os.sysconf("SC_CLK_TCK")
    for tid in os.listdir(f"/proc/{os.getpid()}/task"):
        try:
            stat = Path(f"/proc/{os.getpid()}/task/{tid}/stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        out[f"{name}:{tid}"] = (int(fields[11]) + int(fields[12])) / tick
    return out


def actor_costs(n_levels: int, calls: int, rounds: int) -> list[str]:
    """The hosted actor's CPU (its process's, all threads) per call of each kind, from one caller, in
    interleaved rounds: a call that does nothing (Ray's own cost), draws of 1, 128 and 1,024 levels, score
    pushes of 1 and 1,000 scores, a refill that carries 128 scores and draws 128 levels, and a learner's
    step (``next_rollout``: a push of 1,000 scores with the rollout closed and opened), plus the idle CPU
    per second and its busiest threads."""
    from plr_gym.distributed import LevelSourceActor

    class Measured(LevelSourceActor):  # type: ignore[misc]
        def cpu(self) -> float:
            return time.process_time()

        def threads(self) -> dict[str, float]:
            return _thread_cpu()

        def nothing(self) -> None:
            return None

    actor: Any = (
        ray.remote(Measured)
        .options(num_cpus=0)
        .remote(LevelSampler(range(n_levels), strategy="value_l1", seed=0))
    )
    _, first = ray.get(actor.draw.remote(n_levels))
    ray.get(actor.push.remote("scorer", 1, [(first, np.random.default_rng(0).random(n_levels))]))
    rng = np.random.default_rng(1)
    seq = [1]

    def push(k: int, draw: int, rollout: bool | None = None) -> Callable[[], Any]:
        def call() -> Any:
            seq[0] += 1
            batch = [(rng.integers(0, n_levels, k), rng.random(k))]
            extra = (None, None, rollout) if rollout is not None else ()
            return actor.push.remote("c", seq[0], batch, draw, *extra)

        return call

    kinds: dict[str, Callable[[], Any]] = {
        "a call that does nothing (Ray's cost)": lambda: actor.nothing.remote(),
        "draw 1 level": lambda: actor.draw.remote(1),
        "draw 128 levels": lambda: actor.draw.remote(128),
        "draw 1,024 levels": lambda: actor.draw.remote(1024),
        "push 1 score": push(1, 0),
        "push 1,000 scores": push(1000, 0),
        "refill: push 128 scores, draw 128 levels": push(128, 128),
    }
    if "rollout" in LevelSourceActor.push.__code__.co_varnames:
        kinds["learner step: 1,000 scores + next_rollout"] = push(1000, 0, False)
    per: dict[str, list[float]] = {k: [] for k in kinds}
    main: dict[str, list[float]] = {k: [] for k in kinds}
    idle: list[float] = []
    for _ in range(rounds):
        c0, t0 = ray.get(actor.cpu.remote()), ray.get(actor.threads.remote())
        time.sleep(2.0)
        c1, t1 = ray.get(actor.cpu.remote()), ray.get(actor.threads.remote())
        idle.append((c1 - c0) / 2.0)
        for kind, call in kinds.items():
            c0, t0 = ray.get(actor.cpu.remote()), ray.get(actor.threads.remote())
            for _ in range(calls):
                ray.get(call())
            c1, t1 = ray.get(actor.cpu.remote()), ray.get(actor.threads.remote())
            per[kind].append((c1 - c0) / calls)
            busiest = max(t1, key=lambda t: t1[t] - t0.get(t, 0.0))
            main[kind].append((t1[busiest] - t0.get(busiest, 0.0)) / calls)
    lines = [
        f"- idle: {1e3 * float(np.median(idle)):.1f} ms of CPU per second (median of {rounds} rounds of 2 s)",
        "",
        "| call (one caller, one at a time) | actor CPU per call, median µs | rounds | busiest thread µs |",
        "|---|---|---|---|",
    ]
    for kind in kinds:
        rounds_us = ", ".join(f"{1e6 * v:.0f}" for v in per[kind])
        lines.append(
            f"| {kind} | {1e6 * float(np.median(per[kind])):.0f} | {rounds_us} | "
            f"{1e6 * float(np.median(main[kind])):.0f} |"
        )
    ray.kill(actor)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="the suite's smoke run: C = 1, prefetch 16 only, 0.5 s per run; then load tests of 4 runners "
        "(both emulations)",
    )
    load = parser.add_argument_group("load test (--load): emulated RLlib env runners at the defaults")
    load.add_argument("--load", action="store_true", help="run the load test instead of the comparison")
    load.add_argument("--runners", default="16,64,256", help="env runner counts, one row each")
    load.add_argument("--processes", type=int, default=4, help="client processes the runners share")
    load.add_argument("--runner-envs", type=int, default=1, help="envs per runner (plr_ppo_config: 1)")
    load.add_argument("--steps-per-s", type=float, default=700.0, help="env steps/s of one runner")
    load.add_argument(
        "--episode-steps", type=int, nargs=2, default=(10, 30), metavar=("MIN", "MAX"), help="episode length"
    )
    load.add_argument("--iteration", type=float, default=4.0, help="seconds per learner step")
    load.add_argument("--warmup", type=float, default=12.0, help="seconds before the measured window")
    load.add_argument("--idle", type=float, default=3.0, help="seconds the actor's idle CPU is measured")
    load.add_argument(
        "--prefetch-seconds", default="20", help="RemoteLevelSource prefetch_seconds values, rows each"
    )
    load.add_argument(
        "--strategy", default="value_l1", help="the sampler's strategy (learnability: outcomes)"
    )
    load.add_argument(
        "--emulation",
        choices=("envs", "events"),
        default="envs",
        help="envs: PLREnv + the GAE connector per runner; events: bare clients on a schedule (cheap: "
        "for the knee)",
    )
    load.add_argument(
        "--min-refill", type=int, default=None, help="RemoteLevelSource min_refill (default: its own)"
    )
    load.add_argument("--latency-every", type=float, default=2.0, help="seconds between latency probes")
    parser.add_argument(
        "--actor-costs", action="store_true", help="the actor's CPU per call of each kind (interleaved)"
    )
    parser.add_argument("--cost-calls", type=int, default=300, help="--actor-costs: calls per kind and round")
    parser.add_argument("--cost-rounds", type=int, default=3, help="--actor-costs: rounds")
    parser.add_argument(
        "--src", default=None, help="benchmark the plr_gym in this src directory (before/after runs)"
    )
    parser.add_argument(
        "--clients",
        default=None,
        help="comma-separated client counts (default 1,8,32,128); PxT: P processes with T client threads "
        "each (P*T clients; for counts whose processes do not fit in memory)",
    )
    parser.add_argument("--envs", type=int, default=4, help="envs per client (default 4)")
    parser.add_argument("--levels", type=int, default=1000, help="levels in the sampler (default 1000)")
    parser.add_argument(
        "--prefetch", default="1,16", help="plr_gym: levels queued per env, one row each (default 1,16)"
    )
    parser.add_argument("--push-every", type=int, default=32, help="plr_gym: episodes per score push")
    parser.add_argument("--seconds", type=float, default=None, help="seconds per run (default 4; quick 1)")
    parser.add_argument("--no-syllabus", action="store_true", help="benchmark plr_gym only")
    parser.add_argument(
        "--inprocess",
        action="store_true",
        help="also measure the actor's own work per level, score and episode part without Ray",
    )
    parser.add_argument(
        "--max-rss-gb",
        type=float,
        default=None,
        help="skip client counts whose estimated memory exceeds this (default: 80%% of the machine's)",
    )
    args = parser.parse_args()
    if args.actor_costs:
        _init_ray()
        _print_provenance("# Where the level source actor's CPU goes, call by call", None)
        print(f"- {args.levels} levels, {args.cost_calls} calls of each kind per round, interleaved\n")
        for line in actor_costs(args.levels, args.cost_calls, args.cost_rounds):
            print(line)
        ray.shutdown()
        return
    if args.load:
        if args.seconds is None:
            args.seconds = 30.0
        _init_ray()
        _print_provenance("# Level source load test: emulated RLlib env runners", None)
        main_load(args)
        ray.shutdown()
        return
    counts: list[tuple[int, int]] = [(1, 1)] if args.quick else [(1, 1), (8, 1), (32, 1), (128, 1)]
    prefetches = [int(x) for x in args.prefetch.split(",")]
    if args.quick and args.prefetch == parser.get_default("prefetch"):
        prefetches = prefetches[-1:]
    if args.clients:
        counts = []
        for item in args.clients.split(","):
            processes, _, threads = item.partition("x")
            counts.append((int(processes), int(threads or 1)))
    if args.seconds is None:
        args.seconds = 0.5 if args.quick else 4.0
    syllabus_note = None
    if not args.no_syllabus:
        try:
            syllabus_version = importlib.metadata.version("syllabus-rl")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                saved = np.geterr()
                import syllabus.core  # noqa: F401

                np.seterr(**saved)
        except Exception as exc:  # not installed, or it fails to import
            syllabus_note = f"Syllabus not run: cannot import syllabus-rl ({type(exc).__name__}: {exc})"
    else:
        syllabus_note = "Syllabus not run: --no-syllabus"

    t_start = time.time()
    _init_ray()
    _print_provenance(
        "# Remote level source: plr_gym vs Syllabus over Ray",
        syllabus_version if syllabus_note is None else "(not run)",
    )
    print(
        f"- setup: {args.levels} levels (all scored: every draw replays), {args.envs} envs per client, "
        f"{args.seconds:g} s per run; plr_gym push_every={args.push_every}"
    )
    if syllabus_note:
        print(f"- {syllabus_note}")
    print()

    total_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    budget_gb = args.max_rss_gb if args.max_rss_gb is not None else 0.8 * total_gb
    rows: list[dict[str, Any]] = []
    skipped: list[str] = []
    rss_mb = 0.0
    for c, threads in counts:
        if rss_mb and c * rss_mb / 1024 > budget_gb:
            skipped.append(
                f"C = {c} not run: {c} client processes of ~{rss_mb:.0f} MB each need "
                f"~{c * rss_mb / 1024:.1f} GB, over the {budget_gb:.1f} GB budget (--max-rss-gb) of this "
                f"{total_gb:.0f} GB machine"
            )
            continue
        clients = [Client.remote(args.envs, threads) for _ in range(c)]  # type: ignore[attr-defined]
        ray.get([cl.pid.remote() for cl in clients])
        rss_mb = max(ray.get([cl.rss_mb.remote() for cl in clients]))
        for prefetch in prefetches:
            rows.append(
                run_one(OURS, clients, args, tag=f"{c}x{threads}", prefetch=prefetch, threads=threads)
            )
        if syllabus_note is None:
            rows.append(run_one(THEIRS, clients, args, tag=f"{c}x{threads}", threads=threads))
        for cl in clients:
            ray.kill(cl)
        print(f"<!-- C = {c}x{threads} done at {time.time() - t_start:.0f} s -->", flush=True)

    print()
    print(
        "| clients | system | levels served/s | scores absorbed/s | per-reset median µs | p99 µs | "
        "mean µs | client CPU µs/reset | resets that waited |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['label']} | {r['system']} | {r['levels_per_s']:,.0f} | {r['scores_per_s']:,.0f} | "
            f"{r['median_us']:.1f} | {r['p99_us']:.0f} | {r['mean_us']:.1f} | {r['client_cpu_us']:.1f} | "
            f"{r['waited']:.1%} |"
        )
    print()
    for r in rows:
        if r["ours"]:
            print(
                f"- {r['system']}, {r['label']} clients: the actor used "
                f"{r['actor_us_per_reset']:.1f} µs CPU per reset (a level and a score) and "
                f"{r['actor_us_per_score']:.1f} µs per score"
            )
    for line in skipped:
        print(f"- {line}")
    ours = {r["clients"]: r for r in rows if r["ours"] and r["prefetch"] == max(prefetches)}
    theirs = {r["clients"]: r for r in rows if r["system"] == THEIRS}
    for c in sorted(set(ours) & set(theirs)):
        print(
            f"- Speedup at {c} clients (prefetch {max(prefetches)}): levels served "
            f"{ours[c]['levels_per_s'] / theirs[c]['levels_per_s']:.1f}×, per-reset mean "
            f"{theirs[c]['mean_us'] / ours[c]['mean_us']:.1f}× lower"
        )
    print()
    print("Calls the actor served (a level source saturates on calls and per-item work, not on clients):")
    print()
    print(
        "| clients | system | levels/s | actor calls/s (resets) | levels per call | actor CPU busy (resets) "
        "| pushes/s (scores) | scores per push | actor CPU busy (scores) | load (1 min, at the row's end) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        busy = f"{r['actor_busy']:.2f}" if r["ours"] else "n/a"
        busy_scores = f"{r['actor_busy_scores']:.2f}" if r["ours"] else "n/a"
        print(
            f"| {r['label']} | {r['system']} | {r['levels_per_s']:,.0f} | {r['calls_per_s']:,.0f} | "
            f"{r['levels_per_s'] / max(r['calls_per_s'], 1e-9):.1f} | {busy} | {r['pushes_per_s']:,.0f} | "
            f"{r['scores_per_s'] / max(r['pushes_per_s'], 1e-9):.1f} | {busy_scores} | {r['load']:.1f} |"
        )
    print()
    bad = [r["clients"] for r in rows if not r.get("check", True)]
    if bad:
        print(f"- CHECK FAILED: the actor did not absorb every score pushed at C = {bad}")
    if args.inprocess:
        print()
        print(f"The actor's own work, in-process (no Ray), load {load_average()}:")
        print()
        for line in inprocess_costs(args.levels, 0.5 if args.quick else 2.0):
            print(line)
        print()
        print("The simplest sharded design next to one sampler (the replay distribution it changes):")
        print()
        for line in shard_difference(args.levels, 2_000 if args.quick else 20_000):
            print(line)
        print()
    if args.quick:  # the load test's code path: 4 runners in one process, 2 s
        args.runners, args.processes, args.warmup, args.seconds, args.idle = "4", 1, 1.0, 2.0, 0.5
        args.iteration = 1.0
        print()
        main_load(args)
        args.emulation = "events"  # and the cheap emulation the knee is measured with
        main_load(args)
    print(f"- total wall time: {time.time() - t_start:.0f} s")
    ray.shutdown()
    if bad:
        sys.exit(1)


def _init_ray() -> None:
    # the workers import this checkout's plr_gym too
    path = os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH", "")) if p)
    ray.init(
        num_cpus=max(2, os.cpu_count() or 2),
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": path, "OMP_NUM_THREADS": "1"}},
    )


def _print_provenance(title: str, syllabus: str | None) -> None:
    command = "python " + shlex.join(["benchmarks/distributed/remote_source.py", *sys.argv[1:]])
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(title)
    print()
    print(f"- command: `{command}`")
    print(f"- commit: {git_commit()}")
    print(f"- date: {now}")
    print(f"- machine: {cpu_model()}, {os.cpu_count()} logical cores, {platform.platform()}")
    software = f"Python {platform.python_version()}, ray {ray.__version__}, numpy {np.__version__}"
    print(f"- software: {software}" + (f", syllabus-rl {syllabus}" if syllabus else ""))
    print(f"- load average at start: {load_average()}")
    if SRC != ROOT / "src":
        print(f"- library benchmarked: plr_gym from {SRC} (--src), not this checkout's")


if __name__ == "__main__":
    main()
