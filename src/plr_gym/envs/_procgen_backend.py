"""The one place that knows which Procgen build is installed: ``procgen-mirror`` or ``procgen-gym``.

Both ship openai/procgen 0.10.7's C++ library behind the same ``libenv`` C interface (``libenv_act``,
``libenv_observe`` over caller-owned buffers, plus ``get_state``/``set_state`` per game); they differ only in
the Python around it:

* **procgen-mirror** (Python 3.11 and 3.12; numpy < 2, the legacy ``gym`` and ``gym3``): the module
  ``procgen``; ``procgen.ProcgenGym3Env`` is gym3's ``libenv.CEnv``, a cffi binding (gym3 0.3.x).
* **procgen-gym** (Python 3.13; numpy 2, gymnasium, no ``gym``/``gym3``): the module ``procgen_gym``;
  ``procgen_gym.ProcgenVecEnv`` holds a ctypes binding in ``env._clib``. Its own ``VectorEnv`` face is not
  used: it reports ``terminated = first`` and no final observation, and announces next-step autoreset while
  resetting in the same step. The batched envs here step the C library directly instead, as with gym3.

:func:`procgen_backend` picks the build (the one the ``procgen`` extra installs for this Python first) and
:meth:`ProcgenBackend.make` returns a :class:`ProcgenCore`: the C calls and the numpy buffers of ``num``
games, the same on both builds. :class:`~plr_gym.envs.ProcgenLevelEnv` and the batched envs only ever talk to
a :class:`ProcgenCore`, so they never ask which build they run on.
"""

from __future__ import annotations

import ctypes
import functools
import importlib
import importlib.util
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["BACKENDS", "ProcgenBackend", "ProcgenCore", "procgen_backend"]

_OBS_SHAPE = (64, 64, 3)
MAX_STATE_BYTES = 2**20  # Procgen's own limit on a serialized state (procgen.env.MAX_STATE_SIZE)
INSTALL_HINT = "pip install 'plr-gym[procgen]'"


class ProcgenCore:
    """``num`` Procgen games of one C environment: its C calls and the buffers they read and write.

    After :attr:`observe`, :attr:`rgb` ``(num, 64, 64, 3)`` ``uint8``, :attr:`reward` ``(num,)`` ``float32``,
    :attr:`first` ``(num,)`` ``bool`` (the game reset in the last step) and :attr:`level_complete` ``(num,)``
    ``uint8`` (Procgen's ``prev_level_complete``) hold the games' latest outputs; :attr:`act` steps every game
    with the actions in :attr:`action` ``(num,)`` ``int32``. The arrays are Procgen's own buffers: read them,
    copy what must outlive the next call. Not public: built by :meth:`ProcgenBackend.make`.
    """

    def __init__(
        self,
        env: Any,
        *,
        act: Callable[[], None],
        observe: Callable[[], None],
        get_state: Callable[[int], bytes],
        set_state: Callable[[int, bytes], None],
        buffers: dict[str, Any],
    ) -> None:
        self._env = env  # the package's env object: owns the C env and keeps the buffers alive
        self.act = act
        self.observe = observe
        self.get_state = get_state
        self.set_state = set_state
        num = int(np.shape(buffers["action"])[0])
        expected = {
            "action": ((num,), np.int32),
            "rgb": ((num, *_OBS_SHAPE), np.uint8),
            "reward": ((num,), np.float32),
            "first": ((num,), np.bool_),
            "level_complete": ((num,), np.uint8),
        }
        for name, (shape, dtype) in expected.items():
            buffer = buffers[name]
            if not isinstance(buffer, np.ndarray) or buffer.shape != shape or buffer.dtype != dtype:
                raise RuntimeError(
                    f"plr_gym expects Procgen's {name!r} buffer as a {np.dtype(dtype)} array of shape "
                    f"{shape}, got {buffer!r:.80}"
                )
        self.num = num
        self.action: npt.NDArray[np.int32] = buffers["action"]
        self.rgb: npt.NDArray[np.uint8] = buffers["rgb"]
        self.reward: npt.NDArray[np.float32] = buffers["reward"]
        self.first: npt.NDArray[np.bool_] = buffers["first"]
        self.level_complete: npt.NDArray[np.uint8] = buffers["level_complete"]
        self.closed = False

    def close(self) -> None:
        """Free the C environment; calling it again does nothing."""
        if not self.closed:
            self.closed = True
            self._env.close()


