"""What crosses between a :class:`~plr_gym.distributed.RemoteLevelSource` and its actor.

Score batches packed into three arrays (:func:`pack_batches`, :func:`unpack_batches`), drawn levels as
lists of Python scalars, errors made picklable for the trip back to the client, the errors meaning "the
actor is gone for now" (:data:`_GONE`: wait and retry) and the one raised when it stays gone
(:class:`LevelSourceUnavailable`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from ray.exceptions import GetTimeoutError, RayActorError

from plr_gym.distributed.options import _check_count

try:  # Ray >= 2.10
    from ray.exceptions import ActorUnavailableError as ActorUnavailableError
except ImportError:  # pragma: no cover - older Ray
    ActorUnavailableError = RayActorError  # type: ignore[misc,assignment]

#: Errors meaning "the actor is dead, restarting or unreachable": wait and retry.
_GONE = (RayActorError, ActorUnavailableError, GetTimeoutError)


class LevelSourceUnavailable(RuntimeError):
    """The level source actor stayed dead or unreachable for longer than the client's ``retry_timeout``."""


def pack_batches(batches: list[tuple[Any, Any]]) -> Any:
    """Score batches as three flat arrays (levels, scores, batch sizes) when every batch's levels are a
    numeric array: one message of three arrays is much cheaper for Ray to send than many small ones."""
    if len(batches) < 2 or not all(
        isinstance(levels, np.ndarray) and levels.dtype != object for levels, _ in batches
    ):
        return batches
    sizes = np.fromiter((len(scores) for _, scores in batches), dtype=np.int64, count=len(batches))
    levels = np.concatenate([levels for levels, _ in batches])
    scores = np.concatenate([np.asarray(scores, dtype=np.float64) for _, scores in batches])
    return ("packed", levels, scores, sizes)


def unpack_batches(batches: Any) -> list[tuple[Any, Any]]:
    """The list of ``(levels, scores)`` batches :func:`pack_batches` packed (a list is returned as is).

    :raises ValueError: if ``batches`` is neither a packed message whose sizes add up to its levels and
        scores nor a list of ``(levels, scores)`` pairs of equal lengths (then nothing may be applied)
    """
    if isinstance(batches, tuple) and len(batches) == 4 and isinstance(batches[0], str):
        if batches[0] != "packed":
            raise ValueError(f"batches: unknown message kind {batches[0]!r} (expected 'packed')")
        _, levels, scores, sizes = batches
        levels, scores, sizes = np.asarray(levels), np.asarray(scores), np.asarray(sizes)
        if (
            levels.ndim != 1
            or scores.ndim != 1
            or sizes.ndim != 1
            or sizes.dtype.kind not in "iu"
            or (sizes < 0).any()
            or not int(sizes.sum()) == levels.size == scores.size
        ):
            raise ValueError(
                "batches: a packed message needs 1-D levels and scores of equal length and non-negative "
                f"int sizes adding up to it; got {levels.shape} levels, {scores.shape} scores and sizes "
                f"{sizes.tolist() if sizes.size <= 8 else sizes.shape}"
            )
        bounds = np.concatenate([[0], np.cumsum(sizes)]).tolist()
        return [(levels[a:b], scores[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
    if isinstance(batches, (str, bytes, dict)) or not isinstance(batches, (list, tuple)):
        raise ValueError(f"batches must be a list of (levels, scores) pairs, got {type(batches).__name__}")
    out = []
    for k, batch in enumerate(batches):
        if not isinstance(batch, (list, tuple)) or len(batch) != 2:
            raise ValueError(f"batches[{k}] must be a (levels, scores) pair, got {type(batch).__name__}")
        levels, scores = batch
        try:
            n_levels, n_scores = len(levels), len(scores)
        except TypeError:
            raise ValueError(f"batches[{k}]: levels and scores must be sequences") from None
        if n_levels != n_scores:
            raise ValueError(f"batches[{k}] has {n_levels} levels but {n_scores} scores")
        out.append((levels, scores))
    return out


def _checked_push(
    client: Any, seq: Any, batches: Any, draw: Any
) -> tuple[str, int, list[tuple[Any, Any]], int]:
    """The arguments of :meth:`LevelSourceActor.push`, checked whole (``TypeError``/``ValueError``)."""
    if not isinstance(client, str) or not client:
        raise TypeError(f"client must be a non-empty str (the client's id), got {client!r}")
    return client, _check_count("seq", seq, 1), unpack_batches(batches), _check_count("draw", draw, 0)


def _portable(exc: Exception) -> BaseException:
    """``exc`` if it survives pickling (it goes back to the client), else a RuntimeError with its text."""
    import pickle

    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc


def _writable(value: Any) -> Any:
    """``value`` with writable copies of the read-only arrays Ray hands out (e.g. for torch)."""
    if isinstance(value, np.ndarray):
        return value if value.flags.writeable else value.copy()
    if isinstance(value, dict):
        return {k: _writable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_writable(v) for v in value]
    return value


def _wire(levels: Any) -> Any:
    """Drawn levels as a client receives them: a numeric array as a list of Python scalars (Ray sends a
    list of ints for less of the actor's CPU than a small array), anything else as it is."""
    if isinstance(levels, np.ndarray) and levels.dtype.kind in "iub":
        return levels.tolist()
    return levels


def _as_list(levels: Any) -> list[Any]:
    return levels.tolist() if isinstance(levels, np.ndarray) else list(levels)
