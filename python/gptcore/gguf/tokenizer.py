"""A tokenizer to and from GGUF metadata (``tokenizer.ggml.*``).

GGUF describes a tokenizer by its model (``tokenizer.ggml.model``), its pre-tokenizer
(``tokenizer.ggml.pre``), the token strings by id (``tokens``), each token's kind
(``token_type``: 1 normal, 3 control, 4 user-defined, 5 unused, ...), the BPE merges
(``merges``, ``"left right"`` strings in rank order) and the special ids
(``bos_token_id``, ``eos_token_id``, ``padding_token_id``, ...).

gptcore reads and writes byte-level BPE (model ``gpt2``) with four pre-tokenizers:

* ``gpt-2`` (also what a missing ``tokenizer.ggml.pre`` means): the ByteLevel pre-tokenizer
  with GPT-2's split pattern and no prefix space, BPE without ``ignore_merges`` (a GPT-2
  ``tokenizer.json``);
* ``llama-bpe`` (Llama 3's): a Split on Llama 3's pattern (digits in runs of up to three),
  then ByteLevel without its own pattern, BPE with ``ignore_merges`` (as llama.cpp and Llama
  3's ``tokenizer.json``);
* ``qwen2``: a Split on Qwen2's pattern (single digits), ByteLevel without its own pattern, the
  NFC normalizer, BPE without ``ignore_merges``;
* ``smollm`` (SmolLM2's): single digits split off, then ByteLevel with GPT-2's pattern;

each with the ByteLevel decoder, control tokens as special added tokens and user-defined tokens
as plain added tokens, so that it encodes and decodes as the original ``tokenizer.json`` does.
Other models (``llama``: SentencePiece, ``bert``: WordPiece, ``t5``, ...) and other
pre-tokenizers (``deepseek-llm``, ``starcoder``, ... whose split patterns differ) raise a
``ValueError`` naming them. A file whose model is ``none`` has no tokenizer.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np

from .format import Value, ValueType

__all__ = ["TOKEN_TYPES", "tokenizer_from_metadata", "tokenizer_metadata"]

#: llama.cpp's token types (``llama_token_type``).
TOKEN_TYPES = {"normal": 1, "unknown": 2, "control": 3, "user_defined": 4, "unused": 5, "byte": 6}

#: Llama 3's and Qwen2's split patterns (their tokenizer.json's Split pre-tokenizers).
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# The pre-tokenizers built here: GGUF's name -> (split pattern or None for ByteLevel's own,
# BPE ignore_merges, NFC normalizer).
_PRE = {
    "gpt-2": dict(pattern=None, ignore_merges=False, nfc=False),
    "llama-bpe": dict(pattern=LLAMA3_PATTERN, ignore_merges=True, nfc=False),
    "qwen2": dict(pattern=QWEN2_PATTERN, ignore_merges=False, nfc=True),
    "smollm": dict(pattern="digits", ignore_merges=False, nfc=False),
}
_NO_TOKENIZER = ("none", "no_vocab")
_MODEL_NAMES = {"llama": "SentencePiece", "bert": "WordPiece", "t5": "Unigram", "rwkv": "RWKV", "plamo2": "PLaMo-2"}


def _get(meta: Mapping[str, Any], key: str, where: str, kinds: Tuple[type, ...], required: bool = True) -> Any:
    if key not in meta:
        if required:
            raise ValueError(f"{where}: the tokenizer metadata has no {key!r}")
        return None
    v = meta[key]
    if not isinstance(v, kinds):
        raise ValueError(f"{where}: {key!r} has the wrong type ({type(v).__name__})")
    return v


def _token_id(meta: Mapping[str, Any], key: str, where: str, n: int) -> Optional[int]:
    v = meta.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{where}: {key!r} must be an integer token id, got {v!r}")
    if not 0 <= v < n:
        raise ValueError(f"{where}: {key!r} = {v} is not a token id (the vocabulary has {n} tokens)")
    return v


def tokenizer_from_metadata(metadata: Mapping[str, Any], where: str = "GGUF metadata") -> Optional[Any]:
    """The ``gptcore.Tokenizer`` the metadata describes (plain values, as
    ``GGUFReader.metadata`` gives them), or None when the file has none (no
    ``tokenizer.ggml.model``, or ``none``). ``where`` (the file) prefixes error messages.

    Raises ``ValueError`` naming the tokenizer model or pre-tokenizer gptcore cannot build, or
    what is wrong with the metadata.
    """
    from ..tokenizer import Tokenizer, _tokenizers

    model = metadata.get("tokenizer.ggml.model")
    if model is None or model in _NO_TOKENIZER:
        return None
    if model != "gpt2":
        kind = f" ({_MODEL_NAMES[model]})" if isinstance(model, str) and model in _MODEL_NAMES else ""
        raise ValueError(f"{where}: tokenizer model {model!r}{kind} is not supported; gptcore builds byte-level "
                         "BPE tokenizers (model 'gpt2') from GGUF metadata")
    pre = metadata.get("tokenizer.ggml.pre", "gpt-2")
    if pre not in _PRE:
        raise ValueError(f"{where}: pre-tokenizer {pre!r} is not supported; gptcore builds byte-level BPE with "
                         f"the pre-tokenizers {', '.join(repr(p) for p in _PRE)}")
    tokens = _get(metadata, "tokenizer.ggml.tokens", where, (list,))
    if not all(isinstance(t, str) for t in tokens):
        raise ValueError(f"{where}: 'tokenizer.ggml.tokens' must be an array of strings")
    n = len(tokens)
    merges = _get(metadata, "tokenizer.ggml.merges", where, (list,))
    if not all(isinstance(m, str) for m in merges):
        raise ValueError(f"{where}: 'tokenizer.ggml.merges' must be an array of strings")
    types = _get(metadata, "tokenizer.ggml.token_type", where, (np.ndarray,), required=False)
    if types is None:
        types = np.full(n, TOKEN_TYPES["normal"], dtype=np.int64)
    elif types.dtype.kind not in "iu" or types.shape != (n,):
        raise ValueError(f"{where}: 'tokenizer.ggml.token_type' must hold one integer per token ({n}), "
                         f"got {types.dtype} of shape {types.shape}")

    vocab: Dict[str, int] = {}
    for i, t in enumerate(tokens):
        if t in vocab:
            raise ValueError(f"{where}: token {t!r} appears twice in 'tokenizer.ggml.tokens' (ids {vocab[t]} and {i})")
        vocab[t] = i
    pairs: List[Tuple[str, str]] = []
    for r, m in enumerate(merges):
        cut = m.find(" ", 1)  # llama.cpp splits at the first space after the first character
        if cut < 0:
            raise ValueError(f"{where}: merge {r} ({m!r}) is not two tokens separated by a space")
        a, b = m[:cut], m[cut + 1:]
        for part in (a, b, a + b):
            if part not in vocab:
                raise ValueError(f"{where}: merge {r} ({m!r}) uses {part!r}, which is not a token")
        pairs.append((a, b))

    tk = _tokenizers()
    try:
        bpe = tk.models.BPE(vocab, pairs, ignore_merges=_PRE[pre]["ignore_merges"])
    except Exception as e:  # the Rust library raises plain Exceptions
        raise ValueError(f"{where}: the tokenizer metadata does not make a BPE model: {e}") from None
    tok = tk.Tokenizer(bpe)
    spec = _PRE[pre]
    if spec["pattern"] is None:
        tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    elif spec["pattern"] == "digits":
        tok.pre_tokenizer = tk.pre_tokenizers.Sequence([
            tk.pre_tokenizers.Digits(individual_digits=True),
            tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    else:
        tok.pre_tokenizer = tk.pre_tokenizers.Sequence([
            tk.pre_tokenizers.Split(tk.Regex(spec["pattern"]), behavior="isolated", invert=False),
            tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    if spec["nfc"]:
        tok.normalizer = tk.normalizers.NFC()
    tok.decoder = tk.decoders.ByteLevel()
    special = [tk.AddedToken(tokens[i], special=True, normalized=False)
               for i in np.flatnonzero(types == TOKEN_TYPES["control"])]
    plain = [tk.AddedToken(tokens[i], special=False, normalized=False)
             for i in np.flatnonzero(types == TOKEN_TYPES["user_defined"])]
    if special:
        tok.add_special_tokens(special)
    if plain:
        tok.add_tokens(plain)
    out = Tokenizer(tok, source=where)
    eos = _token_id(metadata, "tokenizer.ggml.eos_token_id", where, n)
    if eos is not None:
        out._eos_id = eos
    return out


def _pre_name(pre: Mapping[str, Any]) -> Optional[str]:
    """The GGUF pre-tokenizer name of a ``tokenizer.json``'s pre-tokenizer, or None."""
    if pre.get("type") == "ByteLevel":
        ok = pre.get("use_regex", True) and not pre.get("add_prefix_space")
        return "gpt-2" if ok else None
    parts = pre.get("pretokenizers") if pre.get("type") == "Sequence" else None
    if not parts or len(parts) != 2:
        return None
    split, byte_level = parts
    if (split.get("type") == "Digits" and split.get("individual_digits") and byte_level.get("type") == "ByteLevel"
            and byte_level.get("use_regex", True) and not byte_level.get("add_prefix_space")):
        return "smollm"
    if (split.get("type") != "Split" or split.get("behavior") != "Isolated" or split.get("invert")
            or byte_level.get("type") != "ByteLevel" or byte_level.get("use_regex", True)
            or byte_level.get("add_prefix_space")):
        return None
    pattern = (split.get("pattern") or {}).get("Regex")
    return {LLAMA3_PATTERN: "llama-bpe", QWEN2_PATTERN: "qwen2"}.get(pattern)


