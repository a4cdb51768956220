"""Models by their Hugging Face Hub name, offline first.

``gptcore.load("openai-community/gpt2")`` and ``gptcore generate HuggingFaceTB/SmolLM2-135M
...`` take a repository id where a folder is expected. ``resolve`` turns it into a folder:

1. A file or folder of that name on this machine always wins.
2. Otherwise, a name shaped like a repository id (``name`` or ``owner/name``) is looked up in
   the Hugging Face cache (``HF_HUB_CACHE``, by default ``~/.cache/huggingface/hub``, as
   ``huggingface_hub`` lays it out) without any network access: a model downloaded before,
   by gptcore, transformers or ``hf download``, loads with no network.
3. If it is not there (or lacks the weights or the configuration), it is downloaded with
   ``huggingface_hub.snapshot_download``, only the files gptcore reads (``PATTERNS``:
   safetensors weights, ``config.json``, ``generation_config.json`` and the tokenizer files;
   never pickles), unless downloads are off (``HF_HUB_OFFLINE=1``): then a
   ``FileNotFoundError`` says how to get it.

``huggingface_hub`` comes with ``tokenizers``; it is imported only when a name is not a local
path.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Optional, Tuple, Union

__all__ = ["PATTERNS", "looks_like_repo_id", "resolve"]

#: The files fetched from the Hub: the weights as safetensors, the configuration, the
#: generation settings and the tokenizer. Pickle checkpoints are never fetched.
PATTERNS = (
    "*.safetensors",
    "model.safetensors.index.json",
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "chat_template.jinja",
)

# Hugging Face's rule for a repository id: one or two parts of letters, digits, "-", "_" and
# "." (not starting or ending with "-" or ".", no "--" or ".."), at most 96 characters.
_PART = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9_])?"
_REPO_ID = re.compile(rf"{_PART}(?:/{_PART})?")


def looks_like_repo_id(name: str) -> bool:
    """Whether ``name`` has the shape of a Hub repository id (``gpt2``,
    ``HuggingFaceTB/SmolLM2-135M``); paths with more parts, or starting with ``.`` or ``/``,
    do not."""
    return bool(_REPO_ID.fullmatch(name)) and "--" not in name and ".." not in name


def _offline() -> bool:
    value = os.environ.get("HF_HUB_OFFLINE", "")
    return value.strip().upper() in ("1", "ON", "YES", "TRUE")


def _has_model(folder: Path) -> bool:
    return (folder / "model.safetensors").is_file() or (folder / "model.safetensors.index.json").is_file()


def _cache_dir() -> str:
    try:
        from huggingface_hub import constants

        return str(constants.HF_HUB_CACHE)
    except Exception:  # pragma: no cover - an old or broken huggingface_hub
        return os.environ.get("HF_HUB_CACHE", "~/.cache/huggingface/hub")


def _how_to_get(repo_id: str) -> str:
    files = " ".join(p for p in PATTERNS if "*" not in p)
    return (f"fetch it once on a machine with network access: `hf download {repo_id} --include "
            f"'*.safetensors' {files}` (older huggingface_hub: `huggingface-cli download`), or give the path "
            "of a folder that holds it")


def resolve(path: Union[str, "os.PathLike[str]"], *, fn: str = "load",
            download: bool = True) -> Tuple[Path, Optional[str]]:
    """The local path of ``path`` and the repository id it was found as (None for a local
    path); see the module. A name that is neither a local path nor shaped like a repository
    id comes back as it is (its loader says it does not exist). ``download=False`` looks in
    the cache only, as if ``HF_HUB_OFFLINE`` were set.

    Raises ``FileNotFoundError`` for a repository that is neither cached nor downloadable
    (offline, not on the Hub, no network), saying how to get it, and ``ImportError`` when
    ``huggingface_hub`` is missing.
    """
    p = Path(os.fspath(path))
    name = os.fspath(path)
    if p.exists() or not isinstance(name, str) or not looks_like_repo_id(name):
        return p, None
    try:
        import huggingface_hub
    except ImportError:  # pragma: no cover - installed with tokenizers
        raise ImportError(f"{fn}: {name!r} is not a local file or folder; to load it as a Hugging Face Hub "
                          "model, install huggingface_hub (pip install huggingface_hub)") from None
    patterns = list(PATTERNS)
    try:  # 2. the cache, no network
        cached: Any = huggingface_hub.snapshot_download(name, allow_patterns=patterns, local_files_only=True)
    except Exception:  # not cached (LocalEntryNotFoundError), or cached in part
        cached = None
    if cached is not None and _has_model(Path(cached)):
        return Path(cached), name
    if not download or _offline():
        where = "only in part" if cached is not None else "not"
        raise FileNotFoundError(
            f"{fn}: {name!r} is not a local file or folder, and the Hugging Face cache ({_cache_dir()}) holds it "
            f"{where}; {'downloads are off (HF_HUB_OFFLINE is set)' if download else 'nothing is downloaded here'}: "
            f"{_how_to_get(name)}")
    try:  # 3. download what gptcore reads
        folder = Path(huggingface_hub.snapshot_download(name, allow_patterns=patterns))
    except Exception as e:
        detail = str(e).splitlines()[0] if str(e) else repr(e)
        raise FileNotFoundError(
            f"{fn}: {name!r} is not a local file or folder, not in the Hugging Face cache ({_cache_dir()}), and "
            f"could not be downloaded from the Hub ({type(e).__name__}: {detail}); "
            f"check the name and the network, or {_how_to_get(name)}") from None
    if not _has_model(folder):
        raise FileNotFoundError(f"{fn}: the Hub repository {name!r} has no safetensors weights "
                                "(model.safetensors); gptcore reads no pickle checkpoints")
    return folder, name
