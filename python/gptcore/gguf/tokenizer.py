"""A tokenizer to and from GGUF metadata (``tokenizer.ggml.*``).

GGUF describes a tokenizer by its model (``tokenizer.ggml.model``), its pre-tokenizer
(``tokenizer.ggml.pre``), the token strings by id (``tokens``), each token's kind
(``token_type``: 1 normal, 3 control, 4 user-defined, 5 unused, ...), the BPE merges
(``merges``, ``"left right"`` strings in rank order) and the special ids
(``bos_token_id``, ``eos_token_id``, ``padding_token_id``, ...).

gptcore reads and writes byte-level BPE (model ``gpt2``) with GPT-2's pre-tokenizer
(``gpt-2``, also what a missing ``tokenizer.ggml.pre`` means): the Hugging Face ``tokenizers``
object built here is the one a GPT-2 ``tokenizer.json`` describes (ByteLevel pre-tokenizer
with GPT-2's split pattern and no prefix space, BPE without ``ignore_merges``, ByteLevel
decoder), with control tokens as special added tokens and user-defined tokens as plain added
tokens, so it encodes and decodes as the original does. Other models (``llama``:
SentencePiece, ``bert``: WordPiece, ``t5``, ...) and other pre-tokenizers (``llama-bpe``,
``qwen2``, ... whose split patterns differ) raise a ``ValueError`` naming them. A file whose
model is ``none`` has no tokenizer.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np

from .format import Value, ValueType

__all__ = ["TOKEN_TYPES", "tokenizer_from_metadata", "tokenizer_metadata"]

#: llama.cpp's token types (``llama_token_type``).
TOKEN_TYPES = {"normal": 1, "unknown": 2, "control": 3, "user_defined": 4, "unused": 5, "byte": 6}

# The pre-tokenizers built here: GGUF's name -> (ByteLevel use_regex, BPE ignore_merges).
_PRE = {"gpt-2": dict(ignore_merges=False)}
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
                         f"GPT-2's pre-tokenizer ({', '.join(repr(p) for p in _PRE)})")
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
    tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
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


def tokenizer_metadata(tokenizer: Any, vocab_size: int) -> Dict[str, Value]:
    """The ``tokenizer.ggml.*`` metadata of a ``gptcore.Tokenizer`` for a model of
    ``vocab_size`` ids: ``tokens`` has exactly ``vocab_size`` entries (llama.cpp sizes the
    vocabulary from it), ids the tokenizer lacks are ``[PAD<id>]`` tokens of type unused, as
    llama.cpp's converter writes them. ``bos_token_id`` and ``eos_token_id`` are the
    tokenizer's end-of-text token (GPT-2 uses one token for both) and ``add_bos_token`` is
    false (gptcore adds no tokens to a text).

    Raises ``ValueError`` naming what GGUF cannot describe: a tokenizer other than byte-level
    BPE with GPT-2's pre-tokenizer, a normalizer, added tokens that strip spaces or match
    single words, a vocabulary larger than ``vocab_size``.
    """
    from ..tokenizer import Tokenizer

    if not isinstance(tokenizer, Tokenizer):
        raise TypeError(f"tokenizer must be a gptcore Tokenizer, got {type(tokenizer).__name__}")

    def refuse(what: str) -> ValueError:
        return ValueError(f"GGUF metadata cannot describe this tokenizer: {what}; gptcore writes byte-level BPE "
                          "tokenizers with GPT-2's pre-tokenizer (a GPT-2 tokenizer.json)")

    d = json.loads(tokenizer.backend.to_str())
    model = d.get("model") or {}
    if model.get("type") != "BPE":
        raise refuse(f"its model is {model.get('type')!r}, not BPE")
    for key, ok in (("dropout", None), ("continuing_subword_prefix", None), ("end_of_word_suffix", None)):
        if model.get(key) not in (ok, ""):
            raise refuse(f"its BPE model sets {key} = {model.get(key)!r}")
    if model.get("byte_fallback") or model.get("ignore_merges"):
        raise refuse("its BPE model sets byte_fallback or ignore_merges")
    if d.get("normalizer") is not None:
        raise refuse(f"it has a normalizer ({d['normalizer'].get('type')})")
    pre = d.get("pre_tokenizer") or {}
    if pre.get("type") != "ByteLevel" or not pre.get("use_regex", True) or pre.get("add_prefix_space"):
        raise refuse(f"its pre-tokenizer is {json.dumps(pre)}, not ByteLevel with GPT-2's pattern and no prefix space")

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
        "tokenizer.ggml.pre": Value(ValueType.STRING, "gpt-2"),
        "tokenizer.ggml.tokens": Value(ValueType.ARRAY, tokens, ValueType.STRING),
        "tokenizer.ggml.token_type": Value(ValueType.ARRAY, types, ValueType.INT32),
        "tokenizer.ggml.merges": Value(ValueType.ARRAY, merges, ValueType.STRING),
    }
    if tokenizer.eos_id is not None:
        meta["tokenizer.ggml.bos_token_id"] = Value(ValueType.UINT32, tokenizer.eos_id)
        meta["tokenizer.ggml.eos_token_id"] = Value(ValueType.UINT32, tokenizer.eos_id)
    meta["tokenizer.ggml.add_bos_token"] = Value(ValueType.BOOL, False)
    return meta
