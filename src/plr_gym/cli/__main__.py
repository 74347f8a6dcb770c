"""``python -m plr_gym.cli``: the ``plr-gym`` command."""

import sys

from plr_gym.cli.main import main

sys.exit(main())