class ProcgenBackend:
    """One installed Procgen build: how to build its env and bind a :class:`ProcgenCore` to it.

    :attr:`name` is the distribution (``"procgen-mirror"`` or ``"procgen-gym"``), :attr:`module` the
    imported Python module.
    """

    name: str = ""
    module_name: str = ""

    def __init__(self, module: Any) -> None:
        self.module = module

    @property
    def version(self) -> str:
        """The installed version of the build."""
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version(self.name)
        except PackageNotFoundError:  # e.g. a source build installed under another distribution name
            return str(getattr(self.module, "__version__", "unknown")).strip()

    def make_stock(self, num: int, game: str, **kwargs: Any) -> Any:
        """The package's own batched env object (``num`` games; ``kwargs`` are Procgen's options)."""
        raise NotImplementedError

    def bind(self, env: Any) -> ProcgenCore:
        """A :class:`ProcgenCore` on the C environment of ``env`` (a :meth:`make_stock` result)."""
        raise NotImplementedError

    def make(self, num: int, game: str, **kwargs: Any) -> ProcgenCore:
        """``num`` games of ``game`` in one C environment, as a :class:`ProcgenCore`."""
        env = self.make_stock(num, game, **kwargs)
        try:
            return self.bind(env)
        except BaseException:
            env.close()
            raise

    def __repr__(self) -> str:
        return f"<ProcgenBackend {self.name} {self.version}>"


def _core(
    env: Any,
    handle: Any,
    c_calls: tuple[Callable[..., Any], Callable[..., Any], Callable[..., int], Callable[..., None]],
    state_buffer: Any,
    read_state: Callable[[int], bytes],
    buffers: dict[str, Any],
) -> ProcgenCore:
    """A :class:`ProcgenCore` over ``libenv_act``, ``libenv_observe``, ``get_state`` and ``set_state`` of the
    C environment ``handle`` (``c_calls``, in that order). ``get_state`` writes into ``state_buffer``
    (:data:`MAX_STATE_BYTES`, reused by every call); ``read_state(size)`` copies its first ``size`` bytes."""
    act, observe, c_get_state, c_set_state = c_calls

    def get_state(i: int) -> bytes:
        return read_state(c_get_state(handle, i, state_buffer, MAX_STATE_BYTES))

    def set_state(i: int, data: bytes) -> None:
        c_set_state(handle, i, data, len(data))

    return ProcgenCore(
        env,
        act=functools.partial(act, handle),
        observe=functools.partial(observe, handle),
        get_state=get_state,
        set_state=set_state,
        buffers=buffers,
    )


class _Gym3Backend(ProcgenBackend):
    """procgen-mirror: ``procgen.ProcgenGym3Env`` is gym3 0.3.x's cffi ``libenv.CEnv``."""

    name = "procgen-mirror"
    module_name = "procgen"

    def make_stock(self, num: int, game: str, **kwargs: Any) -> Any:
        return self.module.ProcgenGym3Env(num=num, env_name=game, **kwargs)

    def bind(self, env: Any) -> ProcgenCore:
        try:
            lib, handle, ffi = env._c_lib, env._c_env, env._ffi
            buffers = {
                "action": env._ac["action"],
                "rgb": env._ob["rgb"],
                "reward": env._rew,
                "first": env._first,
                "level_complete": env._info["prev_level_complete"],
            }
            act, observe = lib.libenv_act, lib.libenv_observe
            c_get_state, c_set_state = lib.get_state, lib.set_state
        except (AttributeError, KeyError, TypeError) as exc:
            raise RuntimeError(
                "plr_gym's Procgen envs need gym3's libenv CEnv (gym3 0.3.x) under procgen.ProcgenGym3Env; "
                f"the installed one differs ({exc!r})"
            ) from exc
        state = bytearray(MAX_STATE_BYTES)
        cstate = ffi.from_buffer(state)  # BaseProcgenEnv.get_state() allocates 1 MB per call; reuse one
        c_calls = (act, observe, c_get_state, c_set_state)
        return _core(env, handle, c_calls, cstate, lambda size: bytes(memoryview(state)[:size]), buffers)


