"""What a Hugging Face model folder says about ending generation: its end-of-sequence ids.

transformers takes ``eos_token_id`` from ``generation_config.json`` and, where that file is
missing or silent, from ``config.json``; the value is one id or a list of ids (Llama 3
Instruct lists both ``<|end_of_text|>`` and ``<|eot_id|>``). ``eos_token_ids`` reads it the
same way for any folder, GPT-2's (``50256``) as well as the newer families'.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional, Tuple, Union

__all__ = ["eos_token_ids", "EOS_FILES"]

#: The files read, in order; the first that has a non-null ``eos_token_id`` wins.
EOS_FILES = ("generation_config.json", "config.json")


def eos_token_ids(folder: Union[str, "os.PathLike[str]"],
                  vocab_size: Optional[int] = None) -> Optional[Tuple[int, ...]]:
    """The end-of-sequence ids of the model folder ``folder`` (see the module), in the order
    the file gives them, without repeats; ``None`` when neither file names one (or
    ``folder`` is not a folder). With ``vocab_size``, every id must be below it.

    Raises ``ValueError`` naming the file for JSON that cannot be read or an
    ``eos_token_id`` that is not an id or a list of ids (or is outside the vocabulary).
    """
    p = Path(os.fspath(folder))
    if not p.is_dir():
        return None
    for name in EOS_FILES:
        path = p / name
        if not path.is_file():
            continue
        content = _read(path)
        value = content.get("eos_token_id") if isinstance(content, dict) else None
        if value is None:
            continue
        values = value if isinstance(value, list) else [value]
        out = []
        for v in values:
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"eos_token_id in {str(path)!r} must be a token id (an int >= 0) or a list of them, "
                                 f"got {value!r}")
            if vocab_size is not None and v >= vocab_size:
                raise ValueError(f"eos_token_id {v} in {str(path)!r} is outside the model's vocabulary "
                                 f"(vocab_size = {vocab_size})")
            if v not in out:
                out.append(v)
        if out:
            return tuple(out)
    return None


def _read(path: Path) -> Any:
    try:
        with open(path, "r", encoding="utf-8") as fh:
            return json.load(fh)
    except (ValueError, RecursionError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ValueError(f"{str(path)!r} is not valid JSON: {e}") from None
    except OSError as e:
        raise ValueError(f"{str(path)!r} cannot be read: {e.strerror or e}") from None
