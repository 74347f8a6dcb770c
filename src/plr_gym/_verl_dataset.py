"""The verl side of the prompt curriculum: :class:`PromptCurriculumDataset`, its sampler and draw ledger, and
the checks of verl's config. The public face is :mod:`plr_gym.verl` (its docstring documents all of it);
verl 0.9's replay buffer, which uses this module, is :mod:`plr_gym._verl_replay`."""

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
    "DRAW_KEY",
    "HAS_CURRICULUM_SAMPLER",
    "PROMPT_POSITION_KEY",
    "PromptCurriculumDataset",
    "PromptCurriculumSampler",
]

_STATE_VERSION = 1
#: The ``extra_info`` key under which :class:`PromptCurriculumDataset` tags each row with its position.
PROMPT_POSITION_KEY = "plr_prompt_id"
#: The ``extra_info`` key of a row's draw number under verl's V1 trainer (one per generated group).
DRAW_KEY = "plr_draw"


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


def _curriculum(
    n: int, options: Any, data_config: Any, where: str, reward_key: str = "token_level_scores"
) -> tuple[PromptCurriculum, str]:
    """The curriculum of the options under ``where`` (a ``PromptCurriculum`` and the reward key, by default
    ``reward_key``)."""
    options = dict(options or {})
    reward_key = str(options.pop("reward_key", reward_key))
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


def _root_config(config: Any) -> Any:
    """The whole trainer config that ``config`` (verl's ``data`` node) belongs to, or ``None``: OmegaConf
    keeps each node's root, so the dataset can tell which trainer builds it."""
    get_root = getattr(config, "_get_root", None)
    root = get_root() if callable(get_root) else None
    return None if root is None or root is config else root


def _select(config: Any, key: str, default: Any = None) -> Any:
    from omegaconf import OmegaConf

    value = OmegaConf.select(config, key, default=default)
    return default if value is None else value


def _v1_trainer(config: Any) -> bool:
    """Whether verl 0.9's V1 trainer (``trainer.use_v1``, its default) builds the dataset of ``config``."""
    root = _root_config(config)
    return root is not None and bool(_select(root, "trainer.use_v1", False))


def _check_v1_config(root: Any) -> None:
    """Refuse, before training, a V1 trainer set up so that the curriculum would not see its outcomes."""
    mode = _select(root, "trainer.v1.trainer_mode", "sync")
    if mode != "sync":
        raise ValueError(
            f"trainer.v1.trainer_mode={mode!r}: PromptCurriculumDataset supports verl's V1 trainer in its "
            "'sync' mode only (the async modes generate prompts ahead of the outcomes that should choose "
            "them); set trainer.v1.trainer_mode=sync, or trainer.use_v1=false"
        )
    path = _select(root, "trainer.v1.sampler.custom_sampler.path")
    name = _select(root, "trainer.v1.sampler.custom_sampler.name")
    fix = (
        "verl's V1 trainer reports outcomes only to its replay buffer: set "
        "trainer.v1.sampler.custom_sampler.path=pkg://plr_gym.verl "
        "trainer.v1.sampler.custom_sampler.name=PromptCurriculumReplayBuffer (or trainer.use_v1=false)"
    )
    if not path or not name:
        raise ValueError(f"trainer.v1.sampler.custom_sampler is not set: {fix}")
    from verl.utils.import_utils import load_extern_object

    cls = load_extern_object(path, name)
    # PromptCurriculumReplayBuffer or a subclass (its marker: plr_gym._verl_replay stands above this module)
    if not (isinstance(cls, type) and getattr(cls, "is_plr_curriculum_replay_buffer", False) is True):
        raise ValueError(f"trainer.v1.sampler.custom_sampler is {path}:{name}: {fix}")
    reward_key = _select(root, "data.plr.reward_key", "rm_scores")
    if reward_key != "rm_scores":
        raise ValueError(
            f"data.plr.reward_key={reward_key!r}: verl's V1 trainer keeps each completion's reward in "
            "TransferQueue as 'rm_scores' (summed over tokens: the reward filter_groups judges), the only "
            "reward field its trajectories carry; drop data.plr.reward_key (or set it to rm_scores)"
        )
    if _select(root, "skip.rollout_tq.enable", False):
        raise ValueError(
            "skip.rollout_tq.enable=True replays cached rollouts that the curriculum did not draw: "
            "PromptCurriculumDataset cannot run with it"
        )


