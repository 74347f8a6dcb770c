"""Where the PLR paper's code trains differently from SB3: eight named choices, one registry.

``--preset paper-procgen`` copies every number of the paper's code (facebookresearch/level-replay,
commit :data:`LEVEL_REPLAY_COMMIT`). Eight *behaviours* of that code are not numbers, and Stable-Baselines3
(or the paper's text) does them differently. Each is an option of ``plr-gym train`` with both behaviours
available; :data:`REFERENCE_CHOICES` lists them with the library's default, level-replay's choice and the
file and lines that show it, and the recipes that select level-replay's. This registry is their one home:
the CLI's options (``plr_gym.options``), and with them the recipes of ``plr_gym.presets``, are derived
from it, and the documentation's tables are written from it (:func:`choices_table`).

- ``partial_episodes``: ``stitch`` (an episode crossing a rollout's end is scored once, when it ends)
  or ``commit`` (level-replay: each rollout's chunk is scored; the last chunk's score is committed);
- ``residual_skip``: ``identity`` (an IMPALA residual block adds its input ``x``) or ``relu``
  (level-replay: it adds ``ReLU(x)``, through an in-place ReLU);
- ``time_limit``: ``bootstrap`` (a time-limit ending bootstraps with ``V(s_T)``) or ``terminal``
  (level-replay: it ends the return);
- ``value_loss``: ``mse`` (``mean((R - V)^2)``) or ``clipped_max`` (level-replay:
  ``0.5 * mean(max((V - R)^2, (V_clip - R)^2))``);
- ``advantage_normalization``: ``minibatch`` (``std + 1e-8``) or ``rollout`` (level-replay: once per
  rollout, ``std + 1e-5``), or ``none``;
- ``level_draw``: ``episode_start`` (each env's next level drawn when its current episode starts) or
  ``episode_end`` (level-replay: drawn when the previous episode ends);
- ``unseen_rank``: ``seen`` (``rank`` among the seen levels) or ``zero`` (level-replay: among all levels,
  the unseen ones at score 0; matters for signed scores, e.g. ``gae``, before every level was seen);
- ``power_offset``: ``none`` (``power``: ``S^(1/β)``) or ``without_staleness`` (level-replay: ``(S +
  1e-3)^(1/β)`` when the staleness coefficient is 0).

This module imports neither torch nor Stable-Baselines3; the implementations are in
:mod:`plr_gym.scoring` (``EpisodeScorer``), :mod:`plr_gym.policies` (``ImpalaCNN``),
:mod:`plr_gym.wrappers.time_limit` (``TimeLimitAsTerminal``) and :mod:`plr_gym.ppo` (``LevelReplayPPO``).

Example:
    >>> from plr_gym.reference import REFERENCE_CHOICES, library_default_values, reference_values
    >>> len(REFERENCE_CHOICES), REFERENCE_CHOICES[0].dest, REFERENCE_CHOICES[-1].dest
    (8, 'partial_episodes', 'power_offset')
    >>> reference_values()["value_loss"], library_default_values()["value_loss"]
    ('clipped_max', 'mse')
"""

from __future__ import annotations

from dataclasses import dataclass

from plr_gym.sampler import UNSEEN_RANKS
from plr_gym.scoring import PARTIAL_EPISODES

__all__ = [
    "ADVANTAGE_NORMALIZATIONS",
    "LEVEL_DRAWS",
    "LEVEL_REPLAY_COMMIT",
    "PARTIAL_EPISODES",
    "POWER_OFFSETS",
    "REFERENCE_CHOICES",
    "REFERENCE_POWER_OFFSET",
    "RESIDUAL_SKIPS",
    "TIME_LIMITS",
    "UNSEEN_RANKS",
    "VALUE_LOSSES",
    "ReferenceChoice",
    "choices_table",
    "library_default_values",
    "power_offset",
    "reference_values",
]

#: The commit of facebookresearch/level-replay (its only one) that the file and line references name.
LEVEL_REPLAY_COMMIT = "ccecf45"

