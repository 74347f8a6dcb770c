"""``python -m plr_gym``: the ``plr-gym`` command (see :mod:`plr_gym.cli`)."""

import sys

from plr_gym.cli import main

if __name__ == "__main__":
    sys.exit(main())
