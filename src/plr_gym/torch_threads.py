"""torch's CPU threads for a training run: one rule (:func:`apply_torch_threads`) behind
:func:`plr_gym.training.build_run`'s ``torch_threads`` and ``plr-gym --torch-threads``.

An MLP policy (MiniGrid) trains with one thread, a CNN (Procgen) with torch's default; see
:func:`default_torch_threads`. Importing this module does not import torch.
"""

from __future__ import annotations

import functools
import os

__all__ = [
    "apply_torch_threads",
    "default_torch_threads",
    "max_torch_threads",
    "set_torch_threads",
    "torch_default_threads",
]


def max_torch_threads() -> int:
    """Most torch CPU threads :func:`set_torch_threads` (and ``--torch-threads``) accept: the machine's
    logical CPUs (``os.cpu_count()``). More threads than CPUs never speed torch up, and very large counts
    crash its thread pool."""
    return os.cpu_count() or 1


def default_torch_threads(policy: str) -> int | None:
    """The torch CPU thread count a run of ``policy`` (a name from :func:`policy_for`) should use.

    - MLP policies (``MlpPolicy``, ``MlpLstmPolicy``: MiniGrid's grid codes, vector observations): **1**.
      Their matrix products are too small to split; extra threads only spin, so torch's default (one
      thread per core) costs several times the CPU for the same steps per second.
    - CNN policies (``CnnPolicy``, ``CnnLstmPolicy``: Procgen's 64x64 frames): ``None``, torch's default
      (one thread per physical core): convolutions over a batch of frames do use several cores.

    Example:
        >>> default_torch_threads("MlpPolicy"), default_torch_threads("CnnPolicy")
        (1, None)
    """
    if policy.startswith("Mlp"):
        return 1
    if policy.startswith("Cnn"):
        return None
    raise ValueError(f"policy must be an Mlp* or Cnn* policy name, got {policy!r}")


def set_torch_threads(n: int | None) -> None:
    """``torch.set_num_threads(n)``; ``None`` leaves torch's default.

    :raises ValueError: ``n`` is not an int in ``1..max_torch_threads()``.
    """
    if n is None:
        return
    limit = max_torch_threads()
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= limit:
        raise ValueError(f"n must be an int in 1..{limit} (this machine's CPUs) or None, got {n!r}")
    import torch

    torch_default_threads()  # remember torch's own count before the first change
    torch.set_num_threads(n)


@functools.cache
def torch_default_threads() -> int:
    """torch's own CPU thread count, as it was before plr_gym first changed it in this process (so a CNN
    run after an MLP run in one process gets torch's default back)."""
    import torch

    return int(torch.get_num_threads())


def apply_torch_threads(torch_threads: int | str | None, policy: str) -> int:
    """Set torch's CPU threads for a run of ``policy`` (a name from :func:`policy_for`); return the count
    now in use. The one rule behind :func:`build_run`'s ``torch_threads`` and ``plr-gym --torch-threads``.

    :param torch_threads: ``"auto"``: :func:`default_torch_threads` (1 for an MLP; for a CNN torch's own
        default, :func:`torch_default_threads`); an int in ``1..max_torch_threads()``: that many; ``None``:
        leave torch's setting as it is (the opt-out, e.g. after your own ``torch.set_num_threads``).
    :raises ValueError: any other ``torch_threads``, or a policy name that is not ``Mlp*``/``Cnn*``.

    Example:
        >>> import torch
        >>> apply_torch_threads("auto", "MlpPolicy"), torch.get_num_threads()
        (1, 1)
    """
    _check_torch_threads(torch_threads)
    if torch_threads is None:
        import torch

        return int(torch.get_num_threads())
    if torch_threads == "auto":
        auto = default_torch_threads(policy)
        n = min(torch_default_threads(), max_torch_threads()) if auto is None else auto
    else:
        default_torch_threads(policy)  # a known policy name, as for "auto"
        n = int(torch_threads)
    set_torch_threads(n)
    return n


def _check_torch_threads(torch_threads: object) -> None:
    limit = max_torch_threads()
    if torch_threads is None or torch_threads == "auto":
        return
    if (
        isinstance(torch_threads, bool)
        or not isinstance(torch_threads, int)
        or not 1 <= torch_threads <= limit
    ):
        raise ValueError(
            f"torch_threads must be 'auto', None (leave torch as it is) or an int in 1..{limit} (this "
            f"machine's CPUs), got {torch_threads!r}"
        )
