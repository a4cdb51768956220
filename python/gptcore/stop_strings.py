"""Stop strings: ending generated text where one of some strings appears, across tokens.

A stop string may be spread over several tokens (``"\\n\\n"`` as two ``"\\n"`` tokens, ``"The
End"`` as ``"The"``, ``" E"``, ``"nd"``), and a token may hold the end of the text, a whole stop
string and more. ``StopStringMatcher`` works on the decoded text, not on tokens: it is fed the
text of each new token (``push``) and gives back the part that is safe to show, holding back
any tail that could still become a stop string. When a stop string appears, the text before
it is released, the stop string and anything after it are dropped, and ``stopped`` is set.

Which occurrence: the first to be complete, reading the text from its start (the one that
ends first; of two that end at the same character, the longer). That is what a reader of the
stream sees first, and it does not depend on how the text is cut into tokens: the pieces
released, joined, equal the whole text cut there (or the whole text, once ``flush`` releases
the held tail at the end).
"""

from __future__ import annotations

from typing import Iterable, Tuple

__all__ = ["StopStringMatcher"]


class StopStringMatcher:
    """Find stop strings in text that arrives piece by piece (see the module).

    ``push(text) -> (released, stopped)``; ``flush() -> released`` at the end of generation
    (the held tail, which was not a stop string after all). After a stop, ``push`` releases
    nothing. Holds at most the longest stop string's length minus one characters.
    """

    def __init__(self, stop: Iterable[str]) -> None:
        if isinstance(stop, str):
            stop = (stop,)
        stops = []
        for s in stop:
            if not isinstance(s, str):
                raise TypeError(f"stop must hold strings, got {s!r}")
            if not s:
                raise ValueError("stop: an empty string would stop before the first token")
            stops.append(s)
        self._stops: Tuple[str, ...] = tuple(stops)
        self._held = ""
        self.stopped = False
        self.found = None  # the stop string that ended the text

    @property
    def held(self) -> str:
        """The text held back: a tail that is the start of a stop string."""
        return self._held

    def push(self, text: str) -> Tuple[str, bool]:
        """Add the text of the next token; return the text now safe to release and whether a
        stop string has appeared (then the text before it is the last released)."""
        if self.stopped:
            return "", True
        if not self._stops:
            return text, False
        buf = self._held + text
        # An occurrence cannot start before the held tail: everything released so far was
        # checked, and a stop string's start still in the running is always held.
        first, end, found = -1, -1, None
        for s in self._stops:
            i = buf.find(s)  # its first occurrence is also the first to end
            if i >= 0 and (end < 0 or (i + len(s), i) < (end, first)):
                first, end, found = i, i + len(s), s
        if first >= 0:
            self._held = ""
            self.stopped, self.found = True, found
            return buf[:first], True
        keep = 0
        for s in self._stops:
            for k in range(min(len(s) - 1, len(buf)), keep, -1):
                if buf.endswith(s[:k]):
                    keep = k
                    break
        self._held = buf[len(buf) - keep:]
        return buf[:len(buf) - keep], False

    def flush(self) -> str:
        """The held tail, released at the end of generation (no stop string completed it)."""
        out, self._held = ("" if self.stopped else self._held), ""
        return out
