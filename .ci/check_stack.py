"""Print a CI stack's versions and fail if the venv is not the stack it should be (docs/install.md).

python .ci/check_stack.py py311   # Python 3.11, numpy 1.x, procgen-mirror (+ gym), Ray and RLlib
python .ci/check_stack.py py312   # Python 3.12, numpy >= 2, verl 0.9, TransferQueue (tests/test_verl.py only)
python .ci/check_stack.py py313   # Python 3.13, numpy >= 2, procgen-gym, no gym, Ray core, notebooks, JAX
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys


def version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def main(stack: str) -> int:
    import numpy

    shown = ["numpy", "gymnasium", "gym", "procgen-mirror", "procgen-gym", "torch", "stable-baselines3"]
    shown += ["ray", "verl", "transferqueue"]
    print(f"stack {stack}: Python {sys.version.split()[0]}, " + ", ".join(f"{d} {version(d)}" for d in shown))
    major = int(numpy.__version__.split(".")[0])
    expect = {
        "py311": [
            (sys.version_info[:2] == (3, 11), "Python 3.11"),
            (major == 1, "numpy 1.x (procgen-mirror is built against it)"),
            (version("procgen-mirror") is not None, "procgen-mirror installed"),
            (importlib.util.find_spec("ray.rllib") is not None, "Ray RLlib installed"),
        ],
        "py312": [
            (sys.version_info[:2] == (3, 12), "Python 3.12"),
            (major >= 2, "numpy >= 2 (verl 0.9 needs it)"),
            ((version("verl") or "").startswith("0.9."), "verl 0.9 (the verl-v1 extra)"),
            (version("transferqueue") is not None, "TransferQueue installed (the V1 trainer's store)"),
        ],
        "py313": [
            (sys.version_info[:2] >= (3, 13), "Python >= 3.13"),
            (major >= 2, "numpy >= 2 (the procgen extra must not downgrade it)"),
            (version("gym") is None, "no legacy gym installed"),
            (version("procgen-gym") is not None, "procgen-gym installed"),
            (version("procgen-mirror") is None, "no procgen-mirror installed"),
            (version("ray") is not None, "Ray core installed"),
            (all(version(d) for d in ("nbclient", "ipykernel")), "nbclient and ipykernel: notebooks run"),
            (version("jax") is not None, "JAX installed (the jax extra: plr_gym.jax, tests/test_jax.py)"),
        ],
    }[stack]
    failed = [what for ok, what in expect if not ok]
    for what in failed:
        print(f"stack {stack}: expected {what}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in ("py311", "py312", "py313"):
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