def _plain_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _state_count(state: dict[str, Any], key: str) -> int:
    """``state[key]``, an int >= 0 (a float, a bool or a negative number refused, never truncated)."""
    value: Any = state.get(key)
    if not _plain_int(value) or value < 0:
        raise ValueError(
            f"a malformed PromptCurriculumDataset state: {key!r} must be an int >= 0, got {value!r}"
        )
    return int(value)


class _DrawLedger:
    """The V1 path's bookkeeping between the rows a curriculum draws and the groups that come back.

    Each row handed out gets a serial number (its draw); each generated group is recorded once, for its
    draw, and the curriculum observes the recorded groups in draw order at the next draw
    (:meth:`flush`), whatever order they finished in: one ``observe`` per generation batch, as the
    curriculum's evidence clock counts them.

    Example:
        >>> from plr_gym.prompts import PromptCurriculum
        >>> ledger = _DrawLedger(PromptCurriculum(10, seed=0))
        >>> ledger.draw(2)
        >>> (a, sa), (b, sb) = ledger.take(), ledger.take()
        >>> ledger.record(sb, b, [1.0, 0.0]); ledger.record(sa, a, [1.0, 1.0])   # any order
        >>> ledger.end_of_batch(), ledger.curriculum.state_dict()["num_groups"]
        (0, 2)
    """

    def __init__(self, curriculum: PromptCurriculum) -> None:
        self.curriculum = curriculum
        self.ready: deque[tuple[int, int]] = deque()  # (position, serial) drawn, not yet handed out
        self.next_serial = 0
        self.outstanding: dict[int, int] = {}  # serial -> position: handed out, no outcome yet
        # serial -> (position, rewards): recorded, not yet observed
        self.outcomes: dict[int, tuple[int, np.ndarray[Any, np.dtype[np.float64]]]] = {}
        self.groups_without_outcome = 0  # groups handed out that never came back (failed rollouts)

    def draw(self, k: int) -> None:
        """Observe what came back, then draw ``k`` rows (one ``next_prompts(k)``)."""
        if self.ready:
            raise RuntimeError(f"a draw of {k} rows while {len(self.ready)} drawn rows wait for the loader")
        self.flush()
        ids = self.curriculum.next_prompts(k).tolist()
        self.ready.extend(zip(ids, range(self.next_serial, self.next_serial + len(ids)), strict=True))
        self.next_serial += len(ids)

    def take(self) -> tuple[int, int]:
        """The next drawn row to hand out: ``(position, serial)``."""
        position, serial = self.ready.popleft()
        self.outstanding[serial] = position
        return position, serial

    def record(self, serial: int, position: int, rewards: Any) -> None:
        """One generated group's rewards (one per completion), for the row handed out as ``serial``."""
        if self.outstanding.get(serial) != position:
            raise ValueError(
                f"a group of prompt {position} (draw {serial}) that the curriculum has no open draw for: "
                "each generated group is reported once, for a row the dataset handed out"
            )
        values = np.asarray(rewards, dtype=np.float64).reshape(-1)
        if values.size == 0:
            raise ValueError(f"a group of prompt {position} (draw {serial}) with no completions")
        del self.outstanding[serial]
        self.outcomes[serial] = (position, values)

    def flush(self) -> None:
        """The recorded groups to the curriculum, one ``observe`` call, in draw order. A refused call
        (non-finite rewards, rewards outside ``reward_range``) raises, the groups stay recorded and the
        curriculum unchanged."""
        if not self.outcomes:
            return
        serials = sorted(self.outcomes)
        sizes = [self.outcomes[s][1].size for s in serials]
        ids = np.repeat(np.asarray([self.outcomes[s][0] for s in serials], dtype=np.int64), sizes)
        rewards = np.concatenate([self.outcomes[s][1] for s in serials])
        self.curriculum.observe(ids, rewards, groups=np.repeat(np.asarray(serials, dtype=np.int64), sizes))
        self.outcomes.clear()

    def end_of_batch(self) -> int:
        """A training batch is complete: observe what came back and close the draws that never will
        (groups whose rollouts all failed: verl stores no completion for them). Returns their number."""
        if self.ready:
            raise RuntimeError(
                f"{len(self.ready)} drawn rows were never fetched by the trainer: its loader's fetches do "
                "not add up to the step's batch and refills"
            )
        self.flush()
        lost = len(self.outstanding)
        self.outstanding.clear()
        self.groups_without_outcome += lost
        return lost

    def state_dict(self) -> dict[str, Any]:
        return {
            "next_serial": self.next_serial,
            "outcomes": [[s, p, r.tolist()] for s, (p, r) in sorted(self.outcomes.items())],
            "groups_without_outcome": self.groups_without_outcome,
        }

    def load_state_dict(self, state: Any) -> None:
        """Restore :meth:`state_dict` (the curriculum separately). Rows drawn and not observed are dropped.
        Every member is checked first: a refused state (``ValueError``) changes nothing."""
        self.apply(self.checked(state))

    def checked(self, state: Any) -> tuple[int, int, dict[int, tuple[int, Any]]]:
        """``state``'s ``(next_serial, groups_without_outcome, outcomes)``, checked against each other and
        the curriculum's number of prompts; nothing assigned."""
        if not isinstance(state, dict):
            raise ValueError(
                f"a malformed PromptCurriculumDataset state: 'v1' must be a dict, got {state!r:.60}"
            )
        next_serial = _state_count(state, "next_serial")
        lost = _state_count(state, "groups_without_outcome")
        entries = state.get("outcomes")
        if not isinstance(entries, list):
            raise ValueError("a malformed PromptCurriculumDataset state: 'outcomes' must be a list")
        outcomes: dict[int, tuple[int, Any]] = {}
        n = self.curriculum.num_prompts
        for entry in entries:
            if not isinstance(entry, (list, tuple)) or len(entry) != 3:
                raise ValueError(f"a malformed PromptCurriculumDataset state: an outcome {entry!r:.60}")
            serial, position, rewards = entry
            if not _plain_int(serial) or not 0 <= serial < next_serial or serial in outcomes:
                raise ValueError(
                    f"a malformed PromptCurriculumDataset state: outcome draw {serial!r} must be a distinct "
                    f"int in [0, next_serial={next_serial})"
                )
            if not _plain_int(position) or not 0 <= position < n:
                raise ValueError(
                    f"a malformed PromptCurriculumDataset state: outcome prompt {position!r} must be an int "
                    f"in [0, {n})"
                )
            try:
                values = np.asarray(rewards, dtype=np.float64).reshape(-1)
            except (TypeError, ValueError) as exc:
                raise ValueError(
                    f"a malformed PromptCurriculumDataset state: outcome rewards: {exc}"
                ) from None
            if values.size == 0 or not np.isfinite(values).all():
                raise ValueError(
                    "a malformed PromptCurriculumDataset state: outcome rewards must be finite numbers, "
                    "one per completion"
                )
            outcomes[serial] = (position, values)
        return next_serial, lost, outcomes

    def apply(self, checked: tuple[int, int, dict[int, tuple[int, Any]]]) -> None:
        """Assign what :meth:`checked` returned."""
        self.ready.clear()
        self.outstanding.clear()
        self.next_serial, self.groups_without_outcome, self.outcomes = checked


