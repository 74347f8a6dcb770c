"""What both ``PrioritizedLevelReplay`` wrappers (SB3, Gymnasium) expose of their level source."""

from __future__ import annotations

from typing import TYPE_CHECKING

from plr_gym.level_buffer import LevelBuffer
from plr_gym.sampler import LevelSampler

if TYPE_CHECKING:
    from plr_gym.source import LevelSource


class SourceAccess:
    """The ``sampler``/``buffer``/``rollout_mode`` views of ``self.source``, shared by both wrappers."""

    source: LevelSource

    @property
    def sampler(self) -> LevelSampler | None:
        """The :class:`~plr_gym.LevelSampler` when the level source is one, else ``None`` (buffer mode)."""
        return self.source if isinstance(self.source, LevelSampler) else None

    @sampler.setter
    def sampler(self, sampler: LevelSampler) -> None:
        if not isinstance(sampler, LevelSampler) or not isinstance(self.source, LevelSampler):
            raise TypeError("sampler can only be replaced by a LevelSampler, on a wrapper built with one")
        self.source = sampler

    @property
    def buffer(self) -> LevelBuffer | None:
        """Buffer mode: the :class:`~plr_gym.LevelBuffer` (settable, e.g. to swap in a restored one)."""
        return getattr(self.source, "buffer", None)

    @buffer.setter
    def buffer(self, buffer: LevelBuffer) -> None:
        if not hasattr(self.source, "buffer") or not isinstance(buffer, LevelBuffer):
            raise TypeError("buffer can only be replaced by a LevelBuffer, on a wrapper built with buffer=")
        self.source.buffer = buffer

    @property
    def rollout_mode(self) -> str:
        """Buffer mode: ``"replay"``, ``"new"`` or ``"mutate"`` for the current rollout (else ``"none"``)."""
        return self.source.rollout_mode

    @property
    def last_rollout_mode(self) -> str:
        """Buffer mode: the mode of the rollout closed last (by ``end_rollout``/``report_rollout``).

        With Robust PLR's "no exploratory gradient updates", train on a rollout only if this is
        ``"replay"`` after closing it.
        """
        return self.source.last_rollout_mode
