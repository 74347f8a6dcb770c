"""A prompt curriculum for TRL's GRPO trainer (``pip install "plr-gym[trl]"``).

:class:`CurriculumGRPOTrainer` is TRL's ``GRPOTrainer`` with the prompts of each generation batch chosen by a
:class:`~plr_gym.prompts.PromptCurriculum`; :class:`PromptCurriculumMixin` adds the same to your own
``GRPOTrainer`` subclass (``class MyTrainer(PromptCurriculumMixin, MyGRPOTrainer)``). Tested with TRL 1.16
(transformers 5.24, accelerate 1.15, torch 2.13); the methods it overrides are TRL's internals, so the extra
pins ``trl>=1.16,<1.17``.

What it changes, and where:

- ``_get_train_sampler``: a :class:`CurriculumRepeatSampler` in place of TRL's ``RepeatSampler``, with the
  same layout (each prompt index ``num_generations`` times in a row, the block of a generation batch
  repeated ``num_iterations × steps_per_generation`` times), drawing each generation batch's prompts from
  the curriculum lazily, when the data loader asks for its first index.
- ``get_train_dataloader``: the rows carry their dataset index under ``"plr_prompt_id"`` (reward functions
  receive it as a keyword argument, like every dataset column).
- ``_calculate_rewards``: after TRL gathers the rewards of every process, the prompt ids are gathered the
  same way, so every rank observes the same outcomes and keeps the same curriculum (a data-parallel run
  needs no broadcast: every rank draws the same prompts from the same state). The reward judged is TRL's
  weighted sum of the reward functions, or one of them (``curriculum_reward``).
- ``log``: ``curriculum/*`` numbers (replay share, effective number of prompts, the ``p`` histogram, seen
  share, how many drawn batches were waiting for their outcomes) go to TRL's loggers with the others.
- ``_save_checkpoint`` / ``train(resume_from_checkpoint=...)``: the curriculum is saved in every checkpoint
  (``plr_prompt_curriculum.npz``, written before the trainer's own files) with the prompt batches already
  drawn but not yet generated, and restored on resume, so a resumed run draws what the uninterrupted run
  would have. ``args.ignore_data_skip`` is set to True: skipping the batches of the resumed epoch would
  draw from the curriculum; the curriculum's state already says where training is.

**The one-batch delay.** The trainer prefetches: ``get_batch_samples`` takes the gradient-accumulation
batches of a step at once, and accelerate's data loader fetches one batch ahead to detect the end of an
epoch. So generation batch ``t + 1`` is requested before the rewards of batch ``t`` are known. The sampler
therefore draws at fixed points of the outcome stream (``curriculum_lookahead=1``): two batches before any
outcome, then batch ``t + 2`` right after the outcomes of batch ``t``, whatever the epoch boundaries; batch
``t``'s outcomes first shape batch ``t + 2``, and a resumed run draws what the uninterrupted one drew. The
``curriculum/draws_ahead`` metric reports the lag. ``curriculum_lookahead=0`` draws on demand (no fixed
lag, e.g. with ``num_iterations > 1``, where the next batch is requested after the outcomes; exact resumes
are then not guaranteed). ``dataloader_num_workers > 0`` runs ``prefetch_factor`` batches further ahead;
those are drawn on demand.

**Filtering** (``PromptCurriculum(filter_groups=True)``): the completions of groups whose outcomes are all
equal are removed from the loss (their completion mask is zeroed and the token count recomputed), as in DAPO's
dynamic sampling, but without its over-sampling: TRL's batch keeps its size, so fewer completions train.

Example (a sketch; ``model`` and ``dataset`` are yours)::

    from trl import GRPOConfig
    from plr_gym.prompts import PromptCurriculum
    from plr_gym.trl import CurriculumGRPOTrainer

    trainer = CurriculumGRPOTrainer(
        model=model, reward_funcs=[accuracy_reward], train_dataset=dataset,
        args=GRPOConfig(output_dir="out", num_generations=8, save_steps=100),
        curriculum=PromptCurriculum(len(dataset), seed=0),
    )
    trainer.train()                                # or trainer.train(resume_from_checkpoint=True)
"""

