"""A prompt curriculum for verl's PPO/GRPO trainer: a dataset class (verl 0.7-0.9) or a sampler (0.5-0.7).

Two hooks, each verl's own:

:class:`PromptCurriculumDataset` (verl 0.7.1 and 0.9.1 tested; ``data.custom_cls``)
    A subclass of verl's ``RLHFDataset``. verl builds the training set with the class named in
    ``data.custom_cls`` and, at the end of each training step, calls the dataset's ``on_batch_end(batch)``
    with the step's ``DataProto`` (every completion, rewarded). The dataset hands the data loader the rows
    that a :class:`~plr_gym.prompts.PromptCurriculum` draws (whatever index the loader's sampler asks
    for), tags each with its row position (``extra_info["plr_prompt_id"]``, which verl keeps beside the
    completions), and feeds ``on_batch_end``'s outcomes back. Row positions, not ``extra_info.index``: a
    filtered dataset (``filter_overlong_prompts``), ``train_max_samples`` and several ``train_files`` work.
    verl calls ``on_batch_end`` in its ``RayPPOTrainer`` (verl 0.7; in 0.9 the legacy trainer,
    ``trainer.use_v1=false``); verl 0.9's default V1 trainer does not, and the dataset refuses to draw a
    second batch before the first one's outcomes have come (``RuntimeError`` naming the fix)::

        python -m verl.trainer.main_ppo ... trainer.use_v1=false data.dataloader_num_workers=0 \\
            data.custom_cls.path=pkg://plr_gym.verl data.custom_cls.name=PromptCurriculumDataset \\
            +data.plr.method=learnability +data.plr.reward_range=[-1,1]

:class:`PromptCurriculumSampler` (verl 0.5 to 0.7; ``data.sampler``)
    verl 0.5 to 0.7 ship ``verl.experimental.dataset.sampler.AbstractCurriculumSampler``: the trainer builds
    the sampler named in the data config and calls ``sampler.update(batch=batch)`` after every step.
    verl 0.8 removed the interface (0.9.1 checked). The sampler sees each completion's
    ``extra_info.index`` (``non_tensor_batch["index"]``), not its row position: it reads every row's label
    at start-up and maps labels to positions, and refuses a dataset whose labels are not unique::

        python -m verl.trainer.main_ppo ... data.dataloader_num_workers=0 \\
            data.sampler.class_path=pkg://plr_gym.verl data.sampler.class_name=PromptCurriculumSampler \\
            +data.sampler.plr.method=learnability +data.sampler.plr.uniform_mass=0.1

Options (``data.plr`` for the dataset, ``data.sampler.plr`` for the sampler) are
:class:`~plr_gym.prompts.PromptCurriculum`'s keyword arguments (``seed`` defaults to ``data.seed``; YAML
lists for ``reward_range`` and ``prior``), plus ``reward_key``: the ``batch.batch`` tensor whose sum over
tokens is a completion's reward (default ``"token_level_scores"``, the verifier's score before any KL
penalty).

Timing: verl's loader with ``num_workers=0`` (both hooks require it) fetches a batch only when the trainer
asks, after the previous step's ``on_batch_end``/``update``: each batch is drawn with every earlier outcome
known. Checkpoints: both are ``Stateful`` (``state_dict``/``load_state_dict``), so verl's ``data.pt`` holds
the curriculum. verl saves a checkpoint *before* the step's ``on_batch_end``/``update``, so a run resumed
from it has not seen that step's outcomes (one batch of evidence). verl 0.9 does not restore ``data.pt``
when the checkpoint's step ends an epoch: the curriculum then starts afresh (choose a ``save_freq`` that
does not divide the steps per epoch).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sized
from typing import Any

import numpy as np
from verl.utils.dataset.rl_dataset import RLHFDataset

from plr_gym.prompts import PromptCurriculum

try:  # verl 0.5 - 0.7
    from verl.experimental.dataset.sampler import AbstractCurriculumSampler as _SamplerBase

    HAS_CURRICULUM_SAMPLER = True
except ImportError:  # verl >= 0.8 removed the interface
    _SamplerBase = object  # type: ignore[assignment,misc,unused-ignore]
    HAS_CURRICULUM_SAMPLER = False

__all__ = [
    "HAS_CURRICULUM_SAMPLER",
    "PROMPT_POSITION_KEY",
    "PromptCurriculumDataset",
    "PromptCurriculumSampler",
]

_STATE_VERSION = 1
#: The ``extra_info`` key under which :class:`PromptCurriculumDataset` tags each row with its position.
PROMPT_POSITION_KEY = "plr_prompt_id"


def _get(config: Any, key: str, default: Any = None) -> Any:
    getter = getattr(config, "get", None)
    if getter is None:
        return default
    value = getter(key, default)
    return default if value is None else value


def _batch_size(data_config: Any, n: int) -> int:
    batch_size = _get(data_config, "gen_batch_size") or _get(data_config, "train_batch_size")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or not 1 <= batch_size <= n:
        raise ValueError(
            f"data.train_batch_size (or gen_batch_size) must be an int in [1, {n}], got {batch_size!r}"
        )
    return int(batch_size)


def _curriculum(n: int, options: Any, data_config: Any, where: str) -> tuple[PromptCurriculum, str]:
    """The curriculum of the options under ``where`` (a ``PromptCurriculum`` and the reward key)."""
    options = dict(options or {})
    reward_key = str(options.pop("reward_key", "token_level_scores"))
    options.setdefault("seed", _get(data_config, "seed"))
    for key in ("prior", "reward_range"):  # YAML lists (omegaconf ListConfig) -> pairs
        if options.get(key) is not None and not isinstance(options[key], str):
            options[key] = tuple(options[key])
    try:
        return PromptCurriculum(n, **options), reward_key
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{where}: {exc}") from exc


def _rewards(batch: Any, reward_key: str) -> np.ndarray[Any, Any]:
    try:
        scores = batch.batch[reward_key]
    except KeyError as exc:
        raise KeyError(
            f"the batch lacks batch[{reward_key!r}] (the completions' rewards; option reward_key)"
        ) from exc
    scores = scores.detach().float()
    return np.asarray((scores.sum(dim=-1) if scores.ndim > 1 else scores).cpu().numpy(), dtype=np.float64)


def _uids(batch: Any) -> Any:
    """verl's GRPO groups: ``non_tensor_batch["uid"]``, one per prompt row before the repeat (a prompt drawn
    twice is two groups); ``None`` (group by prompt) where the batch has none."""
    uid = batch.non_tensor_batch.get("uid")
    return None if uid is None else np.asarray([str(u) for u in uid], dtype=object)


def _files(files: Any) -> list[str]:
    """A ``data_files``/``train_files`` value (a path or a list of them) as a list of strings."""
    if files is None:
        return []
    if isinstance(files, (str, bytes)) or not hasattr(files, "__iter__"):
        return [str(files)]
    return [str(f) for f in files]


def _row_labels(data_source: Any) -> list[Any]:
    """Every row's ``extra_info.index`` (what verl puts in ``non_tensor_batch["index"]``)."""
    frame = getattr(data_source, "dataframe", None)
    if frame is not None and "extra_info" in getattr(frame, "column_names", ()):
        return [(extra or {}).get("index", 0) for extra in frame["extra_info"]]
    return [data_source[i]["index"] for i in range(len(data_source))]


