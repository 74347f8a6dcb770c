"""``python -m plr_gym.demo``: PLR against uniform sampling on a simulated curriculum.

Until the full training demo lands, this runs the real :class:`~plr_gym.LevelSampler` on a small
simulated learner: each of 200 levels has a hidden difficulty, an episode on a level reduces that level's
remaining error by a step whose size shrinks with difficulty, and the episode's score is the level's
current error (a stand-in for PLR's L1 value loss). PLR replays the levels with the largest error, so the
total error falls faster than under uniform sampling.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import numpy.typing as npt

from plr_gym import LevelSampler


def simulate(
    strategy: str, episodes: int, num_levels: int, seed: int
) -> tuple[npt.NDArray[np.float64], LevelSampler]:
    """Run ``episodes`` simulated episodes; return the total remaining error after each one."""
    rng = np.random.default_rng(1234)
    difficulty = rng.uniform(0.02, 0.5, size=num_levels)
    error = np.ones(num_levels)
    sampler = LevelSampler(levels=range(num_levels), strategy=strategy, seed=seed)
    history = np.empty(episodes)
    for k in range(episodes):
        level = sampler.sample()
        score = error[level]  # the episode's value error before learning from it
        error[level] *= 1.0 - difficulty[level]
        sampler.update(level, score)
        history[k] = error.sum()
    return history, sampler


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=4000)
    parser.add_argument("--levels", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    print(f"Simulated curriculum: {args.levels} levels, {args.episodes} episodes\n")
    print(f"{'episodes':>9} | {'uniform: total error':>21} | {'PLR: total error':>17}")
    start = time.perf_counter()
    uniform, _ = simulate("random", args.episodes, args.levels, args.seed)
    plr, sampler = simulate("value_l1", args.episodes, args.levels, args.seed)
    elapsed = time.perf_counter() - start
    for k in np.linspace(args.levels, args.episodes, 6).astype(int) - 1:
        print(f"{k + 1:>9} | {uniform[k]:>21.2f} | {plr[k]:>17.2f}")
    share = sampler.num_replay_samples / max(sampler.num_samples, 1)
    print(f"\nPLR replayed {share:.0%} of episodes; {sampler.num_seen}/{sampler.num_levels} levels seen.")
    print(f"{2 * args.episodes} sample()+update() pairs took {elapsed * 1e3:.0f} ms in total.")


if __name__ == "__main__":
    main()
