"""Text files of any size as token ids, a piece at a time, in bounded memory.

Encoding a whole file at once holds the file, its string and the tokenizer's encoding (about
200 bytes per token in Hugging Face ``tokenizers``) together: a large file, or ``/dev/zero``,
exhausts memory. ``token_pieces`` reads the file in blocks, decodes UTF-8 as it goes and
encodes the text a piece at a time, each piece ending at a line break followed by a
non-space character, so that at most ``max_line_bytes`` of text (and its encoding) is held at
once.

Why the pieces give the ids of the whole text: byte-level BPE tokenizers (GPT-2's, Llama 3's,
Qwen2's) split text into pre-tokens with a regular expression before merging, and a line
break followed by a non-space character always ends a pre-token there (a line break belongs
only to whitespace runs and punctuation runs that end with line breaks), so tokens never reach
across such a point. Each cut is nevertheless checked: the text around it (``_CHECK_CHARS`` on
either side) must encode to the same ids whole and cut. A tokenizer that fails the check
(SentencePiece's ``Metaspace``, which marks the start of each piece of text it is given; a
special token that absorbs the line break before it) is given the whole file at once, up to
``max_line_bytes``.

The tokens a tokenizer's post-processor puts in front of a text (Llama 3's
``<|begin_of_text|>``; GPT-2's, Qwen2's and SmolLM2's put none) come first, as their own
piece, as when the whole text is encoded for the model.

Past ``max_line_bytes`` without a usable cut (a line that long, ``/dev/zero``), reading stops
with a ``ValueError`` naming the file and the limit, before that text is encoded.
"""

from __future__ import annotations

import codecs
import os
import sys
from typing import IO, Any, Iterator, List, Optional

import numpy as np

__all__ = ["MAX_LINE_BYTES", "token_pieces", "TextTooLongError"]

#: The most text encoded at once by default (1 MiB): a line, or the whole file for a
#: tokenizer that cannot be given it in pieces.
MAX_LINE_BYTES = 1 << 20

_BLOCK = 1 << 16          # bytes read at a time
_TARGET = 1 << 16         # characters gathered before a cut is looked for
_CHECK_CHARS = 1024       # characters on either side of a cut encoded both ways
_TRIES = 4                # cuts tried (latest first) before more text is gathered


class TextTooLongError(ValueError):
    """A text file with more than ``max_line_bytes`` of text between two usable cuts."""


def _open(path: Any) -> IO[bytes]:
    if path == "-":
        return os.fdopen(os.dup(sys.stdin.fileno()), "rb")
    return open(path, "rb")


def token_pieces(path: Any, tokenizer: Any, *, max_line_bytes: int = MAX_LINE_BYTES,
                 name: Optional[str] = None) -> Iterator[np.ndarray]:
    """The token ids of the UTF-8 text file ``path`` (``"-"``: standard input), in pieces
    whose concatenation is ``tokenizer.encode(text, add_special_tokens=True)`` of the whole
    text (see the module): the post-processor's leading tokens, if any, then the text's. Raises
    ``OSError`` as opening and reading the file do, ``UnicodeDecodeError``-based
    ``ValueError`` naming the byte and its offset for text that is not UTF-8, and
    ``TextTooLongError`` past ``max_line_bytes`` of text without a usable cut."""
    label = name if name is not None else str(path)
    with _open(path) as fh:
        lead = getattr(tokenizer, "leading_special_ids", None)
        lead = lead() if lead is not None else np.zeros(0, np.int64)
        if lead.size:
            yield lead
        yield from _pieces(fh, tokenizer, max_line_bytes, label)


def _utf8_error(label: str, e: UnicodeDecodeError, offset: int) -> ValueError:
    byte = e.object[e.start] if e.start < len(e.object) else None
    what = f"byte 0x{byte:02x}" if byte is not None else "an incomplete character"
    return ValueError(f"{label!r} is not UTF-8 text ({what} at offset {offset:,})")


def _pieces(fh: IO[bytes], tokenizer: Any, limit: int, label: str) -> Iterator[np.ndarray]:
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    fed = 0                   # bytes given to the decoder
    parts: List[str] = []     # decoded text not yet encoded, in the pieces it came in
    chars = 0                 # its length
    held = 0                  # its size in bytes (with the decoder's incomplete character)
    splittable = True         # cuts have worked so far (a failed check turns this off)
    while True:
        block = fh.read(_BLOCK)
        pending = len(decoder.getstate()[0])
        try:
            new = decoder.decode(block, final=not block)
        except UnicodeDecodeError as e:
            raise _utf8_error(label, e, fed - pending + e.start) from None
        fed += len(block)
        held += len(block)
        if new:
            parts.append(new)
            chars += len(new)
        if not block:
            break
        # A new cut can only be where the new text has a line break (or just after one).
        if splittable and chars >= _TARGET and ("\n" in new or (len(parts) > 1 and parts[-2].endswith("\n"))):
            text = "".join(parts)
            cut = _usable_cut(text, tokenizer)
            if cut is None and chars > 4 * _TARGET and _has_cut(text):
                splittable = False  # cuts exist but change the tokens: this tokenizer reads whole texts
                parts = [text]
            elif cut is not None:
                piece = text[:cut]
                parts = [text[cut:]]
                chars -= cut
                held -= len(piece.encode("utf-8"))
                yield tokenizer.encode(piece)
            else:
                parts = [text]
        if held > limit:
            if splittable and not _has_cut("".join(parts)):
                raise TextTooLongError(
                    f"{label!r} has more than {limit:,} bytes of text without a line break followed by a "
                    f"non-space character (the most text encoded at once; raise max_line_bytes, or "
                    "--max-line-bytes, to read it)")
            raise TextTooLongError(
                f"{label!r} is longer than {limit:,} bytes and its tokenizer must be given the whole text at once "
                "(its tokens change where the text is cut at line breaks); raise max_line_bytes, or "
                "--max-line-bytes, to read it")
    if parts:
        yield tokenizer.encode("".join(parts))


def _cut_points(text: str) -> Iterator[int]:
    """Positions just after a line break followed by a non-space character, latest first."""
    i = text.rfind("\n", 0, len(text) - 1)
    while i >= 0:
        if not text[i + 1].isspace():
            yield i + 1
        i = text.rfind("\n", 0, i)


def _has_cut(text: str) -> bool:
    return next(_cut_points(text), None) is not None


def _usable_cut(text: str, tokenizer: Any) -> Optional[int]:
    """The latest cut (of the last few) around which the text encodes the same whole and cut."""
    for tries, cut in enumerate(_cut_points(text)):
        if tries == _TRIES:
            return None
        left = text[max(0, cut - _CHECK_CHARS):cut]
        right = text[cut:cut + _CHECK_CHARS]
        whole = tokenizer.encode(left + right)
        parts: List[np.ndarray] = [tokenizer.encode(left), tokenizer.encode(right)]
        if np.array_equal(whole, np.concatenate(parts)):
            return cut
    return None
