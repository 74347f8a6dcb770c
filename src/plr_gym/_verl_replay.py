"""verl 0.9's V1 trainer: :class:`plr_gym.verl.PromptCurriculumReplayBuffer`, verl's sync replay buffer that
reports every generated group to the curriculum (see :mod:`plr_gym.verl`).

The class is built on first access of ``plr_gym.verl.PromptCurriculumReplayBuffer``: its base, verl's
``ReplayBuffer``, is in verl's V1 trainer package, whose import loads the rollout stack (TransferQueue, the
agent loop), which the dataset and the sampler do not need. Its steps live here as a mixin,
:class:`_CurriculumReplaySteps`, joined to verl's class then.
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar

from plr_gym._verl_dataset import DRAW_KEY, PROMPT_POSITION_KEY, PromptCurriculumDataset


def _check_replay_buffer_arguments(
    trainer_class: type, trainer_mode: str, refill_fn: Any, kwargs: dict[str, Any]
) -> Any:
    """The trainer that builds the buffer (``refill_fn``'s owner), after refusing what it cannot serve."""
    trainer = getattr(refill_fn, "__self__", None)
    if not isinstance(trainer, trainer_class):
        raise TypeError(
            "PromptCurriculumReplayBuffer is built by verl's V1 PPOTrainer (its "
            "trainer.v1.sampler.custom_sampler), which passes its own refill function; got "
            f"refill_fn={refill_fn!r}"
        )
    if trainer_mode != "sync":
        raise ValueError(
            f"trainer.v1.trainer_mode={trainer_mode!r}: PromptCurriculumReplayBuffer supports the "
            "'sync' mode only"
        )
    if kwargs:
        raise TypeError(f"unexpected arguments {sorted(kwargs)} (a newer verl?)")
    _check_trainer_config(trainer)
    return trainer


def _check_trainer_config(trainer: Any) -> None:
    """Refuse, when verl's trainer builds its replay buffer (in ``PPOTrainer.__init__``, before the dataset,
    the workers and the model), a config under which the curriculum would fail or see nothing."""
    from verl.utils.import_utils import load_extern_object

    from plr_gym._verl_dataset import _check_v1_config, _select

    config = trainer.config
    path, name = _select(config, "data.custom_cls.path"), _select(config, "data.custom_cls.name")
    cls = load_extern_object(path, name) if path and name else None
    if not (isinstance(cls, type) and issubclass(cls, PromptCurriculumDataset)):
        got = f"{path}:{name}" if path and name else "not set"
        raise ValueError(
            f"data.custom_cls is {got}: PromptCurriculumReplayBuffer reports outcomes to the curriculum of "
            "the training set, which verl builds from data.custom_cls; set "
            "data.custom_cls.path=pkg://plr_gym.verl data.custom_cls.name=PromptCurriculumDataset"
        )
    _check_v1_config(config)
    sync_step = int(getattr(trainer, "parameter_sync_step", 1) or 1)
    if sync_step > 1 and trainer._resolve_filter_groups_metric() is not None:
        raise ValueError(
            f"trainer.v1.sync.parameter_sync_step={sync_step} with algorithm.filter_groups: verl 0.9's sync "
            "replay buffer discards every group beyond the first of the step's parameter_sync_step samples "
            "as surplus and then waits for the next sample's groups with nothing in flight (it hangs without "
            "the curriculum too); drop algorithm.filter_groups or set trainer.v1.sync.parameter_sync_step=1"
        )


def _colocated_reward_model(config: Any) -> bool:
    """Whether verl computes the rewards with a colocated reward model, after the replay buffer's sample
    (``reward.reward_model.enable`` without its own resource pool), rather than in the rollout."""
    from plr_gym._verl_dataset import _select

    return bool(_select(config, "reward.reward_model.enable", False)) and not bool(
        _select(config, "reward.reward_model.enable_resource_pool", False)
    )


def _filtering_arguments(trainer: Any) -> dict[str, Any]:
    """The arguments verl's ``PPOTrainer._build_replay_buffer`` gives its own sync ``ReplayBuffer`` (verl
    0.9.1, trainer/ppo/v1/trainer_base.py), which it leaves out for a custom sampler."""
    config = trainer.config
    metric = trainer._resolve_filter_groups_metric()
    refill_failed = bool(config.trainer.v1.sampler.get("sync_refill_failed_groups", False))
    train_batch_size = config.data.train_batch_size
    inflight = 1
    if metric is not None:
        inflight = config.algorithm.filter_groups.get("max_inflight_gen_batches", 1)
    if metric is not None or refill_failed:
        gen_batch_size = 1
    else:
        gen_batch_size = config.data.get("gen_batch_size", None) or train_batch_size
    return {
        "filter_groups_metric": metric,
        "sync_refill_failed_groups": refill_failed,
        "train_batch_size": train_batch_size,
        "gen_batch_size": gen_batch_size,
        "max_inflight_gen_batches": inflight,
    }


def _group_rewards(keys: list[str], data: Any, reward_key: str) -> dict[str, list[Any]]:
    """Completions read from TransferQueue (keys ``{uid}_{session}_{index}``) as groups: uid ->
    ``[(draw serial, row position), [one reward per completion]]``."""
    groups: dict[str, list[Any]] = {}
    for key, reward, extra in zip(keys, data[reward_key], data["extra_info"], strict=True):
        extra = getattr(extra, "data", extra)
        try:
            draw = (int(extra[DRAW_KEY]), int(extra[PROMPT_POSITION_KEY]))
        except (KeyError, TypeError) as exc:
            raise KeyError(
                f"completion {key} lacks extra_info[{DRAW_KEY!r}]/[{PROMPT_POSITION_KEY!r}], which "
                "PromptCurriculumDataset puts in every row it hands out"
            ) from exc
        entry = groups.setdefault(key.split("_")[0], [draw, []])
        if entry[0] != draw:
            raise ValueError(f"group {key.split('_')[0]} holds completions of two draws")
        entry[1].append(float(reward.sum().item()))
    return groups


# verl's ReplayBuffer at run time (joined in _replay_buffer_class); Any for mypy, which cannot see verl 0.9
_V1ReplayBuffer: Any = object


class _CurriculumReplaySteps(_V1ReplayBuffer):  # type: ignore[misc,valid-type,unused-ignore]
    """What :class:`PromptCurriculumReplayBuffer` adds to verl's sync ``ReplayBuffer``: a mixin, defined here
    so that this module imports without verl's V1 trainer; :func:`_replay_buffer_class` joins the two."""

    _trainer_class: type  # verl's V1 PPOTrainer, set by _replay_buffer_class
    #: what ``plr_gym._verl_dataset._check_v1_config`` looks for in ``trainer.v1.sampler.custom_sampler``
    is_plr_curriculum_replay_buffer: ClassVar[bool] = True

    def __init__(
        self,
        trainer_mode: str,
        trainer_config: Any,
        max_off_policy_threshold: int | None,
        max_off_policy_strategy: str,
        sampler_kwargs: Any,
        refill_fn: Any = None,
        **kwargs: Any,
    ) -> None:
        trainer = _check_replay_buffer_arguments(self._trainer_class, trainer_mode, refill_fn, kwargs)
        super().__init__(
            trainer_mode=trainer_mode,
            trainer_config=trainer_config,
            max_off_policy_threshold=max_off_policy_threshold,
            max_off_policy_strategy=max_off_policy_strategy,
            sampler_kwargs=sampler_kwargs,
            refill_fn=self._refill,
            **_filtering_arguments(trainer),
        )
        self._trainer = trainer
        self._trainer_refill = refill_fn
        self._reported: set[str] = set()  # groups reported to the dataset, still in the buffer
        self._rows_sampled = 0  # groups taken so far for this step (parameter_sync_step samples take B/k)
        self._colocated = _colocated_reward_model(trainer.config)
        if self._colocated:  # rewards exist only once the trainer's reward model wrote them
            self._trainer_reward = trainer._compute_reward_colocate
            trainer._compute_reward_colocate = self._reward_then_report

    def dataset(self) -> PromptCurriculumDataset:
        """The trainer's training set, which draws the prompts and holds the curriculum."""
        dataset = getattr(self._trainer, "train_dataset", None)
        if not isinstance(dataset, PromptCurriculumDataset) or dataset.ledger is None:
            raise RuntimeError(
                "PromptCurriculumReplayBuffer needs the training set to be PromptCurriculumDataset: set "
                "data.custom_cls.path=pkg://plr_gym.verl data.custom_cls.name=PromptCurriculumDataset"
            )
        return dataset

    def _refill(self, num_prompts: int) -> Any:
        """verl's refill (dynamic sampling, failed groups), with the curriculum drawing the prompts
        after every outcome known so far."""
        ledger = self.dataset().ledger
        assert ledger is not None
        # every group finished so far (this poll's snapshot), the kept ones too, before the draw; with a
        # colocated reward model they have no rewards yet: the trained ones are reported after it ran
        if not self._colocated:
            self._report("train", self.finished_keys["train"] | self.failure_keys["train"], leaving=False)
        ledger.draw(num_prompts)
        return self._trainer_refill(num_prompts)

    def _report(self, partition_id: str, uids: Any, leaving: bool) -> None:
        """Groups that finished (``leaving=False``) or leave the buffer (trained, dropped by dynamic
        sampling, surplus): the rewards of those not reported yet go to the dataset, read from
        TransferQueue before verl clears them; each group is reported once."""
        if partition_id != "train" or not uids:
            return
        uids = set(uids)
        new = uids - self._reported
        if new:
            self._observe(partition_id, new)
        # marked only once observed: a failed read or record leaves them to be reported again
        if leaving:
            self._reported -= uids
        else:
            self._reported |= new

    def _observe(self, partition_id: str, new: set[str], keys: Any = None) -> None:
        import transfer_queue as tq  # imported by _replay_buffer_class already

        dataset = self.dataset()
        # one completion per rollout: key {uid}_{session}_{index}, a multi-output agent loop's outputs
        # of one session share the session's reward
        keys = sorted(
            k
            for k in (self.partitions[partition_id] if keys is None else keys)
            if k.split("_")[0] in new and k.split("_")[-1] == "0"
        )
        if not keys:
            return
        data = tq.kv_batch_get(
            keys=keys, partition_id=partition_id, select_fields=[dataset.reward_key, "extra_info"]
        )
        groups = _group_rewards(keys, data, dataset.reward_key)
        assert dataset.ledger is not None
        for (serial, position), rewards in groups.values():
            dataset.ledger.record(serial, position, rewards)

    def _clear_groups(self, partition_id: str, uids: set[str]) -> None:
        if not self._colocated:  # a colocated reward model scores only the trained groups
            self._report(partition_id, uids, leaving=True)
        super()._clear_groups(partition_id, uids)

    def _materialize_batch(
        self,
        partition_id: str,
        selected_prompt_uids: list[str],
        partition_snapshot: dict[str, dict[str, Any]],
    ) -> Any:
        if not self._colocated:
            self._report(partition_id, selected_prompt_uids, leaving=True)
        return super()._materialize_batch(partition_id, selected_prompt_uids, partition_snapshot)

    def sample(self, global_steps: int, partition_id: str, batch_size: int) -> tuple[Any, dict[str, Any]]:
        batch, metrics = super().sample(global_steps, partition_id, batch_size)
        if partition_id == "train":
            # a step takes its batch in parameter_sync_step samples of train_batch_size / k groups
            self._rows_sampled += batch_size
            metrics = dict(metrics)
            if not self._colocated:
                self._end_of_sample(metrics)
        return batch, metrics

    def _end_of_sample(self, metrics: dict[str, Any]) -> None:
        """After a sample's groups were reported: the step's batch is complete once its last sample is
        taken; then the curriculum observes the rest and its ``stats()`` join ``metrics``."""
        ledger = self.dataset().ledger
        assert ledger is not None
        if self._rows_sampled >= int(self._trainer.config.data.train_batch_size):
            self._rows_sampled = 0
            ledger.end_of_batch()
        metrics.update({f"curriculum/{k}": v for k, v in ledger.curriculum.stats().items()})
        metrics["curriculum/groups_without_outcome"] = float(ledger.groups_without_outcome)

    def _reward_then_report(self, batch: Any, metrics: dict[str, Any] | None = None) -> Any:
        """The trainer's ``_compute_reward_colocate`` (a colocated reward model), then the trained groups'
        rewards, which it has just written to TransferQueue, to the curriculum."""
        out = self._trainer_reward(batch, metrics=metrics)
        if batch.partition_id == "train":
            uids = {key.split("_")[0] for key in batch.keys}
            self._observe("train", uids, keys=batch.keys)
            self._end_of_sample(metrics if metrics is not None else {})
        return out


@functools.cache
def _replay_buffer_class() -> type:
    """:class:`PromptCurriculumReplayBuffer`, built on first use: importing verl's V1 trainer package loads
    its rollout stack (TransferQueue, the agent loop, the LLM server client), which the dataset and the
    sampler do not need."""
    try:
        import transfer_queue  # noqa: F401  (the buffer reads the rewards from it)
        from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
        from verl.trainer.ppo.v1.trainer_base import PPOTrainer
    except ImportError as exc:
        raise ImportError(
            f"PromptCurriculumReplayBuffer needs verl >= 0.9 with its V1 trainer and TransferQueue ({exc}); "
            "pip install 'verl==0.9.1' TransferQueue fastapi uvicorn"
        ) from exc

    class PromptCurriculumReplayBuffer(_CurriculumReplaySteps, ReplayBuffer):  # type: ignore[misc,unused-ignore]
        __doc__ = _REPLAY_BUFFER_DOC
        _trainer_class = PPOTrainer

    PromptCurriculumReplayBuffer.__module__ = "plr_gym.verl"  # its public home
    return PromptCurriculumReplayBuffer


_REPLAY_BUFFER_DOC = """verl 0.9's V1 replay buffer that reports every generated group to the curriculum.

    verl's V1 trainer (``trainer.use_v1=true``, the default of verl 0.9) generates into TransferQueue and
    takes each step's batch from its replay buffer, which dynamic sampling (``algorithm.filter_groups``)
    also uses to drop groups whose rewards are all equal and to refill. This is verl's own sync
    ``ReplayBuffer`` (same arguments, same sampling, eviction and refill), built from
    ``trainer.v1.sampler.custom_sampler``, plus three things. Each generated group has its rewards
    (``rm_scores`` summed over tokens, the reward the filter judges) reported to the dataset once: when a
    refill is about to be drawn (every group finished by then) or when it leaves the buffer (trained,
    dropped as all-equal, discarded as surplus), read from TransferQueue before verl clears it. Each
    refill's prompts are one ``next_prompts`` of the refill's size, drawn after the curriculum observed
    every group reported so far, in draw order. At the end of ``sample`` the curriculum observes the rest
    and its ``stats()`` join the step's metrics (``curriculum/*``). Use it with
    :class:`PromptCurriculumDataset`::

        python -m verl.trainer.main_ppo ... data.dataloader_num_workers=0 \\
            data.custom_cls.path=pkg://plr_gym.verl data.custom_cls.name=PromptCurriculumDataset \\
            trainer.v1.sampler.custom_sampler.path=pkg://plr_gym.verl \\
            trainer.v1.sampler.custom_sampler.name=PromptCurriculumReplayBuffer \\
            +data.plr.method=learnability +data.plr.reward_range=[-1,1]

    With ``trainer.v1.sync.parameter_sync_step=k`` a step's batch (one draw) is taken in ``k`` samples; the
    step's draws close after the last. With a colocated reward model (``reward.reward_model.enable=true``
    without ``enable_resource_pool``) verl writes ``rm_scores`` only after the sample: the trained groups
    are reported right after the trainer's ``_compute_reward_colocate``, which the buffer wraps.

    Only ``trainer.v1.trainer_mode=sync`` (the default); the arguments are those verl's trainer passes to a
    custom sampler. Refused when verl builds the buffer (in its trainer's ``__init__``, before the dataset,
    the workers and the model): ``data.custom_cls`` not :class:`PromptCurriculumDataset`, a
    ``data.plr.reward_key`` other than ``rm_scores``, ``parameter_sync_step > 1`` with
    ``algorithm.filter_groups`` (verl's own sync buffer hangs there), and what the dataset refuses.

    verl gives a custom sampler neither its config nor its training set: the buffer finds
    the trainer through ``refill_fn``, the trainer's own ``_add_prompts_to_generate`` (verl 0.9.0 and 0.9.1;
    anything else is refused with a ``TypeError``), and gives verl's ``ReplayBuffer`` the filtering
    arguments verl's ``_build_replay_buffer`` gives its built-in one.
    """