def tokenizer_metadata(tokenizer: Any, vocab_size: int) -> Dict[str, Value]:
    """The ``tokenizer.ggml.*`` metadata of a ``gptcore.Tokenizer`` for a model of
    ``vocab_size`` ids: ``tokens`` has exactly ``vocab_size`` entries (llama.cpp sizes the
    vocabulary from it), ids the tokenizer lacks are ``[PAD<id>]`` tokens of type unused, as
    llama.cpp's converter writes them. ``bos_token_id`` and ``eos_token_id`` are the
    tokenizer's end-of-text token (GPT-2 uses one token for both) and ``add_bos_token`` is
    false (gptcore adds no tokens to a text).

    Raises ``ValueError`` naming what GGUF cannot describe: a tokenizer other than byte-level
    BPE with one of the three pre-tokenizers (see the module documentation), another
    normalizer, added tokens that strip spaces or match single words, a vocabulary larger than
    ``vocab_size``.
    """
    from ..tokenizer import Tokenizer

    if not isinstance(tokenizer, Tokenizer):
        raise TypeError(f"tokenizer must be a gptcore Tokenizer, got {type(tokenizer).__name__}")

    def refuse(what: str) -> ValueError:
        return ValueError(f"GGUF metadata cannot describe this tokenizer: {what}; gptcore writes byte-level BPE "
                          "tokenizers with GPT-2's, Llama 3's, Qwen2's or SmolLM's pre-tokenizer")

    d = json.loads(tokenizer.backend.to_str())
    model = d.get("model") or {}
    if model.get("type") != "BPE":
        raise refuse(f"its model is {model.get('type')!r}, not BPE")
    for key, ok in (("dropout", None), ("continuing_subword_prefix", None), ("end_of_word_suffix", None)):
        if model.get(key) not in (ok, ""):
            raise refuse(f"its BPE model sets {key} = {model.get(key)!r}")
    if model.get("byte_fallback"):
        raise refuse("its BPE model sets byte_fallback")
    pre_name = _pre_name(d.get("pre_tokenizer") or {})
    if pre_name is None:
        raise refuse(f"its pre-tokenizer is {json.dumps(d.get('pre_tokenizer'))}, not ByteLevel with GPT-2's "
                     "pattern, nor a Split on Llama 3's or Qwen2's pattern (or SmolLM's digits) and ByteLevel, "
                     "without prefix space")
    normalizer = d.get("normalizer")
    if normalizer is not None and not (pre_name == "qwen2" and normalizer.get("type") == "NFC"):
        raise refuse(f"it has a normalizer ({normalizer.get('type')})")
    if pre_name == "qwen2" and normalizer is None:
        raise refuse("Qwen2's pre-tokenizer without its NFC normalizer")
    if bool(model.get("ignore_merges")) != _PRE[pre_name]["ignore_merges"] and pre_name != "llama-bpe":
        raise refuse(f"its BPE model sets ignore_merges = {model.get('ignore_merges')!r}")

    vocab = tokenizer.backend.get_vocab(with_added_tokens=True)
    if vocab and max(vocab.values()) >= vocab_size:
        raise ValueError(f"the tokenizer's ids reach {max(vocab.values())}, beyond the model's vocab_size = {vocab_size}")
    tokens: List[Optional[str]] = [None] * vocab_size
    for t, i in vocab.items():
        tokens[i] = t
    types = np.full(vocab_size, TOKEN_TYPES["normal"], dtype=np.int32)
    for i, t in enumerate(tokens):
        if t is None:
            tokens[i] = f"[PAD{i}]"
            types[i] = TOKEN_TYPES["unused"]
    for a in d.get("added_tokens") or []:
        if a.get("lstrip") or a.get("rstrip") or a.get("single_word"):
            raise refuse(f"added token {a.get('content')!r} sets lstrip, rstrip or single_word")
        types[a["id"]] = TOKEN_TYPES["control"] if a.get("special") else TOKEN_TYPES["user_defined"]
    merges = []
    for m in model.get("merges") or []:
        a, b = (m.split(" ", 1) if isinstance(m, str) else m)
        if " " in a or " " in b or not a:
            raise refuse(f"the merge {m!r} holds a token with a space")
        merges.append(f"{a} {b}")

    meta: Dict[str, Value] = {
        "tokenizer.ggml.model": Value(ValueType.STRING, "gpt2"),
        "tokenizer.ggml.pre": Value(ValueType.STRING, pre_name),
        "tokenizer.ggml.tokens": Value(ValueType.ARRAY, tokens, ValueType.STRING),
        "tokenizer.ggml.token_type": Value(ValueType.ARRAY, types, ValueType.INT32),
        "tokenizer.ggml.merges": Value(ValueType.ARRAY, merges, ValueType.STRING),
    }
    if tokenizer.eos_id is not None:
        meta["tokenizer.ggml.bos_token_id"] = Value(ValueType.UINT32, tokenizer.eos_id)
        meta["tokenizer.ggml.eos_token_id"] = Value(ValueType.UINT32, tokenizer.eos_id)
    meta["tokenizer.ggml.add_bos_token"] = Value(ValueType.BOOL, False)
    return meta
