"""Doctest collection over src/ (skip the modules of optional extras whose packages are not installed), and
one OpenMP thread per process for the whole suite."""

from __future__ import annotations

import importlib.util
import os

# The suite runs two xdist workers on CI's 2 cores. A process that keeps torch's default pool (one OpenMP
# thread per core) then spins its threads against the other worker: the examples' tests took 315 s with it
# and 172 s with one thread (tests/test_examples.py, -n 2, 2 cores under load). Every process the suite
# starts inherits this (xdist workers, example scripts, notebook kernels, CLI and benchmark subprocesses);
# set OMP_NUM_THREADS yourself to test with another count.
os.environ.setdefault("OMP_NUM_THREADS", "1")

collect_ignore = [
    path
    for path, needs in (
        ("src/plr_gym/trl.py", "trl"),
        ("src/plr_gym/verl.py", "verl"),
        ("src/plr_gym/_verl_dataset.py", "verl"),
        ("src/plr_gym/_verl_replay.py", "verl"),
        ("src/plr_gym/jax", "jax"),  # the jax extra: Python >= 3.12 (the 3.13 stack)
    )
    if importlib.util.find_spec(needs) is None
]