from __future__ import annotations

import logging
import os
from collections import deque
from collections.abc import Iterator, Sized
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, IterableDataset, Sampler
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint
from trl import GRPOConfig
from trl.trainer.grpo_trainer import GRPOTrainer

from plr_gym.prompts import PromptCurriculum

__all__ = [
    "CURRICULUM_FILE",
    "PROMPT_ID_KEY",
    "CurriculumGRPOConfig",
    "CurriculumGRPOTrainer",
    "CurriculumRepeatSampler",
    "PromptCurriculumMixin",
]

logger = logging.getLogger(__name__)

#: The curriculum's file in each checkpoint directory.
CURRICULUM_FILE = "plr_prompt_curriculum.npz"
#: The key under which each training row carries its dataset index.
PROMPT_ID_KEY = "plr_prompt_id"


class _IndexedDataset(Dataset[dict[str, Any]]):
    """A map-style dataset whose rows (dicts) also carry their index under :data:`PROMPT_ID_KEY`."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> dict[str, Any]:
        row = self.dataset[index]
        if not isinstance(row, dict):
            raise TypeError(f"train_dataset rows must be dicts (TRL's format), got {type(row).__name__}")
        if PROMPT_ID_KEY in row:
            raise ValueError(f"train_dataset has a column named {PROMPT_ID_KEY!r}, which the curriculum uses")
        return {**row, PROMPT_ID_KEY: int(index)}


class CurriculumRepeatSampler(Sampler[int]):
    """TRL's ``RepeatSampler`` layout, with each generation batch's prompts drawn from a curriculum.

    Per generation batch: ``ids = curriculum.next_prompts(batch_size)``, then ``repeat_count`` times
    ``[i, i, ... (mini_repeat_count times) for i in ids]``. A pass yields ``len(data_source) // batch_size``
    generation batches, as ``RepeatSampler`` does, so the trainer's epoch arithmetic is unchanged.

    **When it draws.** Batches are drawn at fixed points of the outcome stream, not when the data loader
    happens to ask: the first ``lookahead + 1`` batches before any outcome, then batch ``t + lookahead + 1``
    right after the outcomes of batch ``t`` (:meth:`observed`). So batch ``t``'s outcomes first shape batch
    ``t + lookahead + 1``, whatever the epoch boundaries and the loader's prefetching, and a resumed run
    draws exactly what the uninterrupted one drew. ``lookahead=1`` covers TRL's prefetch (see the module);
    a loader that runs further ahead gets extra batches drawn on demand (then timing-dependent).

    :attr:`pending` lists the drawn batches whose outcomes have not arrived (saved with checkpoints);
    :meth:`replay_first` hands such batches out again, first, after a resume.
    """

    def __init__(
        self,
        data_source: Sized,
        curriculum: PromptCurriculum,
        mini_repeat_count: int,
        batch_size: int,
        repeat_count: int = 1,
        lookahead: int = 1,
    ) -> None:
        for name, value, low in (
            ("mini_repeat_count", mini_repeat_count, 1),
            ("batch_size", batch_size, 1),
            ("repeat_count", repeat_count, 1),
            ("lookahead", lookahead, 0),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
        if len(data_source) != curriculum.num_prompts:
            raise ValueError(
                f"the curriculum has num_prompts={curriculum.num_prompts} but the dataset has "
                f"{len(data_source)} rows; build it as PromptCurriculum(len(train_dataset), ...)"
            )
        self.curriculum = curriculum
        self.mini_repeat_count = mini_repeat_count
        self.batch_size = batch_size
        self.repeat_count = repeat_count
        self.lookahead = lookahead
        self.num_batches = len(data_source) // batch_size
        self._out: deque[np.ndarray[Any, np.dtype[np.int64]]] = deque()  # handed out, outcomes not in
        self._ready: deque[np.ndarray[Any, np.dtype[np.int64]]] = deque()  # drawn, not handed out

    def __len__(self) -> int:
        return self.num_batches * self.batch_size * self.mini_repeat_count * self.repeat_count

    @property
    def pending(self) -> list[np.ndarray[Any, np.dtype[np.int64]]]:
        """The drawn batches whose outcomes have not arrived, oldest first."""
        return [*self._out, *self._ready]

    def replay_first(self, batches: list[list[int]]) -> None:
        """Hand out ``batches`` (prompt ids, ``batch_size`` each) before drawing new ones (a resume)."""
        checked = []
        for batch in batches:
            ids = np.asarray(batch, dtype=np.int64)
            if (
                ids.shape != (self.batch_size,)
                or (ids < 0).any()
                or (ids >= self.curriculum.num_prompts).any()
            ):
                raise ValueError(
                    f"a pending batch must hold {self.batch_size} prompt ids in "
                    f"[0, {self.curriculum.num_prompts}), got {batch!r}"
                )
            checked.append(ids)
        self._ready.extend(checked)

    def _top_up(self) -> None:
        while len(self._out) + len(self._ready) < self.lookahead + 1:
            self._ready.append(self.curriculum.next_prompts(self.batch_size))

    def __iter__(self) -> Iterator[int]:
        self._top_up()
        for _ in range(self.num_batches):
            if not self._ready:  # the loader runs further ahead than lookahead
                self._ready.append(self.curriculum.next_prompts(self.batch_size))
            ids = self._ready.popleft()
            self._out.append(ids)
            block = np.repeat(ids, self.mini_repeat_count).tolist()
            for _ in range(self.repeat_count):
                yield from block

    def observed(
        self, completion_ids: np.ndarray[Any, Any], outcomes: Any, scored: np.ndarray[Any, Any] | None = None
    ) -> tuple[np.ndarray[Any, np.dtype[np.bool_]], int]:
        """The outcomes of the oldest handed-out batch: ``completion_ids`` (its prompt id per completion,
        gathered over the processes) and ``outcomes`` (rewards, one per completion; only where ``scored``,
        if given) go to ``curriculum.observe``, each block of ``mini_repeat_count`` completions one group (as
        TRL groups them for its advantages); then the next batch is drawn. Returns ``observe``'s keep
        mask (True where not scored) and how many batches had been drawn ahead of this one."""
        if not self._out:
            raise RuntimeError(
                "outcomes arrived for a generation batch the curriculum sampler never handed out"
            )
        expected = np.repeat(self._out[0], self.mini_repeat_count)
        got = np.asarray(completion_ids)
        if got.shape != expected.shape or not np.array_equal(np.sort(got), np.sort(expected)):
            raise RuntimeError(
                "the prompts of this generation batch are not the ones the curriculum drew "
                f"(got {sorted(set(got.tolist()))[:8]}, drew {sorted(set(self._out[0].tolist()))[:8]}); "
                "the trainer's batch layout differs from TRL 1.16's"
            )
        blocks = got.reshape(-1, self.mini_repeat_count)
        if not (blocks == blocks[:, :1]).all():
            raise RuntimeError(
                "the completions of this generation batch are not in blocks of num_generations per prompt; "
                "the trainer's batch layout differs from TRL 1.16's"
            )
        # TRL's groups: consecutive blocks of num_generations (a prompt drawn twice is two groups)
        groups = np.arange(got.size) // self.mini_repeat_count
        keep = np.ones(got.size, dtype=bool)
        scored = np.ones(got.size, dtype=bool) if scored is None else np.asarray(scored, dtype=bool)
        # a refused input raises here, before anything is popped
        keep[scored] = self.curriculum.observe(
            got[scored], np.asarray(outcomes)[scored], groups=groups[scored]
        )
        self._out.popleft()
        ahead = len(self._out) + len(self._ready)
        self._top_up()
        return keep, ahead


@dataclass
class CurriculumGRPOConfig(GRPOConfig):  # type: ignore[misc,unused-ignore]
    """TRL's ``GRPOConfig`` with the options of the curriculum that the trainer builds when it is given none.

    Being fields of the config, they come from TRL's command line and YAML files like the others
    (``TrlParser``), e.g. ``curriculum_reward_range: [-1, 1]``. Each maps to the
    :class:`~plr_gym.prompts.PromptCurriculum` argument of the same name without ``curriculum_``
    (``seed`` is the config's ``seed``); ``curriculum_reward`` is the trainer's argument (which reward
    function is judged: a name or a position; default the weighted sum GRPO uses). A trainer given its own
    ``curriculum=`` refuses a config whose ``curriculum_*`` options are not at their defaults.

    Example:
        >>> cfg = CurriculumGRPOConfig(
        ...     output_dir="out", use_cpu=True, report_to="none", curriculum_reward_range=[-1.0, 1.0]
        ... )
        >>> cfg.curriculum_options()["reward_range"]
        (-1.0, 1.0)
        >>> noisy = CurriculumGRPOConfig(
        ...     output_dir="out", use_cpu=True, report_to="none",
        ...     curriculum_reward_noise=0.15, curriculum_replay_prob="0.9",
        ... )
        >>> noisy.curriculum_options()["reward_noise"], noisy.curriculum_options()["replay_prob"]
        (0.15, 0.9)
    """

    curriculum_method: str = field(default="learnability", metadata={"help": "learnability or thompson"})
    curriculum_spread: str = field(
        default="variance", metadata={"help": "learnability score: variance or std"}
    )
    curriculum_reward_range: list[float] | None = field(
        default=None, metadata={"help": "the judged reward's range [low, high]; default: any finite reward"}
    )
    curriculum_success_threshold: float | None = field(
        default=None,
        metadata={"help": "a reward >= this is a success; default: the middle of the range, or 0.5"},
    )
    curriculum_uniform_mass: float | None = field(
        default=None,
        metadata={
            "help": "uniform floor of the draws; default: the curriculum's (0 while estimates age, else 0.1)"
        },
    )
    curriculum_filter_groups: bool = field(
        default=False, metadata={"help": "drop groups whose rewards are all equal from the loss"}
    )
    curriculum_replay_prob: str = field(
        default="auto",
        metadata={"help": 'replay probability: "auto" (set from the dataset size) or a number in [0, 1]'},
    )
    curriculum_reward_noise: float = field(
        default=0.0,
        metadata={"help": "share of wrong rewards to discount (noisy judges): about 1.5 x the flip rate"},
    )
    curriculum_reward: str | None = field(
        default=None, metadata={"help": "judge this reward function (name or position), not the weighted sum"}
    )

    def curriculum_options(self) -> dict[str, Any]:
        """The :class:`~plr_gym.prompts.PromptCurriculum` keyword arguments of these fields (not ``seed``)."""
        rr = self.curriculum_reward_range
        return {
            "method": self.curriculum_method,
            "spread": self.curriculum_spread,
            "reward_range": None if rr is None else tuple(rr),
            "success_threshold": self.curriculum_success_threshold,
            "uniform_mass": self.curriculum_uniform_mass,
            "filter_groups": self.curriculum_filter_groups,
            "replay_prob": _replay_prob_option(self.curriculum_replay_prob),
            "reward_noise": self.curriculum_reward_noise,
        }


def _replay_prob_option(value: Any) -> float | str:
    """``curriculum_replay_prob`` as ``PromptCurriculum`` takes it: ``"auto"`` or a number (from the
    command line every value is a string; from YAML a number stays one)."""
    if value == "auto":
        return "auto"
    try:
        if isinstance(value, bool):
            raise TypeError
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(
            f'curriculum_replay_prob must be "auto" or a number in [0, 1], got {value!r}'
        ) from None


def _curriculum_fields_changed(args: Any) -> list[str]:
    if not isinstance(args, CurriculumGRPOConfig):
        return []
    return [
        f.name
        for f in fields(CurriculumGRPOConfig)
        if f.name.startswith("curriculum_") and getattr(args, f.name) != f.default
    ]


def _trainer_curriculum(curriculum: Any, config: Any, num_prompts: int) -> Any:
    """The mixin's curriculum: the one passed (refused with the config's curriculum_* options set), else
    one built from the config."""
    if curriculum is None and isinstance(config, CurriculumGRPOConfig):
        try:
            return PromptCurriculum(num_prompts, seed=config.seed, **config.curriculum_options())
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"CurriculumGRPOConfig's curriculum_* options: {exc}") from exc
    if curriculum is None:
        return PromptCurriculum(num_prompts, seed=config.seed)
    if _curriculum_fields_changed(config):
        changed = [n for n in _curriculum_fields_changed(config) if n != "curriculum_reward"]
        if changed:
            raise ValueError(
                f"the config sets {', '.join(changed)} but a curriculum was passed, which would ignore "
                "them: set them on the PromptCurriculum, or pass curriculum=None"
            )
    return curriculum


def _merged_reward(curriculum_reward: Any, config_reward: Any) -> Any:
    """The mixin's ``curriculum_reward`` and the config's, which must agree where both are set."""
    if config_reward is None:
        return curriculum_reward
    # TrlParser gives strings: "0" names the first reward function, as the int 0 does
    if isinstance(config_reward, str) and config_reward.isdigit():
        config_reward = int(config_reward)
    if curriculum_reward is not None and curriculum_reward != config_reward:
        raise ValueError(
            f"curriculum_reward={curriculum_reward!r} differs from the config's {config_reward!r}"
        )
    return config_reward


def _reward_index(curriculum_reward: Any, names: list[str]) -> int | None:
    """``curriculum_reward`` as the position of a reward function in ``names`` (``None``: their sum)."""
    if curriculum_reward is None:
        return None
    if isinstance(curriculum_reward, str):
        if curriculum_reward not in names:
            raise ValueError(f"curriculum_reward={curriculum_reward!r} is not one of {names}")
        return names.index(curriculum_reward)
    if isinstance(curriculum_reward, bool) or not isinstance(curriculum_reward, int):
        raise TypeError(f"curriculum_reward must be an int, a str or None, got {curriculum_reward!r}")
    if not 0 <= curriculum_reward < len(names):
        raise ValueError(f"curriculum_reward={curriculum_reward} is not in [0, {len(names)})")
    return curriculum_reward


class PromptCurriculumMixin:
    """Adds a :class:`~plr_gym.prompts.PromptCurriculum` to a TRL ``GRPOTrainer`` (put it first in the bases).

    :param curriculum: the curriculum; ``None`` builds ``PromptCurriculum(len(train_dataset),
        seed=args.seed)``, with the options of a :class:`CurriculumGRPOConfig` if ``args`` is one. Its
        ``num_prompts`` must be the training set's length (prompt id = row index).
    :param curriculum_reward: which reward is judged: ``None`` (default) the weighted sum of the reward
        functions, which GRPO's advantages are computed from, or one reward function, by position or name
        (e.g. an accuracy reward next to a format reward). The default curriculum takes any finite reward
        (its score is the reward's spread, whatever its scale), so a sum of several functions needs no
        option; give ``reward_range`` (``CurriculumGRPOConfig.curriculum_reward_range``) to have rewards
        outside it refused, and ``success_threshold`` for the success rate that the stats report.
    :param curriculum_lookahead: how many generation batches are drawn ahead of the outcomes (default 1,
        TRL's prefetch; see the module's note on the delay).
    :param args, kwargs: those of the trainer.
    """

    curriculum: PromptCurriculum
    curriculum_sampler: CurriculumRepeatSampler | None

    def __init__(
        self,
        *args: Any,
        curriculum: PromptCurriculum | None = None,
        curriculum_reward: int | str | None = None,
        curriculum_lookahead: int = 1,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        trainer: Any = self
        dataset = trainer.train_dataset
        if dataset is None or isinstance(dataset, IterableDataset) or not hasattr(dataset, "__getitem__"):
            raise TypeError(
                "a prompt curriculum needs a map-style train_dataset (indexable, with a length), got "
                f"{type(dataset).__name__}"
            )
        config = trainer.args
        curriculum = _trainer_curriculum(curriculum, config, len(dataset))
        curriculum_reward = _merged_reward(curriculum_reward, getattr(config, "curriculum_reward", None))
        if not isinstance(curriculum, PromptCurriculum):
            raise TypeError(f"curriculum must be a PromptCurriculum, got {type(curriculum).__name__}")
        if curriculum.num_prompts != len(dataset):
            raise ValueError(
                f"curriculum.num_prompts={curriculum.num_prompts} but train_dataset has {len(dataset)} rows"
            )
        curriculum_reward = _reward_index(curriculum_reward, list(trainer.reward_func_names))
        self.curriculum = curriculum
        if isinstance(curriculum_lookahead, bool) or not isinstance(curriculum_lookahead, int):
            raise TypeError(f"curriculum_lookahead must be an int >= 0, got {curriculum_lookahead!r}")
        if curriculum_lookahead < 0:
            raise ValueError(f"curriculum_lookahead must be an int >= 0, got {curriculum_lookahead}")
        self.curriculum_reward = curriculum_reward
        self.curriculum_lookahead = curriculum_lookahead
        self.curriculum_sampler = None
        self._curriculum_resume: list[list[int]] = []
        self._curriculum_keep: np.ndarray[Any, np.dtype[np.bool_]] | None = None
        self._curriculum_window = (0, 0)  # (replays, explores) at the last log
        self._curriculum_ahead: list[int] = []
        if not trainer.args.ignore_data_skip:
            logger.info(
                "plr_gym: setting args.ignore_data_skip=True (the curriculum's state says where training is)"
            )
            trainer.args.ignore_data_skip = True

    # ------------------------------------------------------------------ data
    def get_train_dataloader(self) -> Any:
        trainer: Any = self
        return trainer._get_dataloader(
            dataset=_IndexedDataset(trainer.train_dataset),
            description="Training",
            batch_size=trainer._train_batch_size * trainer.args.steps_per_generation,
            sampler_fn=self._get_train_sampler,
            is_training=True,
        )

    def _get_train_sampler(self, dataset: Any = None) -> Sampler[int]:
        trainer: Any = self
        if dataset is None:
            dataset = trainer.train_dataset
        sampler = CurriculumRepeatSampler(
            dataset,
            self.curriculum,
            mini_repeat_count=trainer.num_generations,
            batch_size=trainer.args.generation_batch_size // trainer.num_generations,
            repeat_count=trainer.num_iterations * trainer.args.steps_per_generation,
            lookahead=self.curriculum_lookahead,
        )
        sampler.replay_first(self._curriculum_resume)
        self._curriculum_resume = []
        self.curriculum_sampler = sampler
        return sampler

    # ------------------------------------------------------------------ outcomes
    def _calculate_rewards(self, inputs: list[dict[str, Any]], *args: Any, **kwargs: Any) -> torch.Tensor:
        trainer: Any = self
        rewards_per_func: torch.Tensor = super()._calculate_rewards(inputs, *args, **kwargs)  # type: ignore[misc,unused-ignore]
        if not trainer.model.training or self.curriculum_sampler is None:
            return rewards_per_func  # evaluation: the curriculum learns from training batches only
        device = rewards_per_func.device
        local = torch.tensor([int(row[PROMPT_ID_KEY]) for row in inputs], dtype=torch.long, device=device)
        ids = trainer.accelerator.gather(local).cpu().numpy()
        if self.curriculum_reward is None:
            weights = trainer.reward_weights.to(device).unsqueeze(0)
            per_completion = (rewards_per_func * weights).nansum(dim=1)
        else:
            per_completion = rewards_per_func[:, self.curriculum_reward]
        scorable = ~torch.isnan(rewards_per_func).all(dim=1)
        if self.curriculum_reward is not None:
            scorable &= ~torch.isnan(per_completion)
        rewards = per_completion.detach().float().cpu().numpy()
        mask = scorable.cpu().numpy()
        # completions no reward function could score (all None) are left out of the curriculum's counts
        keep, ahead = self.curriculum_sampler.observed(ids, rewards, mask)
        self._curriculum_ahead.append(ahead)
        self._curriculum_keep = keep
        return rewards_per_func

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        trainer: Any = self
        self._curriculum_keep = None
        output: dict[str, Any] = super()._generate_and_score_completions(inputs)  # type: ignore[misc,unused-ignore]
        keep = self._curriculum_keep
        if keep is None or keep.all():
            return output
        n = len(inputs)
        start = trainer.accelerator.process_index * n
        local = torch.as_tensor(keep[start : start + n], device=output["completion_mask"].device)
        output["completion_mask"] = output["completion_mask"] * local.unsqueeze(1).to(
            output["completion_mask"].dtype
        )
        loss_mask = output["completion_mask"]
        if "tool_mask" in output:
            loss_mask = loss_mask * output["tool_mask"]
        output["num_items_in_batch"] = trainer.accelerator.gather(loss_mask.sum()).sum()
        return output

    # ------------------------------------------------------------------ logging
    def log(self, logs: dict[str, float], *args: Any, **kwargs: Any) -> None:
        trainer: Any = self
        if trainer.model.training and self.curriculum_sampler is not None and "loss" in logs:
            sampler = self.curriculum.sampler
            replays, explores = sampler.num_replay_samples, sampler.num_explore_samples
            r0, e0 = self._curriculum_window
            stats = self.curriculum.stats()
            stats.pop("replay_share", None)
            if (replays - r0) + (explores - e0):
                stats["replay_share"] = (replays - r0) / ((replays - r0) + (explores - e0))
            self._curriculum_window = (replays, explores)
            if self._curriculum_ahead:
                stats["draws_ahead"] = float(np.mean(self._curriculum_ahead))
                self._curriculum_ahead = []
            logs = {**logs, **{f"curriculum/{k}": v for k, v in stats.items()}}
        super().log(logs, *args, **kwargs)  # type: ignore[misc,unused-ignore]

    # ------------------------------------------------------------------ checkpoints
    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        trainer: Any = self
        if trainer.args.should_save:
            folder = f"{PREFIX_CHECKPOINT_DIR}-{trainer.state.global_step}"
            output_dir = os.path.join(trainer._get_output_dir(trial=trial), folder)
            os.makedirs(output_dir, exist_ok=True)
            pending = [] if self.curriculum_sampler is None else list(self.curriculum_sampler.pending)
            self.curriculum.save(
                os.path.join(output_dir, CURRICULUM_FILE),
                extra={"pending": [ids.tolist() for ids in pending]},
            )
        super()._save_checkpoint(model, trial)  # type: ignore[misc,unused-ignore]

    def load_curriculum(self, checkpoint: str | os.PathLike[str]) -> None:
        """Restore the curriculum (and the batches it had drawn ahead) from a checkpoint directory."""
        path = os.path.join(checkpoint, CURRICULUM_FILE)
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"{os.fspath(checkpoint)} has no {CURRICULUM_FILE}: it was not written by a curriculum "
                "trainer (resuming would restart the curriculum from scratch)"
            )
        extra = self.curriculum.load_from(path) or {}
        pending = extra.get("pending", [])
        if not isinstance(pending, list):
            raise ValueError(f"{path}: 'pending' must be a list of prompt-id lists")
        self._curriculum_resume = pending

    def train(self, resume_from_checkpoint: str | bool | None = None, *args: Any, **kwargs: Any) -> Any:
        """TRL's ``train``; on ``resume_from_checkpoint`` the curriculum is restored first."""
        trainer: Any = self
        checkpoint = resume_from_checkpoint
        if checkpoint is True:
            checkpoint = get_last_checkpoint(trainer.args.output_dir)  # type: ignore[no-untyped-call,unused-ignore]
            # None: the trainer raises its own "no valid checkpoint" error below
        if isinstance(checkpoint, (str, os.PathLike)):
            self.load_curriculum(checkpoint)
        return super().train(resume_from_checkpoint, *args, **kwargs)  # type: ignore[misc,unused-ignore]


class CurriculumGRPOTrainer(PromptCurriculumMixin, GRPOTrainer):  # type: ignore[misc,unused-ignore]
    """TRL's ``GRPOTrainer`` drawing its prompts from a :class:`~plr_gym.prompts.PromptCurriculum`.

    Takes ``GRPOTrainer``'s arguments plus ``curriculum`` and ``curriculum_reward`` (see
    :class:`PromptCurriculumMixin`); everything else is TRL's.
    """
