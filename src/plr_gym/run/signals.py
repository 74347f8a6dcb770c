"""Signals as requests: ``SIGTERM``, ``SIGINT``, ``SIGHUP`` (a closed terminal or SSH session) and
``SIGUSR1`` (SLURM's ``--signal``) ask training to save at the current step and stop, instead of killing
it inside a checkpoint write."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

__all__ = ["StopOnSignals"]

_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGUSR1")


class StopOnSignals:
    """Turn ``SIGTERM``, ``SIGINT``, ``SIGHUP`` and ``SIGUSR1`` into a request to stop training after the
    current step.

    While :meth:`installed`, the first of these signals sets :attr:`signal` (its number) and returns; a
    :class:`~plr_gym.RunCheckpointCallback` given this object then saves at the current step and stops
    training (its ``on_step`` returns ``False``), so a signal never lands inside a checkpoint write, a
    sampler update or a logger. A second ``SIGINT`` (Ctrl-C twice) raises ``KeyboardInterrupt`` at once;
    repeated ``SIGTERM``/``SIGHUP``/``SIGUSR1`` keep the request. Outside the main thread nothing is
    installed (Python delivers signals to the main thread only).

    :param signals: names of the signals to handle (default ``SIGTERM``, ``SIGINT``, ``SIGHUP``,
        ``SIGUSR1``; those this platform lacks are skipped).
    :param on_request: called (in the main thread, from the signal handler) when the first one arrives.

    Example:
        >>> import os, signal
        >>> stop = StopOnSignals()
        >>> with stop.installed():
        ...     os.kill(os.getpid(), signal.SIGTERM)
        >>> stop.requested, stop.signal == signal.SIGTERM, stop.exit_code
        (True, True, 143)
    """

    def __init__(
        self, signals: Iterable[str] = _SIGNALS, on_request: Callable[[], None] | None = None
    ) -> None:
        self.names = tuple(s for s in signals if hasattr(signal, s))
        self.on_request = on_request
        self.signal: int | None = None

    @property
    def requested(self) -> bool:
        """Whether a stop was requested."""
        return self.signal is not None

    @property
    def exit_code(self) -> int:
        """``128 + the signal's number`` (the shell's convention: 130 for SIGINT, 143 for SIGTERM)."""
        return 128 + int(self.signal or 0)

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signal).name if self.signal is not None else "none"

    @contextlib.contextmanager
    def installed(self) -> Iterator[StopOnSignals]:
        """Install the handlers for the duration of the ``with`` block (the previous ones come back)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        numbers = [getattr(signal, name) for name in self.names]
        previous = {num: signal.getsignal(num) for num in numbers}

        def handler(signum: int, frame: Any) -> None:
            if self.signal is not None:
                if signum == signal.SIGINT:
                    raise KeyboardInterrupt
                return
            self.signal = signum
            with contextlib.suppress(OSError, ValueError):  # a raw write: no reentrant buffered print
                name = signal.Signals(signum).name
                os.write(
                    sys.stderr.fileno(),
                    f"\n{name}: saving at this step and stopping (Ctrl-C again: at once)\n".encode(),
                )
            if self.on_request is not None:
                self.on_request()

        for num in numbers:
            signal.signal(num, handler)
        try:
            yield self
        finally:
            for num, old in previous.items():
                signal.signal(num, old)