# int get_state(libenv_env *, int, char *, int); void set_state(libenv_env *, int, char *, int)
_GET_STATE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int)
_SET_STATE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_int)
_STEP = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _ProcgenGymBackend(ProcgenBackend):
    """procgen-gym: ``procgen_gym.ProcgenVecEnv`` holds its ctypes ``CLibenv`` in ``env._clib``."""

    name = "procgen-gym"
    module_name = "procgen_gym"

    def make_stock(self, num: int, game: str, **kwargs: Any) -> Any:
        return self.module.ProcgenVecEnv(num_envs=num, env_name=game, **kwargs)

    def bind(self, env: Any) -> ProcgenCore:
        try:
            clib = env._clib
            lib, handle = clib._lib, clib._handle
            first = clib._first_buf
            buffers = {
                "action": clib._ac_bufs["action"],
                "rgb": clib._ob_bufs["rgb"],
                "reward": clib._rew_buf,
                # uint8 0/1 written by Procgen: the same bytes read as bool, no copy per step
                "first": first.view(np.bool_) if first.dtype == np.uint8 else first,
                "level_complete": clib._info_bufs["prev_level_complete"],
            }
            # typed prototypes of our own, leaving procgen-gym's function objects as they are
            act, observe = _STEP(("libenv_act", lib)), _STEP(("libenv_observe", lib))
            c_get_state = _GET_STATE(("get_state", lib))
            c_set_state = _SET_STATE(("set_state", lib))
        except (AttributeError, KeyError, TypeError) as exc:
            raise RuntimeError(
                "plr_gym's Procgen envs need procgen-gym 0.1's ctypes CLibenv under "
                f"procgen_gym.ProcgenVecEnv; the installed one differs ({exc!r})"
            ) from exc
        state = ctypes.create_string_buffer(MAX_STATE_BYTES)
        c_calls = (act, observe, c_get_state, c_set_state)
        return _core(env, handle, c_calls, state, lambda size: ctypes.string_at(state, size), buffers)


#: The Procgen builds in order of preference for this Python: the one the ``procgen`` extra installs first.
BACKENDS: tuple[type[ProcgenBackend], ...] = (
    (_ProcgenGymBackend, _Gym3Backend) if sys.version_info >= (3, 13) else (_Gym3Backend, _ProcgenGymBackend)
)


def procgen_backend() -> ProcgenBackend:
    """The installed Procgen build that plr_gym's Procgen envs use (imports it).

    The first of :data:`BACKENDS` that imports: procgen-mirror before procgen-gym below Python 3.13,
    procgen-gym first from 3.13 (the builds the ``procgen`` extra installs there).

    :raises ImportError: if neither is installed (or neither imports), naming what to install.

    Example:
        >>> from plr_gym.envs._procgen_backend import BACKENDS
        >>> sorted(backend.name for backend in BACKENDS)
        ['procgen-gym', 'procgen-mirror']
    """
    failures = []
    for backend in BACKENDS:
        if importlib.util.find_spec(backend.module_name) is None:
            continue
        try:
            module = importlib.import_module(backend.module_name)
        except ImportError as exc:  # installed but broken (e.g. built against another numpy)
            failures.append(f"{backend.name}: {exc}")
            continue
        return backend(module)
    detail = f" ({'; '.join(failures)})" if failures else ""
    raise ImportError(
        "plr_gym's Procgen envs need Procgen: procgen-mirror (Python 3.11/3.12) or procgen-gym "
        f"(Python 3.13); install it with {INSTALL_HINT}{detail}"
    )
