"""Tables and plots of ``plr-gym train`` runs: held-out return over training and level-score distributions.

Matplotlib is imported lazily with the non-interactive ``Agg`` backend, so plotting works on machines
without a display. A run directory holds ``config.json``, ``eval.csv`` (one row per evaluation and split),
``evaluation.json`` (final held-out returns) and ``plr/plr_sampler.npz`` (the level sampler).

Example:
    >>> from plr_gym.plotting import format_ci
    >>> format_ci(0.5, 0.25, 0.75)
    '0.500 [0.250, 0.750]'
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from plr_gym._eval_csv import read_rows
from plr_gym.checkpoint import load_npz

__all__ = [
    "Run",
    "format_ci",
    "load_curriculum",
    "load_run",
    "merge_seeds",
    "paired_difference",
    "paired_verdict",
    "plot_comparison",
    "plot_curriculum",
    "replay_shares",
    "replay_shortfall",
    "results_table",
    "summarize_seeds",
]


@dataclass
class Run:
    """What one run directory holds, read by :func:`load_run`."""

    path: Path
    label: str
    config: dict[str, Any]
    #: rows of ``eval.csv`` (numbers as floats, ``split`` as str)
    curve: list[dict[str, Any]]
    #: contents of ``evaluation.json`` (``None`` if training did not finish)
    final: dict[str, Any] | None
    #: scores of the sampler's seen levels (``None`` without a sampler checkpoint)
    scores: npt.NDArray[np.float64] | None = None
    #: sampler statistics: ``num_seen``, ``num_levels``, ``replay_share``
    sampler_stats: dict[str, float] = field(default_factory=dict)
    #: number of seeds merged into this run by :func:`merge_seeds` (1 for a single run)
    n_seeds: int = 1
    #: each merged seed's ``sampler_stats`` and step count (empty for a single run: its own are the one)
    seed_stats: list[dict[str, float]] = field(default_factory=list)

    def per_seed_stats(self) -> list[dict[str, float]]:
        """The sampler statistics of each seed (with ``timesteps``): one entry for a single run."""
        if self.seed_stats:
            return self.seed_stats
        return [{**self.sampler_stats, "timesteps": float(self.config.get("timesteps") or 0)}]

    def split(self, name: str) -> dict[str, npt.NDArray[np.float64]]:
        """Columns of the ``eval.csv`` rows of one split (``"test"`` or ``"train"``), as arrays."""
        rows = [r for r in self.curve if r["split"] == name]
        keys = ("timesteps", "mean", "mean_lo", "mean_hi", "iqm", "iqm_lo", "iqm_hi")
        return {k: np.array([float(r[k]) for r in rows], dtype=np.float64) for k in keys}


def load_run(path: Path) -> Run:
    """Read a run directory written by ``plr-gym train``."""
    from plr_gym.sampler import LevelSampler

    config_path = path / "config.json"
    config: dict[str, Any] = json.loads(config_path.read_text()) if config_path.is_file() else {}
    curve = read_rows(path / "eval.csv")  # a torn last row (a full disk) ignored with a warning
    final_path = path / "evaluation.json"
    final = json.loads(final_path.read_text()) if final_path.is_file() else None
    sampler_name = config.get("sampler", path.name)
    label = (
        f"{sampler_name}" if sampler_name == "uniform" else f"{sampler_name} ({config.get('strategy', '?')})"
    )
    run = Run(path=path, label=label, config=config, curve=curve, final=final)
    npz = path / "plr" / "plr_sampler.npz"
    if npz.is_file():
        sampler = LevelSampler.load(npz)
        run.sampler_stats = {
            "num_seen": float(sampler.num_seen),
            "num_levels": float(sampler.num_levels),
            "replay_share": sampler.num_replay_samples / max(sampler.num_samples, 1),
            "num_samples": float(sampler.num_samples),
            "min_seen_ratio": float(sampler.min_seen_ratio),
        }
        if sampler.uses_scores and sampler.num_seen:
            run.scores = sampler.scores[sampler.seen].astype(np.float64)
    return run


def summarize_seeds(
    matrix: npt.NDArray[np.float64], confidence: float = 0.95, n_resamples: int = 2000, seed: int = 0
) -> dict[str, Any]:
    """Mean and IQM of a ``(n_seeds, n_levels)`` matrix of returns, with two-way bootstrap CIs.

    Each resample draws seeds (whole rows) and levels (whole columns) with replacement, so the
    intervals include the variation between seeds (e.g. a seed that never learned) as well as between
    levels. Percentile intervals.

    Example:
        >>> m = np.array([[1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
        >>> s = summarize_seeds(m)
        >>> float(s["mean"]), s["n_seeds"], s["mean_ci"][0] == 0.0
        (0.375, 2, True)
    """
    from plr_gym.evaluation import iqm

    n_seeds, n_levels = matrix.shape
    rng = np.random.default_rng(seed)
    rows = rng.integers(n_seeds, size=(n_resamples, n_seeds, 1))
    cols = rng.integers(n_levels, size=(n_resamples, 1, n_levels))
    samples = matrix[rows, cols].reshape(n_resamples, -1)
    tail = (1.0 - confidence) / 2.0

    def interval(values: npt.NDArray[np.float64]) -> tuple[float, float]:
        return float(np.quantile(values, tail)), float(np.quantile(values, 1.0 - tail))

    return {
        "n_levels": int(n_levels),
        "n_seeds": int(n_seeds),
        "mean": float(matrix.mean()),
        "mean_ci": interval(samples.mean(axis=1)),
        "iqm": float(iqm(matrix.ravel())),
        "iqm_ci": interval(np.asarray(iqm(samples, axis=1), dtype=np.float64)),
    }


def paired_difference(
    matrix: npt.NDArray[np.float64],
    baseline: npt.NDArray[np.float64],
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
) -> dict[str, Any]:
    """Mean (and IQM over levels) of ``method − baseline``, paired by level, with two-way bootstrap CIs.

    ``matrix`` is ``(n_seeds, n_levels)`` for the method and ``baseline`` ``(n_baseline_seeds, n_levels)``
    over the same levels (same column order). The difference of a level is the method's mean over its
    seeds minus the baseline's, so the levels' difficulty cancels. Each resample draws the levels with
    replacement (the same columns for both) and each side's seeds with replacement, independently.
    Significantly worse than the baseline at this confidence: ``mean_ci[1] < 0``; better: ``mean_ci[0] > 0``.

    Example:
        >>> base = np.array([[0.0, 0.5, 1.0], [0.0, 0.5, 1.0]])
        >>> d = paired_difference(base + 0.1, base)
        >>> round(d["mean"], 3), [round(x, 3) for x in d["mean_ci"]]
        (0.1, [0.1, 0.1])
    """
    from plr_gym.evaluation import iqm

    m, b = np.asarray(matrix, dtype=np.float64), np.asarray(baseline, dtype=np.float64)
    if m.ndim != 2 or b.ndim != 2 or m.shape[1] != b.shape[1] or m.shape[1] < 1:
        raise ValueError(
            f"matrix and baseline must be (seeds, levels) over the same levels, got {m.shape} and {b.shape}"
        )
    if not (0.0 < confidence < 1.0):
        raise ValueError(f"confidence must lie in (0, 1), got {confidence!r}")
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, (int, np.integer)) or n_resamples < 1:
        raise ValueError(f"n_resamples must be an int >= 1, got {n_resamples!r}")
    if not (np.isfinite(m).all() and np.isfinite(b).all()):
        raise ValueError("matrix and baseline must hold finite returns (no NaN or inf)")
    n_levels = m.shape[1]
    rng = np.random.default_rng(seed)
    cols = rng.integers(n_levels, size=(n_resamples, 1, n_levels))
    m_rows = rng.integers(m.shape[0], size=(n_resamples, m.shape[0], 1))
    b_rows = rng.integers(b.shape[0], size=(n_resamples, b.shape[0], 1))
    diffs = m[m_rows, cols].mean(axis=1) - b[b_rows, cols].mean(axis=1)  # (n_resamples, n_levels)
    point = m.mean(axis=0) - b.mean(axis=0)
    tail = (1.0 - confidence) / 2.0

    def interval(values: npt.NDArray[np.float64]) -> tuple[float, float]:
        return float(np.quantile(values, tail)), float(np.quantile(values, 1.0 - tail))

    return {
        "n_levels": int(n_levels),
        "n_seeds": int(m.shape[0]),
        "n_baseline_seeds": int(b.shape[0]),
        "mean": float(point.mean()),
        "mean_ci": interval(diffs.mean(axis=1)),
        "iqm": float(iqm(point)),
        "iqm_ci": interval(np.asarray(iqm(diffs, axis=1), dtype=np.float64)),
    }


def paired_verdict(mean: float, ci: tuple[float, float], method: str = "PLR") -> str:
    """One line for a newcomer from a paired difference (``method`` minus uniform, :func:`paired_difference`
    over **several seeds per method**): better, worse, or no significant difference at its 95% CI. The demo
    and ``plr-gym compare`` print it; with one seed per method there is no verdict to give (the CI of one
    run per method covers levels, not training seeds).

    Example:
        >>> paired_verdict(-0.005, (-0.029, 0.003))  # doctest: +NORMALIZE_WHITESPACE
        'Verdict: no significant difference between PLR and uniform sampling: PLR -0.005 held-out return vs
        uniform (95% CI [-0.029, +0.003], paired by level, over seeds and levels).'
    """
    lo, hi = ci
    gap = (
        f"{method} {mean:+.3f} held-out return vs uniform (95% CI [{lo:+.3f}, {hi:+.3f}], paired by level, "
        "over seeds and levels)"
    )
    if lo > 0:
        return f"Verdict: {method} generalised better than uniform sampling: {gap}."
    if hi < 0:
        return f"Verdict: {method} generalised worse than uniform sampling: {gap}."
    return f"Verdict: no significant difference between {method} and uniform sampling: {gap}."


def merge_seeds(runs: Sequence[Run]) -> Run:
    """One :class:`Run` from runs of the same configuration with different seeds.

    Curves: at each evaluation step, the mean over seeds of each seed's mean (and IQM) return; the band
    (``mean_lo``/``mean_hi``) is the range over seeds. Final held-out results: mean and IQM over seeds and
    levels, with the two-way bootstrap CIs of :func:`summarize_seeds`. Level scores: all seeds' scores.
    """
    first = runs[0]
    if len(runs) == 1:
        return first
    steps_per_run = [{(r["timesteps"], r["split"]) for r in run.curve} for run in runs]
    common = set.intersection(*steps_per_run)
    curve = []
    for key in sorted(common, key=lambda k: (k[1], int(float(k[0])))):
        rows = [next(r for r in run.curve if (r["timesteps"], r["split"]) == key) for run in runs]
        means = np.array([float(r["mean"]) for r in rows])
        iqms = np.array([float(r["iqm"]) for r in rows])
        curve.append(
            {
                "timesteps": key[0],
                "split": key[1],
                "n_levels": rows[0]["n_levels"],
                "mean": means.mean(),
                "mean_lo": means.min(),
                "mean_hi": means.max(),
                "iqm": iqms.mean(),
                "iqm_lo": iqms.min(),
                "iqm_hi": iqms.max(),
            }
        )
    final = None
    finals = [run.final for run in runs if run.final is not None]
    if len(finals) == len(runs) and all(f["returns"].keys() == finals[0]["returns"].keys() for f in finals):
        levels = list(finals[0]["returns"])
        matrix = np.array([[np.mean(f["returns"][lvl]) for lvl in levels] for f in finals], dtype=np.float64)
        pooled = {int(lvl): [v for f in finals for v in f["returns"][lvl]] for lvl in levels}
        seed_returns = [{int(lvl): float(np.mean(f["returns"][lvl])) for lvl in levels} for f in finals]
        final = {
            **finals[0],
            "returns": pooled,
            "seed_returns": seed_returns,  # per seed, level -> mean return (paired differences use them)
            "summary": summarize_seeds(matrix),
        }
    scores = [run.scores for run in runs if run.scores is not None]
    stats = {
        k: float(np.mean([run.sampler_stats.get(k, np.nan) for run in runs])) for k in first.sampler_stats
    }
    return Run(
        path=first.path,
        label=f"{first.label}, {len(runs)} seeds",
        config=first.config,
        curve=curve,
        final=final,
        scores=np.concatenate(scores) if scores else None,
        sampler_stats=stats,
        n_seeds=len(runs),
        seed_stats=[st for run in runs for st in run.per_seed_stats()],
    )


def format_ci(value: float, lo: float, hi: float) -> str:
    """``"value [lo, hi]"`` with three decimals."""
    return f"{value:.3f} [{lo:.3f}, {hi:.3f}]"


def results_table(runs: Sequence[Run]) -> tuple[str, list[dict[str, Any]]]:
    """A Markdown table of the runs' final held-out results, and the same data as rows (for CSV).

    Final numbers come from ``evaluation.json`` when present, else from the last ``test`` row of
    ``eval.csv``; "held-out mean over training" averages the ``test`` rows of ``eval.csv`` (an area under
    the learning curve: higher means it learned sooner); the training-level column is the last ``train``
    row. "replay share" is the share of the sampler's draws that replayed a seen level by its score and
    staleness; it is "—" for uniform runs, whose draws never use the scores. When one run is the uniform
    baseline (``config["sampler"] == "uniform"``), every other run gets the column "held-out mean −
    uniform": the difference of the final held-out means, paired by level, when both runs evaluated the
    same levels. Its bootstrap 95% CI (:func:`paired_difference`, over seeds and levels) and a verdict line
    (:func:`paired_verdict`) come only when both sides were merged from several seeds: with one seed per
    method the difference is shown without CI and the table says it is untested (one training run per
    method; a CI over levels alone says nothing about PLR against uniform).
    """
    baseline = next((run for run in runs if run.config.get("sampler") == "uniform"), None)
    rows = [_result_row(run, baseline) for run in runs]
    with_baseline = baseline is not None and len(runs) > 1
    tested = {
        id(run) for run in runs if baseline is not None and run is not baseline and _tested(run, baseline)
    }
    lines = _table_header(with_baseline, bool(tested))
    for run, r in zip(runs, rows):
        lines.append(_table_line(r, "" if not with_baseline else _baseline_cell(r, run is baseline)))
    lines.append("")
    lines += _table_notes(runs, rows, baseline, tested)
    return "\n".join(lines), rows


def _final_results(run: Run) -> tuple[int, Any, Any, Any, Any]:
    """A run's final held-out results: timesteps, mean and its CI, IQM and its CI."""
    test = run.split("test")
    if run.final is not None:
        s = run.final["summary"]
        steps = int(run.final.get("timesteps", test["timesteps"][-1] if test["timesteps"].size else 0))
        return steps, s["mean"], s["mean_ci"], s["iqm"], s["iqm_ci"]
    if test["timesteps"].size:
        mean_ci = (test["mean_lo"][-1], test["mean_hi"][-1])
        iq_ci = (test["iqm_lo"][-1], test["iqm_hi"][-1])
        return int(test["timesteps"][-1]), test["mean"][-1], mean_ci, test["iqm"][-1], iq_ci
    raise ValueError(f"{run.path}: no held-out evaluation in eval.csv")


def _result_row(run: Run, baseline: Run | None) -> dict[str, Any]:
    """One run's row of :func:`results_table` (the CSV columns)."""
    test = run.split("test")
    train = run.split("train")
    steps, mean, mean_ci, iq, iq_ci = _final_results(run)
    row: dict[str, Any] = {
        "run": run.label,
        "timesteps": steps,
        "test_mean": float(mean),
        "test_mean_lo": float(mean_ci[0]),
        "test_mean_hi": float(mean_ci[1]),
        "test_iqm": float(iq),
        "test_iqm_lo": float(iq_ci[0]),
        "test_iqm_hi": float(iq_ci[1]),
        "test_mean_over_training": float(test["mean"].mean()) if test["mean"].size else float("nan"),
        "train_mean": float(train["mean"][-1]) if train["mean"].size else float("nan"),
        "levels_seen": int(run.sampler_stats.get("num_seen", 0)),
        "replay_share": (
            float("nan")
            if run.config.get("sampler") == "uniform"
            else float(run.sampler_stats.get("replay_share", float("nan")))
        ),
        "vs_baseline": float("nan"),
        "vs_baseline_lo": float("nan"),
        "vs_baseline_hi": float("nan"),
    }
    if baseline is not None and baseline is not run:
        diff = _difference(run, baseline)
        if diff is not None:
            row["vs_baseline"] = diff[0]
            if _tested(run, baseline):
                row["vs_baseline_lo"], row["vs_baseline_hi"] = diff[1]
    if run.scores is not None and run.scores.size:
        row["score_mean"] = float(run.scores.mean())
    else:
        row["score_mean"] = float("nan")
    return row


def _table_header(with_baseline: bool, tested: bool) -> list[str]:
    """The Markdown table's header and rule."""
    header = "| run | steps | held-out mean [95% CI] |"
    if with_baseline:
        header += " held-out mean − uniform [95% CI] |" if tested else " held-out mean − uniform (1 seed) |"
    header += (
        " held-out IQM [95% CI] | held-out mean over training "
        "| train-level mean | levels seen | replay share | mean level score |"
    )
    return [header, "|" + " --- |" * (10 if with_baseline else 9)]


def _baseline_cell(r: dict[str, Any], is_baseline: bool) -> str:
    """The "held-out mean − uniform" cell of a row."""
    if is_baseline:
        return " (baseline) |"
    if np.isnan(r["vs_baseline"]):
        return " — |"
    if np.isnan(r["vs_baseline_lo"]):
        return f" {r['vs_baseline']:+.3f} (1 seed, untested) |"
    return f" {r['vs_baseline']:+.3f} [{r['vs_baseline_lo']:+.3f}, {r['vs_baseline_hi']:+.3f}] |"


def _table_line(r: dict[str, Any], baseline_cell: str) -> str:
    """A row of the Markdown table (``baseline_cell`` empty without a baseline column)."""
    train_mean = "—" if np.isnan(r["train_mean"]) else f"{r['train_mean']:.3f}"
    mean = format_ci(r["test_mean"], r["test_mean_lo"], r["test_mean_hi"])
    iq = format_ci(r["test_iqm"], r["test_iqm_lo"], r["test_iqm_hi"])
    line = f"| {r['run']} | {r['timesteps']:,} | {mean} |" + baseline_cell
    share = "—" if np.isnan(r["replay_share"]) else f"{r['replay_share']:.0%}"
    score = "—" if np.isnan(r["score_mean"]) else f"{r['score_mean']:.4f}"
    return (
        f"{line} {iq} | {r['test_mean_over_training']:.3f} | {train_mean} "
        f"| {r['levels_seen']} | {share} | {score} |"
    )


def _table_notes(
    runs: Sequence[Run], rows: list[dict[str, Any]], baseline: Run | None, tested: set[int]
) -> list[str]:
    """The lines under the table: how the CIs were made, and the verdicts (or why there is none)."""
    lines = [
        "95% CIs: percentile bootstrap over held-out levels"
        + ("; for several seeds, over seeds and levels." if any(r.n_seeds > 1 for r in runs) else ".")
    ]
    untested = [
        run
        for run, r in zip(runs, rows)
        if run is not baseline and id(run) not in tested and not np.isnan(r["vs_baseline"])
    ]
    if untested:
        one = all(run.n_seeds == 1 for run in untested) and baseline is not None and baseline.n_seeds == 1
        lines.append(
            ("One seed per method" if one else "One seed for uniform or for a method")
            + ": the difference from uniform is not tested (a CI over held-out levels says nothing about "
            "training seeds), so there is no verdict. For one, train several seeds of each: "
            "plr-gym compare --run --seeds 0 1 2 ..."
        )
    for run, r in zip(runs, rows):
        shortfall = replay_shortfall(run)
        if shortfall is not None:
            lines.append(shortfall)  # instead of a verdict: this PLR run was (nearly) uniform sampling
        elif id(run) in tested and not np.isnan(r["vs_baseline_lo"]):
            method = "PLR" if len(tested) == 1 and run.config.get("sampler") == "plr" else run.label
            lines.append(paired_verdict(r["vs_baseline"], (r["vs_baseline_lo"], r["vs_baseline_hi"]), method))
    return lines


#: A PLR run that replayed less than this share of its level draws was (almost) uniform sampling of new
#: levels: ``plr-gym compare`` and the demo give no verdict on it (:func:`replay_shortfall`).
MIN_REPLAY_SHARE = 0.1


def replay_shares(run: Run) -> list[float]:
    """The replay share of each seed of a PLR run (``[]`` for uniform runs or without a sampler file)."""
    if run.config.get("sampler") == "uniform":
        return []
    shares = [st.get("replay_share", float("nan")) for st in run.per_seed_stats()]
    return [float(x) for x in shares if not np.isnan(x)]


def replay_shortfall(run: Run) -> str | None:
    """Why ``run`` gets no verdict: one of its PLR seeds replayed less than :data:`MIN_REPLAY_SHARE` of its
    draws, so it compared uniform sampling with uniform sampling. The line names the cause (no replay
    until ``min_seen_ratio`` of the training levels were played once) and the budget that would fix it
    (at least one pass over the training levels). ``None`` when every seed replayed enough (or the shares
    are unknown).

    Example:
        >>> run = Run(Path("plr"), "plr (value_l1)", {"sampler": "plr", "timesteps": 4096, "num_levels": 40},
        ...           [], None, sampler_stats={"replay_share": 0.0, "num_seen": 27.0, "num_levels": 40.0,
        ...           "num_samples": 31.0, "min_seen_ratio": 1.0})
        >>> print(replay_shortfall(run))  # doctest: +NORMALIZE_WHITESPACE
        No verdict for plr (value_l1): PLR replayed 0% of its level draws (seeds: 0%), under 10%, so it
        sampled new levels uniformly, as the baseline does. Cause: with min_seen_ratio=1.0 PLR replays no
        level until 40 of the 40 training levels were played once, and its seeds played 27 of them in 4,096
        steps. Fix: train for at least one pass over the training levels (about 5,300 steps here, at ~132
        steps per level draw, episodes being scored at the end of each rollout; PLR's share of replays
        grows after it, so give it several passes), or give fewer --num-levels or a lower --min-seen-ratio.
    """
    stats = [st for st in run.per_seed_stats() if not np.isnan(st.get("replay_share", float("nan")))]
    if run.config.get("sampler") == "uniform" or not stats:
        return None
    shares = [st["replay_share"] for st in stats]
    if min(shares) >= MIN_REPLAY_SHARE:
        return None
    n_levels = int(max(st.get("num_levels", 0) for st in stats) or run.config.get("num_levels") or 0)
    ratio = float(stats[0].get("min_seen_ratio", run.config.get("min_seen_ratio", 1.0)))
    needed = max(1, math.ceil(ratio * n_levels))
    seen = sorted({int(st.get("num_seen", 0)) for st in stats})
    steps = max(float(st.get("timesteps", 0) or run.config.get("timesteps") or 0) for st in stats)
    if seen[0] < needed:
        seen_text = f"{seen[0]}" if len(seen) == 1 else f"{seen[0]}-{seen[-1]}"
        got = f"its seeds played {seen_text} of them in {int(steps):,} steps"
    else:
        got = f"its seeds got there only near the end of their {int(steps):,} steps"
    draws = max(float(st.get("num_samples", 0)) for st in stats)
    per_draw = steps / draws if draws else float("nan")
    rollout = int(run.config.get("n_steps") or 0) * int(run.config.get("n_envs") or 0)
    budget = (
        f"about {_round_up(needed * per_draw + rollout):,} steps here, at ~{per_draw:.0f} steps per level "
        "draw, episodes being scored at the end of each rollout; "
        if np.isfinite(per_draw)
        else ""
    )
    return (
        f"No verdict for {run.label}: PLR replayed {np.mean(shares):.0%} of its level draws (seeds: "
        f"{', '.join(f'{x:.0%}' for x in shares)}), under {MIN_REPLAY_SHARE:.0%}, so it sampled new levels "
        f"uniformly, as the baseline does. Cause: with min_seen_ratio={ratio} PLR replays no level until "
        f"{needed} of the {n_levels} training levels were played once, and {got}. Fix: train for at least "
        f"one pass over the training levels ({budget}PLR's share of replays grows after it, so give it "
        "several passes), or give fewer --num-levels or a lower --min-seen-ratio."
    )


def _round_up(steps: float) -> int:
    """``steps`` rounded up to two significant digits (a budget, not a measurement)."""
    if steps <= 0:
        return 0
    scale = 10 ** max(0, math.floor(math.log10(steps)) - 1)
    return int(math.ceil(steps / scale) * scale)


def _tested(run: Run, baseline: Run) -> bool:
    """Whether ``run`` minus ``baseline`` can be tested: several seeds on both sides."""
    return run.n_seeds > 1 and baseline.n_seeds > 1


def _difference(run: Run, baseline: Run) -> tuple[float, tuple[float, float]] | None:
    """Held-out mean of ``run`` minus ``baseline``'s, paired by level, with its 95% CI (or ``None``)."""
    if run.final is None or baseline.final is None:
        return None

    def per_seed(final: dict[str, Any]) -> list[dict[str, float]]:
        # merged runs keep one row per seed (two-way bootstrap over seeds and levels); a single run is one row
        if "seed_returns" in final:
            return [{str(k): float(v) for k, v in row.items()} for row in final["seed_returns"]]
        return [{str(k): float(np.mean(v)) for k, v in final["returns"].items()}]

    mine, theirs = per_seed(run.final), per_seed(baseline.final)
    if set(mine[0]) != set(theirs[0]):
        return None
    levels = sorted(mine[0])
    m = np.array([[row[lvl] for lvl in levels] for row in mine], dtype=np.float64)
    b = np.array([[row[lvl] for lvl in levels] for row in theirs], dtype=np.float64)
    d = paired_difference(m, b)
    return float(d["mean"]), (float(d["mean_ci"][0]), float(d["mean_ci"][1]))


def plot_comparison(runs: Sequence[Run], path: Path, title: str | None = None) -> Path:
    """Save a two-panel PNG: held-out (and training-level) return over training with 95% CI bands, and
    the distribution of the sampler's level scores at the end of training."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_curve, ax_scores) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=100)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    _plot_returns(ax_curve, runs, colors)
    _plot_score_histograms(ax_scores, runs, colors)
    if title is None and runs:
        env_id = runs[0].config.get("env_id")
        title = f"PLR vs uniform level sampling on {env_id}" if env_id else None
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def _plot_returns(ax: Any, runs: Sequence[Run], colors: list[Any]) -> None:
    """:func:`plot_comparison`'s left panel: held-out and training-level return over training."""
    for k, run in enumerate(runs):
        color = colors[k % len(colors)]
        test = run.split("test")
        if test["timesteps"].size:
            ax.plot(
                test["timesteps"], test["mean"], color=color, marker="o", ms=3, label=f"{run.label}: held-out"
            )
            ax.fill_between(test["timesteps"], test["mean_lo"], test["mean_hi"], color=color, alpha=0.2)
        train = run.split("train")
        if train["timesteps"].size:
            ax.plot(
                train["timesteps"],
                train["mean"],
                color=color,
                ls="--",
                alpha=0.7,
                label=f"{run.label}: train levels",
            )
    ax.set_xlabel("environment steps")
    ax.set_ylabel("mean episodic return")
    several = any(run.n_seeds > 1 for run in runs)
    ax.set_title(
        "Return over training (band: range over seeds)"
        if several
        else "Return over training (95% bootstrap CI)"
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def _plot_score_histograms(ax: Any, runs: Sequence[Run], colors: list[Any]) -> None:
    """:func:`plot_comparison`'s right panel: the distribution of the level scores at the end."""
    scored = [(k, run) for k, run in enumerate(runs) if run.scores is not None and run.scores.size]
    if scored:
        all_scores = np.concatenate([run.scores for _, run in scored if run.scores is not None])
        lo, hi = float(all_scores.min()), float(all_scores.max())
        bins = np.linspace(lo, hi if hi > lo else lo + 1e-6, 25)
        for k, run in scored:
            assert run.scores is not None
            ax.hist(
                run.scores,
                bins=bins,
                color=colors[k % len(colors)],
                alpha=0.5,
                label=f"{run.label} ({run.scores.size} level scores)",
            )
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no level scores recorded", ha="center", va="center", transform=ax.transAxes)
    strategy = runs[0].config.get("strategy", "score") if runs else "score"
    ax.set_xlabel(f"level score ({strategy}) at the end of training")
    ax.set_ylabel("training levels")
    ax.set_title("Level-score distribution")
    ax.grid(alpha=0.3)


#: The arrays of a ``curriculum.npz``, as :class:`~plr_gym.CurriculumLogCallback` writes them (its module's
#: ``_ARRAYS``, not imported: plotting does not need SB3; a test keeps the two equal).
_CURRICULUM_ARRAYS = ("timesteps", "levels", "weights", "visits", "scores")


def load_curriculum(path: str | os.PathLike[str]) -> dict[str, npt.NDArray[Any]]:
    """The snapshots written by :class:`~plr_gym.CurriculumLogCallback` (``curriculum.npz`` of a run).

    :raises ValueError: naming the file, if it is not a readable ``.npz`` of those snapshots.
    """
    data = load_npz(path, required=_CURRICULUM_ARRAYS)
    return {k: data[k] for k in _CURRICULUM_ARRAYS}


def _row_bins(order: npt.NDArray[np.int64], max_rows: int) -> list[npt.NDArray[np.int64]]:
    return [c for c in np.array_split(order, min(max_rows, order.size)) if c.size]


def plot_curriculum(
    history: dict[str, npt.NDArray[Any]] | str | os.PathLike[str],
    path: str | os.PathLike[str],
    difficulty: npt.NDArray[Any] | Sequence[float] | None = None,
    difficulty_label: str = "difficulty",
    max_rows: int = 200,
    title: str | None = None,
) -> Path:
    """Save a PNG of the curriculum: levels × training time heatmaps and level scores.

    Left: each level's share of the episodes started in each window between snapshots (the sampling
    share). Middle: the replay distribution ``P_replay`` at each snapshot. Rows are levels, ordered by
    ``difficulty`` (then level id) when given, else by level id; with more than ``max_rows`` levels,
    neighbouring rows are summed. Right: each level's final score against its difficulty (or, without
    ``difficulty``, against the number of episodes played on it), coloured by total visits.

    :param history: :attr:`CurriculumLogCallback.history <plr_gym.CurriculumLogCallback.history>`, or the
        path of the ``.npz`` it saves.
    :param path: the PNG to write.
    :param difficulty: one number per level, aligned with ``history["levels"]`` (e.g. the grid size of
        ``plr_gym/MiniGrid-DoorKeyGamut-v0`` levels).
    :param difficulty_label: axis label of ``difficulty``.
    :param max_rows: at most this many heatmap rows.
    :param title: figure title.

    Example:
        >>> import tempfile
        >>> h = {"timesteps": np.array([100, 200]), "levels": np.arange(4),
        ...      "weights": np.array([[0.25] * 4, [0.7, 0.1, 0.1, 0.1]]),
        ...      "visits": np.array([[1.0, 1, 1, 1], [5, 1, 0, 0]]),
        ...      "scores": np.array([[0.0] * 4, [0.9, 0.2, 0.1, 0.0]])}
        >>> out = plot_curriculum(h, Path(tempfile.mkdtemp()) / "curriculum.png", difficulty=[1, 1, 2, 2])
        >>> out.read_bytes()[:4] == b"\\x89PNG"
        True
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    h = history if isinstance(history, dict) else load_curriculum(history)
    path = Path(path)
    levels, steps, weights, visits, scores, diff = _curriculum_arrays(h, difficulty)
    order = np.lexsort((levels, diff)) if diff is not None else np.argsort(levels, kind="stable")
    bins = _row_bins(order.astype(np.int64), max_rows)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6), dpi=100, gridspec_kw={"width_ratios": [1, 1, 0.9]})
    _plot_heatmaps(fig, axes[:2], levels, steps, weights, visits, bins, diff, difficulty_label)
    _plot_final_scores(fig, axes[2], scores[-1], visits.sum(axis=0), diff, difficulty_label)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def _curriculum_arrays(h: dict[str, Any], difficulty: Any) -> tuple[Any, ...]:
    """The history's arrays (levels, timesteps, weights, visits, scores) and ``difficulty``, checked."""
    levels = np.asarray(h["levels"])
    steps = np.asarray(h["timesteps"], dtype=np.float64)
    weights = np.asarray(h["weights"], dtype=np.float64)
    visits = np.asarray(h["visits"], dtype=np.float64)
    scores = np.asarray(h["scores"], dtype=np.float64)
    if steps.size == 0:
        raise ValueError("history holds no snapshot (train for at least one rollout)")
    if weights.shape != (steps.size, levels.size) or visits.shape != weights.shape:
        raise ValueError(
            f"history arrays disagree: {steps.size} timesteps, {levels.size} levels, weights "
            f"{weights.shape}, visits {visits.shape}"
        )
    diff = None if difficulty is None else np.asarray(difficulty, dtype=np.float64)
    if diff is not None and diff.shape != levels.shape:
        raise ValueError(f"difficulty must hold one number per level ({levels.size}), got shape {diff.shape}")
    return levels, steps, weights, visits, scores, diff


def _plot_heatmaps(
    fig: Any,
    axes: Any,
    levels: Any,
    steps: Any,
    weights: Any,
    visits: Any,
    bins: list[npt.NDArray[np.int64]],
    diff: Any,
    difficulty_label: str,
) -> None:
    """:func:`plot_curriculum`'s heatmaps: sampling share and replay probability, levels × snapshots."""
    totals = visits.sum(axis=1, keepdims=True)
    share = np.divide(visits, totals, out=np.zeros_like(visits), where=totals > 0)
    share_rows = np.stack([share[:, b].sum(axis=1) for b in bins])  # (rows, snapshots)
    weight_rows = np.stack([weights[:, b].sum(axis=1) for b in bins])
    half = float(np.median(np.diff(steps))) / 2.0 if steps.size > 1 else max(float(steps[0]), 1.0) / 2.0
    extent = (float(steps[0]) - half, float(steps[-1]) + half, len(bins), 0)  # a column per snapshot
    row_label = "levels" + (f" (sorted by {difficulty_label})" if diff is not None else "")
    if any(b.size > 1 for b in bins):
        row_label += f", {len(bins)} rows"
    for ax, data, name in (
        (axes[0], share_rows, "sampling share (episodes started per window)"),
        (axes[1], weight_rows, "replay probability P_replay"),
    ):
        image = ax.imshow(data, aspect="auto", interpolation="nearest", cmap="viridis", extent=extent)
        ax.set_xlabel("environment steps")
        ax.set_ylabel(row_label)
        ax.set_title(name, fontsize=10)
        if len(bins) <= 40 and all(b.size == 1 for b in bins):
            ax.set_yticks(np.arange(len(bins)) + 0.5, [str(levels[b[0]]) for b in bins], fontsize=7)
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.02)
        if diff is not None:  # mark where the difficulty changes
            sorted_diff = diff[[b[0] for b in bins]]
            for r in np.flatnonzero(np.diff(sorted_diff)).tolist():
                ax.axhline(r + 1, color="white", lw=0.8, alpha=0.8)


def _plot_final_scores(
    fig: Any, ax: Any, final: Any, total_visits: Any, diff: Any, difficulty_label: str
) -> None:
    """:func:`plot_curriculum`'s right panel: each level's last score against its difficulty (or visits)."""
    x = diff if diff is not None else total_visits
    jitter = np.zeros(x.size)
    if diff is not None and np.unique(diff).size <= 20:  # spread the points of each difficulty apart
        spacing = float(np.ptp(diff)) / max(np.unique(diff).size - 1, 1) or 1.0
        jitter = np.random.default_rng(0).uniform(-0.15, 0.15, size=x.size) * spacing
    points = ax.scatter(x + jitter, final, c=total_visits, cmap="viridis", s=14, alpha=0.8)
    fig.colorbar(points, ax=ax, fraction=0.046, pad=0.02, label="episodes played")
    if diff is not None:
        for value in np.unique(diff):
            ax.plot(value, final[diff == value].mean(), marker="_", ms=22, mew=2.5, color="crimson")
    ax.set_xlabel(difficulty_label if diff is not None else "episodes played on the level")
    ax.set_ylabel("level score at the last snapshot")
    ax.set_title("level scores" + (" (bar: mean)" if diff is not None else ""), fontsize=10)
    ax.grid(alpha=0.3)