#: ``ImpalaCNN(residual_skip=...)``: ``"identity"`` adds the block's input ``x`` (Espeholt et al. 2018;
#: Baselines' and Cobbe et al.'s TensorFlow code); ``"relu"`` adds ``ReLU(x)``, as level-replay's
#: ``BasicBlock``, whose ``nn.ReLU(inplace=True)`` applied to the input overwrites the tensor it adds back.
RESIDUAL_SKIPS: tuple[str, ...] = ("identity", "relu")
#: How an episode cut by a time limit ends: ``"bootstrap"`` (SB3: the last reward gets
#: ``gamma * V(final observation)``) or ``"terminal"`` (level-replay: the return ends there).
TIME_LIMITS: tuple[str, ...] = ("bootstrap", "terminal")
#: PPO's value loss: ``"mse"`` (SB3) or ``"clipped_max"`` (level-replay, as Baselines' PPO2).
VALUE_LOSSES: tuple[str, ...] = ("mse", "clipped_max")
#: PPO's advantage normalisation: ``"minibatch"`` (SB3), ``"rollout"`` (level-replay) or ``"none"``.
ADVANTAGE_NORMALIZATIONS: tuple[str, ...] = ("minibatch", "rollout", "none")
#: ``PrioritizedLevelReplay(level_draw=...)``: ``"episode_start"`` draws env ``i``'s next level when its
#: current episode starts (queued in the sub-env), ``"episode_end"`` when it ends (level-replay).
LEVEL_DRAWS: tuple[str, ...] = ("episode_start", "episode_end")
#: ``--power-offset``: ``"none"`` (``LevelSampler(power_offset=0)``) or ``"without_staleness"``
#: (level-replay: :data:`REFERENCE_POWER_OFFSET` when the staleness coefficient is 0, else 0).
POWER_OFFSETS: tuple[str, ...] = ("none", "without_staleness")
#: What level-replay adds to every score before its ``power`` transform when ``staleness_coef == 0``.
REFERENCE_POWER_OFFSET = 1e-3


@dataclass(frozen=True)
class ReferenceChoice:
    """One behaviour where level-replay differs from the library's default.

    :param dest: the ``plr-gym train`` option's ``dest`` and ``config.json`` key.
    :param choices: the accepted values.
    :param default: the library's default (SB3's behaviour, or the paper's definition).
    :param reference: level-replay's behaviour.
    :param where: level-replay's file and lines that show it (commit :data:`LEVEL_REPLAY_COMMIT`).
    :param reference_does: what level-replay computes, in words.
    :param default_does: what the default computes, in words.
    :param implemented_by: the plr_gym name that implements both.
    :param presets: the ``--preset`` recipes that select level-replay's behaviour.
    """

    dest: str
    choices: tuple[str, ...]
    default: str
    reference: str
    where: str
    reference_does: str
    default_does: str
    implemented_by: str
    presets: tuple[str, ...] = ("paper-procgen", "paper-minigrid")

    @property
    def flag(self) -> str:
        """The command-line flag: ``--`` and ``dest`` with dashes."""
        return "--" + self.dest.replace("_", "-")


