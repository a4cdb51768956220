"""``python -m gptcore``: the ``gptcore`` command."""

import sys

from .cli import main

sys.exit(main())
