"""``python -m gptcore.cli``: the ``gptcore`` command (as ``python -m gptcore``)."""

import sys

from . import main

sys.exit(main())
