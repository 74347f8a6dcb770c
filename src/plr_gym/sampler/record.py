"""The sampler's live record: every field a :class:`~plr_gym.sampler.LevelSampler` holds, with its type.

JaxUED's ``level_sampler.py`` keeps a level sampler's whole state in one explicit record with a shape per
field; this is ours. ``N`` is the number of levels; every array is aligned with ``levels`` (position
``i`` is level ``levels[i]``). The rooms of the package each work on these fields:
:mod:`~plr_gym.sampler.sampling` (draws, staleness, the sampling structures),
:mod:`~plr_gym.sampler.updates` (scores in), :mod:`~plr_gym.sampler.state` (the checkpoint record
written by ``state_dict``, which holds the fields marked *saved* below, and its checks).

=====================  ==================  =========================================================
field                  type, shape         meaning
=====================  ==================  =========================================================
``_levels``            int64 ``(N,)``      the level ids, read-only (saved: ``levels``)
``_scores``            float64 ``(N,)``    ``S_i``; 0 until level ``i`` is seen (saved: ``scores``)
``_last``              int64 ``(N,)``      ``C_i``, the draw count when ``i`` was last sampled, in
                                           ``[0, _t]`` (saved: ``last_sampled``)
``_t``                 int                 ``c``, levels sampled so far (saved: ``num_samples``)
``_perm``              int64 ``(N,)``      a permutation: ``_perm[:_n_seen]`` the seen positions, the
                                           rest unseen (saved: ``order``)
``_pos``               int64 ``(N,)``      its inverse, ``_perm[_pos[i]] == i`` (rebuilt on load)
``_n_seen``            int                 levels with a score, in ``[0, N]`` (saved: ``num_seen``)
``_next_index``        int                 the ``sequential`` strategy's next position
                                           (saved: ``next_index``)
``_num_replay``        int                 draws that replayed a seen level (saved: ``num_replay``)
``_num_explore``       int                 draws that explored an unseen one (saved: ``num_explore``)
``_softmax_shift``     float               the exponent the ``power``/``softmax`` sum tree is anchored at
                                           (saved: ``softmax_shift``)
``_success_rate``      float64 ``(N,)``    ``learnability`` only (else ``None``): running success rate
                                           ``p`` in ``[0, 1]`` (saved: ``success_rate``)
``_outcomes``          int64 ``(N,)``      ``learnability`` only (else ``None``): outcomes per level
                                           (saved: ``outcomes``)
``_progress``          float               the last ``set_progress`` value (saved: ``progress``)
``_rng``               Generator           all randomness (saved: ``rng``, its bit generator state)
=====================  ==================  =========================================================

The sampling structures (``_score_keys``/``_score_tree``, ``_stale_keys``/``_stale_tree``) are derived
from these fields and rebuilt from them whenever an operation is undone or a state is loaded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Union

import numpy as np
import numpy.typing as npt

from plr_gym._structures import LinearStalenessTree, OrderedKeys, SumTree
from plr_gym.sampler.options import _as_levels, _LevelIndex
from plr_gym.transforms import ScoreTransform

Strategy = Union[str, Callable[..., float]]
FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


class _SamplerRecord:
    """The fields of a :class:`~plr_gym.sampler.LevelSampler` (see the table above), and their start."""

    # options, set and checked by LevelSampler.__init__
    strategy: Strategy
    score_transform: str
    staleness_transform: str
    replay_schedule: str
    temperature: float  # the current β (annealed by set_progress with temperature_end)
    unseen_rank: str  # "seen" or "zero" (level-replay's rank over all levels, unseen at 0)
    power_offset: float  # added to the scores before the power transform (level-replay: 1e-3)
    temperature_start: float
    temperature_end: float | None
    staleness_temperature: float
    staleness_coef: float
    replay_prob: float
    min_seen_ratio: float
    alpha: float
    eps: float
    uniform_mass: float
    success_rate_alpha: float
    seed: int | None
    _h: ScoreTransform  # h, behind P_S
    _g: ScoreTransform  # g, behind P_C
    # the record
    _levels: IntArray
    _index: _LevelIndex
    _rng: np.random.Generator
    _scores: FloatArray
    _last: IntArray
    _t: int
    _perm: IntArray
    _pos: IntArray
    _n_seen: int
    _next_index: int
    _num_replay: int
    _num_explore: int
    _softmax_shift: float
    _success_rate: FloatArray | None
    _outcomes: IntArray | None
    _progress: float
    # derived sampling structures (None where the transform needs none)
    _score_keys: OrderedKeys | None
    _score_tree: SumTree | None
    _stale_keys: OrderedKeys | None
    _stale_tree: LinearStalenessTree | None

    if TYPE_CHECKING:  # what one room uses of another's (defined in LevelSampler and the mixins)

        @property
        def uses_scores(self) -> bool: ...
        @property
        def learns_outcomes(self) -> bool: ...
        @property
        def seen(self) -> npt.NDArray[np.bool_]: ...
        def _build_structures(self, reanchor: bool = False) -> None: ...
        def _set_score_weight(self, i: int, score: float) -> None: ...
        def _apply_progress(self, progress: float) -> None: ...
        def _config(self) -> dict[str, Any]: ...

    def _init_record(self, levels: Any) -> None:
        """The record of a fresh sampler over ``levels``: nothing seen, nothing sampled."""
        self._levels = _as_levels(levels)
        self._levels.flags.writeable = False
        self._index = _LevelIndex(self._levels)
        n = self._levels.size
        self._rng = np.random.default_rng(self.seed)
        self._scores = np.zeros(n, dtype=np.float64)
        self._last = np.zeros(n, dtype=np.int64)  # C_i: draw count when level i was last sampled
        self._t = 0  # c: number of levels sampled so far
        # perm[:n_seen] are the seen levels' indices, perm[n_seen:] the unseen ones; pos is its inverse.
        self._perm = np.arange(n, dtype=np.int64)
        self._pos = np.arange(n, dtype=np.int64)
        self._n_seen = 0
        self._next_index = 0  # sequential strategy
        self._num_replay = 0
        self._num_explore = 0
        self._softmax_shift = 0.0
        # learnability: running success rate and number of outcomes per level (None for other strategies)
        self._success_rate = np.zeros(n) if self.learns_outcomes else None
        self._outcomes = np.zeros(n, dtype=np.int64) if self.learns_outcomes else None
        self._build_structures()
