"""A prompt curriculum for verl's PPO/GRPO trainers: a dataset class (verl 0.7-0.9), with a replay buffer for
verl 0.9's V1 trainer, or a sampler (0.5-0.7).

Three hooks, each verl's own:

:class:`PromptCurriculumDataset` (verl 0.7.1 and 0.9.1 tested; ``data.custom_cls``)
    A subclass of verl's ``RLHFDataset``. verl builds the training set with the class named in
    ``data.custom_cls``. The dataset hands the data loader the rows that a
    :class:`~plr_gym.prompts.PromptCurriculum` draws (whatever index the loader's sampler asks for) and
    tags each with its row position (``extra_info["plr_prompt_id"]``, which verl keeps beside the
    completions). Row positions, not ``extra_info.index``: a filtered dataset (``filter_overlong_prompts``),
    ``train_max_samples`` and several ``train_files`` work. The outcomes come back one of two ways:

    - verl's legacy ``RayPPOTrainer`` (verl 0.7; 0.9 with ``trainer.use_v1=false``) calls the dataset's
      ``on_batch_end(batch)`` with each step's ``DataProto`` (every completion, rewarded)::

        python -m verl.trainer.main_ppo ... trainer.use_v1=false data.dataloader_num_workers=0 \\
            data.custom_cls.path=pkg://plr_gym.verl data.custom_cls.name=PromptCurriculumDataset \\
            +data.plr.method=learnability +data.plr.reward_range=[-1,1]

    - verl 0.9's V1 trainer (``trainer.use_v1=true``, its default) never calls ``on_batch_end``; its replay
      buffer sees every generated group: name ``PromptCurriculumReplayBuffer`` as
      ``trainer.v1.sampler.custom_sampler`` (the dataset tells the trainer from verl's config and refuses, at
      start-up, a V1 trainer without it or in an async mode). Dynamic sampling (``algorithm.filter_groups``)
      works: every refill is drawn by the curriculum, every group (the dropped all-equal ones too) observed::

        python -m verl.trainer.main_ppo ... data.dataloader_num_workers=0 \\
            data.custom_cls.path=pkg://plr_gym.verl data.custom_cls.name=PromptCurriculumDataset \\
            trainer.v1.sampler.custom_sampler.path=pkg://plr_gym.verl \\
            trainer.v1.sampler.custom_sampler.name=PromptCurriculumReplayBuffer \\
            +data.plr.method=learnability +data.plr.reward_range=[-1,1]

``PromptCurriculumReplayBuffer`` (verl 0.9.1 tested; ``trainer.v1.sampler.custom_sampler``)
    verl's own sync ``ReplayBuffer`` (sampling, dynamic sampling's eviction and refill unchanged) that
    draws each refill through the dataset and reports each generated group's rewards once (see its
    docstring). Built on first access (``plr_gym.verl.PromptCurriculumReplayBuffer``): it imports verl's V1
    trainer package (TransferQueue, the agent loop), which the other two do not need.

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
lists for ``reward_range`` and ``prior``), plus ``reward_key``: the tensor whose sum over tokens is a
completion's reward (default ``"token_level_scores"`` of the legacy trainer's batch, ``"rm_scores"`` of
the V1 trainer's TransferQueue: the verifier's score before any KL penalty).

Timing: verl's loader with ``num_workers=0`` (all hooks require it) fetches a batch only when the trainer
asks. Legacy trainer: after the previous step's ``on_batch_end``/``update``, so each batch is drawn with
every earlier outcome known. V1 trainer: a step's batch after every earlier step's groups, each refill
after every group generated so far. Checkpoints: the dataset and the sampler are ``Stateful``
(``state_dict``/``load_state_dict``), so verl's ``data.pt`` holds the curriculum. The legacy trainer saves
a checkpoint *before* the step's ``on_batch_end``/``update``, so a run resumed from it has not seen that
step's outcomes (one batch of evidence), and verl 0.9's legacy trainer does not restore ``data.pt`` when
the checkpoint's step ends an epoch (the curriculum then starts afresh: choose a ``save_freq`` that does
not divide the steps per epoch). The V1 trainer saves after the step's groups are observed: its resume is
exact.
"""

from __future__ import annotations

from typing import Any

from plr_gym._verl_dataset import (
    DRAW_KEY as DRAW_KEY,
)
from plr_gym._verl_dataset import (
    HAS_CURRICULUM_SAMPLER as HAS_CURRICULUM_SAMPLER,
)
from plr_gym._verl_dataset import (
    PROMPT_POSITION_KEY as PROMPT_POSITION_KEY,
)
from plr_gym._verl_dataset import (
    PromptCurriculumDataset as PromptCurriculumDataset,
)
from plr_gym._verl_dataset import (
    PromptCurriculumSampler as PromptCurriculumSampler,
)
from plr_gym._verl_dataset import _DrawLedger as _DrawLedger
from plr_gym._verl_dataset import _v1_trainer as _v1_trainer

__all__ = [
    "DRAW_KEY",
    "HAS_CURRICULUM_SAMPLER",
    "PROMPT_POSITION_KEY",
    "PromptCurriculumDataset",
    "PromptCurriculumSampler",
]


def __getattr__(name: str) -> Any:
    """``PromptCurriculumReplayBuffer`` (verl 0.9's V1 replay buffer) is built on first access: it subclasses
    verl's own buffer, which older verl releases do not have (``plr_gym._verl_replay``)."""
    if name == "PromptCurriculumReplayBuffer":
        from plr_gym._verl_replay import _replay_buffer_class

        return _replay_buffer_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