#: The choices, in the order of the documentation's table.
REFERENCE_CHOICES: tuple[ReferenceChoice, ...] = (
    ReferenceChoice(
        dest="partial_episodes",
        choices=PARTIAL_EPISODES,
        default="stitch",
        reference="commit",
        where="`level_replay/level_sampler.py` L176-191 (a rollout's last chunk: partial score from "
        "`returns[start_t:]`, `value_preds[start_t:]`), L193-200 (`after_update` commits each non-zero "
        "partial score)",
        reference_does="scores the chunk of an episode that crosses a rollout's end as if it ended there "
        "(value_l1 and gae average one more row, (0, V(s_T)): its slices of the T + 1-row storage), commits "
        "it after the rollout's completed episodes unless it is 0, and scores the rest of the episode anew",
        default_does="scores an episode that crosses a rollout's end once, over all its steps, when it ends "
        "(the paper's definition of an episode's score)",
        implemented_by="EpisodeScorer(partial_episodes=...), PLRCallback(partial_episodes=...)",
    ),
    ReferenceChoice(
        dest="residual_skip",
        choices=RESIDUAL_SKIPS,
        default="identity",
        reference="relu",
        where="`level_replay/model.py` L311 (`nn.ReLU(inplace=True)`), L319-328 (`BasicBlock.forward`)",
        reference_does="each residual block adds ReLU(x) to its convolutions' output (the in-place ReLU "
        "overwrites the input it keeps for the skip)",
        default_does="each residual block adds its input x (Espeholt et al. 2018; Baselines' IMPALA CNN)",
        implemented_by="ImpalaCNN(residual_skip=...)",
        presets=("paper-procgen",),  # the IMPALA-CNN's: only paper-procgen sets --encoder impala
    ),
    ReferenceChoice(
        dest="time_limit",
        choices=TIME_LIMITS,
        default="bootstrap",
        reference="terminal",
        where="`train.py` L162-166 (`masks` from `done`; `bad_masks` recorded), `level_replay/storage.py` "
        "L90-101 (`compute_returns` reads `masks` only)",
        reference_does="an episode ended by the time limit is terminal: its value target and GAE stop there",
        default_does="an episode ended by the time limit bootstraps: SB3 adds gamma * V(final observation) "
        "to its last reward (`infos[i]['TimeLimit.truncated']`)",
        implemented_by="TimeLimitAsTerminal (plr_gym.wrappers.time_limit)",
    ),
    ReferenceChoice(
        dest="value_loss",
        choices=VALUE_LOSSES,
        default="mse",
        reference="clipped_max",
        where="`level_replay/algo/ppo.py` L82-87 (clipped value, `0.5 * max(...)`), "
        "L91 (`* value_loss_coef`)",
        reference_does="0.5 * mean(max((V - R)^2, (V_clip - R)^2)) * value_loss_coef, V_clip within "
        "+-clip_param of the rollout's value",
        default_does="mean((R - V)^2) * vf_coef (SB3's PPO; no clipping unless clip_range_vf)",
        implemented_by="LevelReplayPPO(value_loss=...)",
    ),
    ReferenceChoice(
        dest="advantage_normalization",
        choices=ADVANTAGE_NORMALIZATIONS,
        default="minibatch",
        reference="rollout",
        where="`level_replay/algo/ppo.py` L50-52",
        reference_does="advantages normalised once per rollout: (A - mean) / (std + 1e-5)",
        default_does="advantages normalised per minibatch: (A - mean) / (std + 1e-8) (SB3's PPO)",
        implemented_by="LevelReplayPPO(advantage_normalization=...)",
    ),
    ReferenceChoice(
        dest="level_draw",
        choices=LEVEL_DRAWS,
        default="episode_start",
        reference="episode_end",
        where="`level_replay/envs.py` L147-160 (`VecPyTorchProcgen.step_wait`: `for e in done.nonzero()[0]: "
        "seed = level_sampler.sample(); self.venv.seed(seed, e)`, then `observe()`), L238-248 "
        "(`VecPyTorchMinigrid.step_wait`)",
        reference_does="each env's next level is drawn from the sampler as it is when the previous episode "
        "ends, and the env restarts on it in the same step",
        default_does="each env's next level is drawn when its current episode starts and queued in the "
        "sub-env (SB3 resets a finished sub-env inside the step), so the draw is up to one episode older",
        implemented_by="PrioritizedLevelReplay(level_draw=...) (SB3 and Gymnasium)",
    ),
    ReferenceChoice(
        dest="unseen_rank",
        choices=UNSEEN_RANKS,
        default="seen",
        reference="zero",
        where="`level_replay/level_sampler.py` L295-299 (`rank`: `scores.argsort()` over every level, the "
        "unseen ones at score 0), L263-264 (unseen levels' weights zeroed after the transform)",
        reference_does="rank over all levels, unseen ones at score 0: a seen level with a negative score "
        "(e.g. gae) ranks below every unseen level while replay starts before every level was seen",
        default_does="rank among the seen levels only (the paper's P_S over the levels that have a score)",
        implemented_by="LevelSampler(unseen_rank=...)",
    ),
    ReferenceChoice(
        dest="power_offset",
        choices=POWER_OFFSETS,
        default="none",
        reference="without_staleness",
        where="`level_replay/level_sampler.py` L300-302 (`power`: `eps = 0 if self.staleness_coef > 0 else "
        "1e-3`, `(scores + eps) ** (1/temperature)`)",
        reference_does="power transform (S + 1e-3)^(1/beta) when the staleness coefficient is 0 (S^(1/beta) "
        "otherwise)",
        default_does="power transform S^(1/beta) (the paper's definition)",
        implemented_by="LevelSampler(power_offset=...)",
    ),
)


def power_offset(choice: str, score_transform: str, staleness_coef: float) -> float:
    """``LevelSampler(power_offset=...)`` for a ``--power-offset`` choice: level-replay's
    :data:`REFERENCE_POWER_OFFSET` for ``power`` without staleness under ``"without_staleness"``, else 0.

    Example:
        >>> power_offset("without_staleness", "power", 0.0), power_offset("without_staleness", "power", 0.1)
        (0.001, 0.0)
    """
    if choice not in POWER_OFFSETS:
        raise ValueError(f"power_offset must be one of {', '.join(POWER_OFFSETS)}, got {choice!r}")
    reference = choice == "without_staleness" and score_transform == "power" and staleness_coef == 0.0
    return REFERENCE_POWER_OFFSET if reference else 0.0


def reference_values() -> dict[str, str]:
    """``dest -> level-replay's value`` for the choices."""
    return {c.dest: c.reference for c in REFERENCE_CHOICES}


def library_default_values() -> dict[str, str]:
    """``dest -> the library's default`` for the choices."""
    return {c.dest: c.default for c in REFERENCE_CHOICES}


def choices_table() -> str:
    """The choices as a Markdown table (docs/paper.md's): option, default, level-replay's, where.

    Example:
        >>> print(choices_table().splitlines()[2].split(" | ")[:3])
        ['| `--partial-episodes`', '`stitch`', '`commit`']
    """
    rows = [
        "| option | library default | level-replay (preset) | level-replay file, lines | implemented by |",
        "| --- | --- | --- | --- | --- |",
    ]
    for c in REFERENCE_CHOICES:
        rows.append(f"| `{c.flag}` | `{c.default}` | `{c.reference}` | {c.where} | `{c.implemented_by}` |")
    return "\n".join(rows)