class PromptCurriculumDataset(RLHFDataset):  # type: ignore[misc,unused-ignore]
    """verl's ``RLHFDataset`` whose training batches a :class:`~plr_gym.prompts.PromptCurriculum` draws.

    Built by verl from ``data.custom_cls`` (see the module). The dataset built from ``data.train_files``
    runs the curriculum; any other (the validation set, from ``data.val_files``) is verl's plain
    ``RLHFDataset``. The loader's sampler still decides how many rows a pass has, not which.

    With verl's legacy trainer (verl 0.7; 0.9 with ``trainer.use_v1=false``) each generation batch
    (``data.gen_batch_size``, else ``data.train_batch_size``, rows) is one ``curriculum.next_prompts`` and its
    outcomes come back through ``on_batch_end``. With verl 0.9's V1 trainer (``trainer.use_v1=true``, its
    default; ``trainer.v1.trainer_mode=sync``) each step's batch is one ``next_prompts(train_batch_size)``,
    each refill of dynamic sampling (``algorithm.filter_groups``) one more of the refill's size, and the
    outcomes of every generated group come back through :class:`PromptCurriculumReplayBuffer`, which the
    config must name as ``trainer.v1.sampler.custom_sampler`` (refused at start-up otherwise).

    :param data_files, tokenizer, config, processor, max_samples: those of ``RLHFDataset``; the curriculum's
        options are ``config.plr`` (see the module).

    :attr:`curriculum` is the curriculum (``None`` for a validation set): log ``curriculum.stats()`` (the V1
    path logs it under ``curriculum/`` in the step's metrics).
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
        v1 = is_train and _v1_trainer(config)
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
            if v1:
                _check_v1_config(_root_config(config))
        super().__init__(data_files, tokenizer, config, processor=processor, max_samples=max_samples)
        self.curriculum = None
        self.ledger: _DrawLedger | None = None
        self.v1 = v1
        if not is_train:
            return
        n = len(self)
        if v1:  # one step's batch per draw: the V1 trainer's loader fetches in pieces of gen_batch_size
            self.batch_size = _batch_size({"train_batch_size": _get(config, "train_batch_size")}, n)
        else:
            self.batch_size = _batch_size(config, n)
        self.curriculum, self.reward_key = _curriculum(
            n, _get(config, "plr", {}), config, "data.plr", "rm_scores" if v1 else "token_level_scores"
        )
        self._ready: deque[int] = deque()  # positions drawn, not yet handed to the loader
        self._out: deque[np.ndarray[Any, np.dtype[np.int64]]] = deque()  # drawn batches awaiting outcomes
        if v1:  # the V1 path's draws and outcomes
            self.ledger = _DrawLedger(self.curriculum)

    def __getitem__(self, item: int) -> dict[str, Any]:
        if self.curriculum is None:
            return dict(super().__getitem__(item))  # type: ignore[no-untyped-call,unused-ignore]
        if self.ledger is not None:  # V1: a step's first fetch draws the step's batch
            if not self.ledger.ready:
                self.ledger.draw(self.batch_size)
            position, serial = self.ledger.take()
        else:
            if not self._ready:
                if self._out:
                    raise RuntimeError(
                        "verl asked for the next batch before the previous one's outcomes came back through "
                        "on_batch_end: this trainer does not call it, or the loader runs ahead (set "
                        "data.dataloader_num_workers=0); with verl 0.9's V1 trainer, build the dataset "
                        "from the trainer's whole config (trainer.use_v1=true) with "
                        "PromptCurriculumReplayBuffer"
                    )
                ids = self.curriculum.next_prompts(self.batch_size)
                self._out.append(ids)
                self._ready.extend(ids.tolist())
            position = self._ready.popleft()
        row = dict(super().__getitem__(position))  # type: ignore[no-untyped-call,unused-ignore]
        extra = {**(row.get("extra_info") or {}), PROMPT_POSITION_KEY: position}
        if self.ledger is not None:
            extra[DRAW_KEY] = serial
        row["extra_info"] = extra
        return row

    def on_batch_end(self, batch: Any) -> None:
        """A trained step's ``DataProto``: every completion's row position and reward go to the curriculum."""
        if self.curriculum is None:
            return
        if self.ledger is not None:
            raise RuntimeError(
                "on_batch_end() under verl's V1 trainer: its outcomes come through "
                "PromptCurriculumReplayBuffer"
            )
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
        """The curriculum's state and what is drawn and not yet observed."""
        if self.curriculum is None:
            return {}
        state: dict[str, Any] = {
            "version": _STATE_VERSION,
            "curriculum": self.curriculum.state_dict(),
            "pending": [ids.tolist() for ids in self._out],
        }
        if self.ledger is not None:
            state["v1"] = self.ledger.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`. Rows drawn before the save and not yet observed are dropped: verl
        generated them already (the V1 trainer saves between steps, when none are open), and a resumed
        loader draws afresh. Recorded outcomes not yet observed are kept."""
        if self.curriculum is None:
            return
        if not isinstance(state, dict) or state.get("version") != _STATE_VERSION:
            raise ValueError("not a PromptCurriculumDataset state")
        v1 = state.get("v1")
        if (v1 is not None) != (self.ledger is not None):
            raise ValueError(
                "this PromptCurriculumDataset state was saved under "
                f"{'the V1' if v1 is not None else 'the legacy'} trainer and is loaded under the other"
            )
        ledger = None if self.ledger is None else self.ledger.checked(v1)  # every member before any change
        self.curriculum.load_state_dict(state.get("curriculum"))  # checks everything, then assigns
        if self.ledger is not None and ledger is not None:
            self.ledger.apply(ledger)
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
        self.curriculum.load_state_dict(state.get("curriculum"))
        self._position = position
        self._out.clear()