class PromptCurriculumDataset(RLHFDataset):  # type: ignore[misc,unused-ignore]
    """verl's ``RLHFDataset`` whose training batches a :class:`~plr_gym.prompts.PromptCurriculum` draws.

    Built by verl from ``data.custom_cls`` (see the module). The dataset built from ``data.train_files``
    runs the curriculum; any other (the validation set, from ``data.val_files``) is verl's plain
    ``RLHFDataset``. Each generation batch (``data.gen_batch_size``, else ``data.train_batch_size``, rows)
    is ``curriculum.next_prompts``; the loader's sampler still decides how many rows a pass has, not which.

    :param data_files, tokenizer, config, processor, max_samples: those of ``RLHFDataset``; the curriculum's
        options are ``config.plr`` (see the module).

    :attr:`curriculum` is the curriculum (``None`` for a validation set): log ``curriculum.stats()``.
    """

    curriculum: PromptCurriculum | None

    def __init__(
        self,
        data_files: Any,
        tokenizer: Any,
        config: Any,
        processor: Any = None,
        max_samples: int = -1,
    ) -> None:
        train = _files(_get(config, "train_files"))
        is_train = _files(data_files) == train
        if is_train:
            if _files(_get(config, "val_files")) == train:
                raise ValueError(
                    "data.val_files are data.train_files: PromptCurriculumDataset tells the training set by "
                    "its files, so validation would be drawn by the curriculum; point val_files at a copy"
                )
            workers = _get(config, "dataloader_num_workers", 0)
            if workers != 0:
                raise ValueError(
                    f"data.dataloader_num_workers={workers}: the curriculum lives in the trainer's process "
                    "and worker processes would draw from stale copies; set data.dataloader_num_workers=0"
                )
        super().__init__(data_files, tokenizer, config, processor=processor, max_samples=max_samples)
        self.curriculum = None
        if not is_train:
            return
        n = len(self)
        self.batch_size = _batch_size(config, n)
        self.curriculum, self.reward_key = _curriculum(n, _get(config, "plr", {}), config, "data.plr")
        self._ready: deque[int] = deque()  # positions drawn, not yet handed to the loader
        self._out: deque[np.ndarray[Any, np.dtype[np.int64]]] = deque()  # drawn batches awaiting outcomes

    def __getitem__(self, item: int) -> dict[str, Any]:
        if self.curriculum is None:
            return dict(super().__getitem__(item))  # type: ignore[no-untyped-call,unused-ignore]
        if not self._ready:
            if self._out:
                raise RuntimeError(
                    "verl asked for the next batch before the previous one's outcomes came back through "
                    "on_batch_end: this trainer does not call it (verl 0.9's V1 trainer; set "
                    "trainer.use_v1=false), or the loader runs ahead (set data.dataloader_num_workers=0)"
                )
            ids = self.curriculum.next_prompts(self.batch_size)
            self._out.append(ids)
            self._ready.extend(ids.tolist())
        position = self._ready.popleft()
        row = dict(super().__getitem__(position))  # type: ignore[no-untyped-call,unused-ignore]
        row["extra_info"] = {**(row.get("extra_info") or {}), PROMPT_POSITION_KEY: position}
        return row

    def on_batch_end(self, batch: Any) -> None:
        """A trained step's ``DataProto``: every completion's row position and reward go to the curriculum."""
        if self.curriculum is None:
            return
        if not self._out:
            raise RuntimeError("on_batch_end() for a batch the curriculum never drew")
        if self._ready:
            raise RuntimeError(
                f"on_batch_end() before the loader took the whole drawn batch ({len(self._ready)} rows "
                "left): the loader's batch size must be data.gen_batch_size or data.train_batch_size "
                f"({self.batch_size})"
            )
        try:
            extra = batch.non_tensor_batch["extra_info"]
            ids = np.asarray([int(e[PROMPT_POSITION_KEY]) for e in extra], dtype=np.int64)
        except (KeyError, TypeError) as exc:
            raise KeyError(
                f"the batch's non_tensor_batch['extra_info'] lacks {PROMPT_POSITION_KEY!r}, which "
                "PromptCurriculumDataset puts in every row it hands out"
            ) from exc
        drawn = self._out[0]
        repeats = ids.size // drawn.size
        if repeats * drawn.size != ids.size or not np.array_equal(
            np.sort(ids), np.sort(np.repeat(drawn, repeats))
        ):
            raise ValueError(
                "the batch's prompts are not the ones the curriculum drew "
                f"({sorted(set(ids.tolist()))[:8]} against {sorted(set(drawn.tolist()))[:8]})"
            )
        self.curriculum.observe(ids, _rewards(batch, self.reward_key), groups=_uids(batch))
        self._out.popleft()

    # torchdata's Stateful protocol: verl's StatefulDataLoader saves this in data.pt
    def state_dict(self) -> dict[str, Any]:
        """The curriculum's state and the drawn batches awaiting outcomes."""
        if self.curriculum is None:
            return {}
        return {
            "version": _STATE_VERSION,
            "curriculum": self.curriculum.state_dict(),
            "pending": [ids.tolist() for ids in self._out],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`. Batches drawn before the save and not yet updated are dropped: verl
        trained on them already, and a resumed loader draws afresh."""
        if self.curriculum is None:
            return
        if not isinstance(state, dict) or state.get("version") != _STATE_VERSION:
            raise ValueError("not a PromptCurriculumDataset state")
        self.curriculum.load_state_dict(state["curriculum"])
        self._out.clear()
        self._ready.clear()


class PromptCurriculumSampler(_SamplerBase):  # type: ignore[misc,valid-type,unused-ignore]
    """verl's curriculum sampler interface (verl 0.5-0.7) over a :class:`~plr_gym.prompts.PromptCurriculum`.

    :param data_source: verl's training dataset (its length is the number of prompts; its rows' labels,
        ``extra_info.index``, are read once here and must be unique).
    :param data_config: verl's ``data`` config: ``gen_batch_size`` (else ``train_batch_size``) is the
        number of prompts drawn at once, ``seed`` the default seed, ``sampler.plr`` the curriculum's options.
    """

    def __init__(self, data_source: Sized, data_config: Any) -> None:
        if not HAS_CURRICULUM_SAMPLER:
            raise ImportError(
                "this verl has no AbstractCurriculumSampler (verl 0.8 removed it): use "
                "plr_gym.verl.PromptCurriculumDataset (data.custom_cls) instead"
            )
        n = len(data_source)
        self.batch_size = _batch_size(data_config, n)
        plr = _get(_get(data_config, "sampler", {}), "plr", {})
        self.curriculum, self.reward_key = _curriculum(n, plr, data_config, "data.sampler.plr")
        labels = _row_labels(data_source)
        try:
            label_array = np.asarray([int(v) for v in labels], dtype=np.int64)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"the rows' extra_info.index must be ints: {exc}") from exc
        uniq, first, counts = np.unique(label_array, return_index=True, return_counts=True)
        if (counts > 1).any():
            dup = int(uniq[counts > 1][0])
            raise ValueError(
                f"extra_info.index {dup} labels {int(counts[counts > 1][0])} rows of the training set (e.g. "
                "several data.train_files each numbered from 0): the sampler finds a completion's row by its "
                "label, so labels must be unique. Use plr_gym.verl.PromptCurriculumDataset "
                "(data.custom_cls), which tracks row positions, or renumber extra_info.index"
            )
        self._labels = label_array  # row position -> label
        self._label_sorted, self._label_position = uniq, first.astype(np.int64)
        self.num_batches = n // self.batch_size
        self._position = 0  # batches handed out in the current pass
        self._out: deque[np.ndarray[Any, np.dtype[np.int64]]] = deque()  # handed out, no outcomes yet

    def __len__(self) -> int:
        return self.num_batches * self.batch_size

    def __iter__(self) -> Iterator[int]:
        while self._position < self.num_batches:
            if self._out:
                raise RuntimeError(
                    "verl asked for the next batch before update() of the previous one: this trainer does "
                    "not call sampler.update after each batch (e.g. the DAPO recipe's, which fetches several "
                    "batches per step), so the curriculum would learn nothing; use verl's RayPPOTrainer"
                )
            ids = self.curriculum.next_prompts(self.batch_size)
            self._out.append(ids)
            self._position += 1
            yield from ids.tolist()
        self._position = 0

    def positions(self, labels: Any) -> np.ndarray[Any, np.dtype[np.int64]]:
        """The row positions of ``extra_info.index`` labels (``ValueError`` for a label of no row)."""
        lab = np.asarray(labels).astype(np.int64)
        where = np.searchsorted(self._label_sorted, lab)
        where = np.minimum(where, self._label_sorted.size - 1)
        missing = self._label_sorted[where] != lab
        if missing.any():
            raise ValueError(f"extra_info.index {int(lab[missing][0])} is no row of the training set")
        return self._label_position[where]

    def update(self, batch: Any) -> None:
        """A trained step's ``DataProto``: every completion's prompt and reward go to the curriculum."""
        if not self._out:
            raise RuntimeError("update() for a batch the curriculum sampler never handed out")
        try:
            labels = np.asarray(batch.non_tensor_batch["index"])
        except KeyError as exc:
            raise KeyError(
                "the batch lacks non_tensor_batch['index'] (each row's extra_info.index, set by RLHFDataset)"
            ) from exc
        rewards = _rewards(batch, self.reward_key)
        ids = self.positions(labels)
        drawn = self._out[0]
        if set(np.unique(ids).tolist()) != set(drawn.tolist()):
            raise ValueError(
                "the batch's prompts (non_tensor_batch['index'], from extra_info.index) are not the rows the "
                f"curriculum drew (labels {sorted(set(labels.tolist()))[:8]} against "
                f"{sorted(set(self._labels[drawn].tolist()))[:8]})"
            )
        self.curriculum.observe(ids, rewards, groups=_uids(batch))
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
