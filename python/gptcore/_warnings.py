"""Warnings that point at the caller's line, not at gptcore's own.

``warnings.warn(..., stacklevel=n)`` needs the number of frames between the call and the
user's code, which differs with the path taken (``Model.generate``, ``Model.stream`` driven by
a ``for`` loop, ``generate_text`` through ``gptcore.text``). ``warn_at_caller`` counts them:
the warning is attributed to the first frame outside the gptcore package (what Python 3.12's
``skip_file_prefixes`` does).
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Type

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def warn_at_caller(message: str, category: Type[Warning] = UserWarning) -> None:
    """``warnings.warn(message, category)`` attributed to the innermost frame that is not in
    the gptcore package."""
    level = 2  # stacklevel 1 is this function, 2 the frame below
    frame = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE):
        frame = frame.f_back
        level += 1
    warnings.warn(message, category, stacklevel=level)
