"""A prompt curriculum for verl's PPO/GRPO trainer: a subclass of its ``AbstractCurriculumSampler``.

verl 0.5 to 0.7 (tested: 0.7.1) ships the interface
``verl.experimental.dataset.sampler.AbstractCurriculumSampler``: its trainer builds the sampler named in the
data config, hands it to a ``torchdata`` ``StatefulDataLoader``, and after every training step calls
``sampler.update(batch=batch)`` with the step's ``DataProto`` (every completion, rewarded).
:class:`PromptCurriculumSampler` implements it with a :class:`~plr_gym.prompts.PromptCurriculum`::

    python -m verl.trainer.main_ppo ... \\
        data.sampler.class_path=pkg://plr_gym.verl data.sampler.class_name=PromptCurriculumSampler \\
        data.dataloader_num_workers=0 \\
        +data.sampler.plr.method=learnability +data.sampler.plr.uniform_mass=0.1

Options under ``data.sampler.plr`` are :class:`~plr_gym.prompts.PromptCurriculum`'s keyword arguments
(``seed`` defaults to ``data.seed``), plus ``reward_key`` (the ``batch.batch`` tensor whose sum over tokens is
a completion's reward; default ``"token_level_scores"``, the verifier's score before any KL penalty).

What it reads from each batch: the prompt id of every completion is ``batch.non_tensor_batch["index"]``,
which verl's ``RLHFDataset`` takes from each row's ``extra_info.index``; verl's preprocessing scripts set it
to the row's position, which is what the curriculum needs (a batch whose ids are not the ones drawn is
refused with an error saying so).

Timing: verl's loader (``num_workers=0``, which verl requires for curriculum samplers) fetches a batch only
when the trainer asks, after the previous step's ``update``: each batch is drawn with every earlier
outcome known (no delay). Checkpoints: the sampler is ``Stateful`` (``state_dict``/``load_state_dict``), so
verl's ``data.pt`` holds the curriculum and the position in the epoch; verl saves a checkpoint *before*
calling ``update`` for that step, so a run resumed from it has not seen the last step's outcomes (one batch
of evidence, against the uninterrupted run).

verl 0.8.0 and later (0.9.1 checked) no longer have the interface: their wheels hold no
``verl/experimental/dataset`` and ``main_ppo`` no longer reads ``data.sampler``; this module needs verl < 0.8.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sized
from typing import Any

import numpy as np
from verl.experimental.dataset.sampler import AbstractCurriculumSampler

from plr_gym.prompts import PromptCurriculum

__all__ = ["PromptCurriculumSampler"]

_STATE_VERSION = 1


def _get(config: Any, key: str, default: Any = None) -> Any:
    getter = getattr(config, "get", None)
    if getter is None:
        return default
    value = getter(key, default)
    return default if value is None else value


class PromptCurriculumSampler(AbstractCurriculumSampler):  # type: ignore[misc,unused-ignore]
    """verl's curriculum sampler interface over a :class:`~plr_gym.prompts.PromptCurriculum`.

    :param data_source: verl's training dataset (its length is the number of prompts).
    :param data_config: verl's ``data`` config: ``gen_batch_size`` (else ``train_batch_size``) is the
        number of prompts drawn at once, ``seed`` the default seed, ``sampler.plr`` the curriculum's options.
    """

    def __init__(self, data_source: Sized, data_config: Any) -> None:
        n = len(data_source)
        batch_size = _get(data_config, "gen_batch_size") or _get(data_config, "train_batch_size")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or not 1 <= batch_size <= n:
            raise ValueError(
                f"data.train_batch_size (or gen_batch_size) must be an int in [1, {n}], got {batch_size!r}"
            )
        options = dict(_get(_get(data_config, "sampler", {}), "plr", {}) or {})
        self.reward_key = str(options.pop("reward_key", "token_level_scores"))
        options.setdefault("seed", _get(data_config, "seed"))
        for key in ("prior", "reward_range"):  # YAML lists (omegaconf ListConfig) -> pairs
            if options.get(key) is not None and not isinstance(options[key], str):
                options[key] = tuple(options[key])
        try:
            self.curriculum = PromptCurriculum(n, **options)
        except TypeError as exc:
            raise TypeError(f"data.sampler.plr: {exc}") from exc
        self.batch_size = int(batch_size)
        self.num_batches = n // self.batch_size
        self._position = 0  # batches handed out in the current pass
        self._out: deque[np.ndarray[Any, np.dtype[np.int64]]] = deque()  # handed out, no outcomes yet

    def __len__(self) -> int:
        return self.num_batches * self.batch_size

    def __iter__(self) -> Iterator[int]:
        while self._position < self.num_batches:
            ids = self.curriculum.next_prompts(self.batch_size)
            self._out.append(ids)
            self._position += 1
            yield from ids.tolist()
        self._position = 0

    def update(self, batch: Any) -> None:
        """A trained step's ``DataProto``: every completion's prompt id and reward go to the curriculum."""
        if not self._out:
            raise RuntimeError("update() for a batch the curriculum sampler never handed out")
        try:
            ids = np.asarray(batch.non_tensor_batch["index"])
            scores = batch.batch[self.reward_key]
        except KeyError as exc:
            raise KeyError(
                f"the batch lacks {exc}: the sampler reads non_tensor_batch['index'] (each row's "
                f"extra_info.index) and batch[{self.reward_key!r}] (data.sampler.plr.reward_key)"
            ) from exc
        rewards = (
            scores.detach().float().sum(dim=-1).cpu().numpy() if scores.ndim > 1 else scores.cpu().numpy()
        )
        if ids.dtype == object:
            ids = ids.astype(np.int64)
        drawn = self._out[0]
        if set(np.unique(ids).tolist()) != set(drawn.tolist()):
            raise ValueError(
                "the batch's prompt ids (non_tensor_batch['index'], from extra_info.index) are not the "
                f"dataset positions the curriculum drew ({sorted(set(ids.tolist()))[:8]} against "
                f"{sorted(set(drawn.tolist()))[:8]}); set extra_info.index to each row's position"
            )
        self.curriculum.observe(ids, rewards)
        self._out.popleft()

    # torchdata's Stateful protocol: verl's StatefulDataLoader saves this in its checkpoints
    def state_dict(self) -> dict[str, Any]:
        """The curriculum's state, the position in the current pass and the batches awaiting outcomes."""
        return {
            "version": _STATE_VERSION,
            "curriculum": self.curriculum.state_dict(),
            "position": self._position,
            "pending": [ids.tolist() for ids in self._out],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`. Batches that were handed out before the save and never updated are
        dropped: the resumed loader does not hand them out again (verl trained on them already)."""
        if not isinstance(state, dict) or state.get("version") != _STATE_VERSION:
            raise ValueError("not a PromptCurriculumSampler state")
        position = state.get("position")
        if (
            isinstance(position, bool)
            or not isinstance(position, int)
            or not 0 <= position <= self.num_batches
        ):
            raise ValueError(f"state 'position' must be an int in [0, {self.num_batches}], got {position!r}")
        self.curriculum.load_state_dict(state["curriculum"])
        self._position = position
        self._out.clear()
