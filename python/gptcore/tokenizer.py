"""Text to token ids and back: a small wrapper over Hugging Face's ``tokenizers`` library.

A GPT-2 folder from the Hub holds its tokenizer either as ``tokenizer.json`` (the fast
tokenizer's full description) or as the byte-level BPE pair ``vocab.json`` + ``merges.txt``;
``Tokenizer.from_folder`` reads either. Llama 3's, Qwen2's and SmolLM2's folders hold
``tokenizer.json`` (byte-level BPE with added special tokens) and beside it
``tokenizer_config.json`` (the BOS and EOS tokens, the chat template),
``generation_config.json`` and ``config.json`` (the ids that end generation); ``from_folder``
reads those too. Ids are numpy ``int64`` arrays, as everywhere in gptcore. Nothing here
splits or merges text by hand: the Rust library does all of it.

Byte-level BPE cuts text into bytes before merging, so one character (``é`` is two UTF-8
bytes, most emoji four) may be spread over several tokens. ``Tokenizer.decode`` of a
prefix that ends inside a character gives a replacement character (``U+FFFD``); the streaming
decoder (``Tokenizer.stream``) holds such tokens back until the character is complete.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union

import numpy as np

from .chat_template import ChatTemplate
from .generation_config import eos_token_ids

__all__ = ["Tokenizer", "StreamDecoder", "TOKENIZER_FILES"]

#: What ``Tokenizer.from_folder`` looks for: the first entry, or both files of the second.
TOKENIZER_FILES = ("tokenizer.json", ("vocab.json", "merges.txt"))

_EOS_NAMES = ("<|endoftext|>", "</s>", "<eos>")
_REPLACEMENT = "\ufffd"


def _tokenizers():
    try:
        import tokenizers
    except ImportError:  # pragma: no cover - a core dependency, missing only in a broken install
        raise ImportError(
            "gptcore's text support needs Hugging Face's `tokenizers` package: pip install tokenizers"
        ) from None
    return tokenizers


# Tokenizer models that read text but do not give it back: WordPiece (BERT's) and WordLevel
# normalise and split it (case, accents, spaces around punctuation), so a generated token's
# text and a scored text's tokens would not be the text.
_UNSUPPORTED_KINDS = {
    "WordPiece": "an encoder's tokenizer (BERT's) whose decoding does not give the text back",
    "WordLevel": "a whole-word tokenizer whose decoding does not give the text back",
}


def _model_kind(path: Path) -> Optional[str]:
    """The ``model.type`` of a tokenizer.json (None when the file does not say or is not JSON:
    the library's parser then says what is wrong)."""
    import json

    try:
        with open(path, "r", encoding="utf-8") as fh:
            content = json.load(fh)
    except (OSError, ValueError, RecursionError):
        return None
    model = content.get("model") if isinstance(content, dict) else None
    kind = model.get("type") if isinstance(model, dict) else None
    return kind if isinstance(kind, str) else None


def missing_tokenizer_message(folder: Union[str, "os.PathLike[str]", None]) -> str:
    """The sentence used when a text call meets a model without a tokenizer."""
    where = f" in {str(folder)!r}" if folder is not None else ""
    return (f"no tokenizer{where}: text needs tokenizer.json, or vocab.json and merges.txt "
            "(the files of a Hugging Face GPT-2 folder)")


def _read_json(path: Path, fn: str) -> Any:
    try:
        with open(path, "r", encoding="utf-8") as fh:
            return json.load(fh)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise ValueError(f"{fn}: {str(path)!r} is not valid JSON: {e}") from None


def _token_text(value: Any, where: str, field: str) -> Optional[str]:
    """A special token as ``tokenizer_config.json`` writes it: a string, an AddedToken dict
    (``{"content": ...}``) or null."""
    if value is None:
        return None
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return value["content"]
    if isinstance(value, str):
        return value
    raise ValueError(f"{where}: {field} must be a token string, an object with 'content', or null; got {value!r}")


class Tokenizer:
    """Token ids for text and text for token ids.

    Build one with ``from_folder`` (a Hugging Face model folder), ``from_file``
    (a ``tokenizer.json``) or by wrapping a ``tokenizers.Tokenizer``. Padding and truncation
    settings stored in the file are switched off: gptcore wants every token of the text.

    ``special_tokens`` (``{"bos_token": ..., "eos_token": ..., ...}``, the strings a chat
    template sees), ``eos_ids`` (the ids that end generation; default: the first of
    ``<|endoftext|>``, ``</s>``, ``<eos>`` in the vocabulary) and ``chat_template`` come from
    a folder's ``tokenizer_config.json``, ``generation_config.json`` and ``config.json``
    when ``from_folder`` reads it.
    """

    def __init__(self, tokenizer: Any, *, source: Optional[str] = None,
                 special_tokens: Optional[Mapping[str, str]] = None, eos_ids: Optional[Iterable[int]] = None,
                 chat_template: Optional[ChatTemplate] = None) -> None:
        tk = _tokenizers()
        if not isinstance(tokenizer, tk.Tokenizer):
            raise TypeError(f"Tokenizer: expected a tokenizers.Tokenizer, got {type(tokenizer).__name__}")
        if chat_template is not None and not isinstance(chat_template, ChatTemplate):
            raise TypeError(f"Tokenizer: chat_template must be a ChatTemplate or None, got {type(chat_template).__name__}")
        tokenizer.no_padding()
        tokenizer.no_truncation()
        self._tk = tokenizer
        self._source = source
        # Ids need not be dense: the largest id (added tokens included) bounds them, not the count.
        all_ids = tokenizer.get_vocab(with_added_tokens=True).values()
        self._vocab_size = max(int(tokenizer.get_vocab_size(with_added_tokens=True)), max(all_ids, default=-1) + 1)
        self._special = {k: v for k, v in dict(special_tokens or {}).items() if v is not None}
        for k, v in self._special.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise TypeError(f"Tokenizer: special_tokens must map names to token strings, got {k!r}: {v!r}")
        if eos_ids is None:
            ids: List[int] = []
            eos_text = self._special.get("eos_token")
            if eos_text is not None and tokenizer.token_to_id(eos_text) is not None:
                ids.append(int(tokenizer.token_to_id(eos_text)))
            else:
                for name in _EOS_NAMES:
                    i = tokenizer.token_to_id(name)
                    if i is not None:
                        ids.append(int(i))
                        break
        else:
            ids = []
            for i in eos_ids:
                if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
                    raise TypeError(f"Tokenizer: eos_ids must be int token ids, got {i!r}")
                if not 0 <= int(i) < self._vocab_size:
                    raise ValueError(f"Tokenizer: eos id {int(i)} is out of range [0, {self._vocab_size})")
                if int(i) not in ids:
                    ids.append(int(i))
        self._eos_ids = tuple(ids)
        self._eos_id = ids[0] if ids else None
        bos_text = self._special.get("bos_token")
        bos = tokenizer.token_to_id(bos_text) if bos_text is not None else None
        self._bos_id = None if bos is None else int(bos)
        self._chat_template = chat_template

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_file(cls, path: Union[str, "os.PathLike[str]"]) -> "Tokenizer":
        """Read a ``tokenizer.json`` file."""
        p = Path(os.fspath(path))
        if not p.is_file():
            raise FileNotFoundError(f"Tokenizer.from_file: no such file: {str(p)!r}")
        kind = _model_kind(p)
        if kind in _UNSUPPORTED_KINDS:
            raise ValueError(f"Tokenizer.from_file: {str(p)!r} holds a {kind} tokenizer, "
                             f"{_UNSUPPORTED_KINDS[kind]}; gptcore's text functions read BPE and Unigram "
                             "tokenizers (GPT-2's byte-level BPE, Llama's, Mistral's, SentencePiece)")
        try:
            tok = _tokenizers().Tokenizer.from_file(str(p))
        except Exception as e:  # the Rust library raises a plain Exception for a malformed file
            what = f"a {kind} tokenizer that" if kind else "no tokenizer"
            raise ValueError(f"Tokenizer.from_file: {str(p)!r} is not a valid tokenizer.json: it holds {what} "
                             f"the installed tokenizers library ({_tokenizers().__version__}) can read ({e})") from None
        return cls(tok, source=str(p))

    @classmethod
    def from_folder(cls, path: Union[str, "os.PathLike[str]"]) -> "Tokenizer":
        """Read the tokenizer of a Hugging Face model folder: ``tokenizer.json`` when it is
        there, else the byte-level BPE pair ``vocab.json`` + ``merges.txt`` (GPT-2's
        pre-tokenizer and decoder, no prefix space; ``<|endoftext|>`` in the vocabulary is
        made a special token, as GPT-2's tokenizers do).

        Raises ``FileNotFoundError`` naming the missing files, ``ValueError`` for files that
        cannot be parsed.
        """
        try:
            p = Path(os.fspath(path))
        except TypeError:
            raise TypeError(f"Tokenizer.from_folder: path must be a str or os.PathLike, got {type(path).__name__}") from None
        if not p.is_dir():
            raise FileNotFoundError(f"Tokenizer.from_folder: no such folder: {str(p)!r}")
        if (p / "tokenizer.json").is_file():
            return cls._with_folder_settings(cls.from_file(p / "tokenizer.json"), p)
        vocab, merges = p / "vocab.json", p / "merges.txt"
        if vocab.is_file() and merges.is_file():
            return cls._with_folder_settings(cls._from_pair(vocab, merges), p)
        if vocab.is_file() or merges.is_file():
            missing = "merges.txt" if vocab.is_file() else "vocab.json"
            raise FileNotFoundError(
                f"Tokenizer.from_folder: {str(p)!r} has no tokenizer.json and only half of the "
                f"vocab.json + merges.txt pair: {missing} is missing")
        raise FileNotFoundError(f"Tokenizer.from_folder: {missing_tokenizer_message(p)}")

    @classmethod
    def _with_folder_settings(cls, tok: "Tokenizer", folder: Path) -> "Tokenizer":
        """``tok`` with the special tokens, chat template and end-of-generation ids of the
        folder's ``tokenizer_config.json`` (and ``chat_template.jinja``),
        ``generation_config.json`` and ``config.json``, where there are such files."""
        fn = "Tokenizer.from_folder"
        special: Dict[str, str] = {}
        tc_path = folder / "tokenizer_config.json"
        tc = _read_json(tc_path, fn) if tc_path.is_file() else {}
        if not isinstance(tc, dict):
            raise ValueError(f"{fn}: {str(tc_path)!r} must hold a JSON object, got a {type(tc).__name__}")
        for field in ("bos_token", "eos_token", "unk_token", "pad_token"):
            text = _token_text(tc.get(field), f"{fn}: {str(tc_path)!r}", field)
            if text is not None:
                if tok._tk.token_to_id(text) is None:
                    raise ValueError(f"{fn}: {field} {text!r} in {str(tc_path)!r} is not in the tokenizer's vocabulary")
                special[field] = text
        template = ChatTemplate.from_folder(folder)
        try:
            eos_ids = eos_token_ids(folder, tok.vocab_size)
        except ValueError as e:
            raise ValueError(f"{fn}: {e}") from None
        if not special and template is None and eos_ids is None:
            return tok
        return cls(tok._tk, source=tok._source, special_tokens=special, eos_ids=eos_ids, chat_template=template)

    @classmethod
    def _from_pair(cls, vocab: Path, merges: Path) -> "Tokenizer":
        tk = _tokenizers()
        try:
            model = tk.models.BPE.from_file(str(vocab), str(merges))
        except Exception as e:
            raise ValueError(f"Tokenizer.from_folder: cannot read {str(vocab)!r} and {str(merges)!r}: {e}") from None
        tok = tk.Tokenizer(model)
        tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = tk.decoders.ByteLevel()
        specials = [n for n in _EOS_NAMES if tok.token_to_id(n) is not None]
        if specials:
            tok.add_special_tokens(specials)
        return cls(tok, source=str(vocab.parent))

    # ------------------------------------------------------------------ properties
    @property
    def vocab_size(self) -> int:
        """Number of ids the tokenizer can produce (added tokens included)."""
        return self._vocab_size

    @property
    def source(self) -> Optional[str]:
        """The file or folder the tokenizer was read from, or ``None``."""
        return self._source

    @property
    def eos_id(self) -> Optional[int]:
        """The end-of-text token (``<|endoftext|>`` for GPT-2; the first of ``eos_ids``), or
        ``None``."""
        return self._eos_id

    @property
    def eos_ids(self) -> Tuple[int, ...]:
        """Every id that ends generation: a folder's ``generation_config.json`` (or
        ``config.json``) ``eos_token_id`` (Llama 3 Instruct lists ``<|end_of_text|>`` and
        ``<|eot_id|>``), else the ``eos_token`` of ``tokenizer_config.json``, else
        ``eos_id``."""
        return self._eos_ids

    @property
    def bos_id(self) -> Optional[int]:
        """The id of ``tokenizer_config.json``'s ``bos_token``, or ``None``. Whether
        ``encode(..., add_special_tokens=True)`` adds it is the tokenizer's post-processor's
        choice (Llama 3's adds it; Qwen2's, SmolLM2's and GPT-2's add nothing)."""
        return self._bos_id

    @property
    def special_tokens(self) -> Dict[str, str]:
        """The named special tokens (``bos_token``, ``eos_token``, ``unk_token``,
        ``pad_token``) a chat template sees."""
        return dict(self._special)

    @property
    def chat_template(self) -> Optional[ChatTemplate]:
        """The folder's chat template, or ``None``."""
        return self._chat_template

    def apply_chat_template(self, messages: Any, *, add_generation_prompt: bool = False,
                            template: Optional[str] = None, **kwargs: Any) -> str:
        """``messages`` rendered by the chat template as transformers renders them (see
        ``gptcore.chat_template.ChatTemplate.render``), with this tokenizer's special tokens."""
        if self._chat_template is None:
            where = f" in {self._source!r}" if self._source else ""
            raise ValueError(f"apply_chat_template: the tokenizer{where} has no chat template "
                             "(tokenizer_config.json's chat_template, or chat_template.jinja)")
        return self._chat_template.render(messages, add_generation_prompt=add_generation_prompt, template=template,
                                          special_tokens=self._special, **kwargs)

    @property
    def backend(self) -> Any:
        """The wrapped ``tokenizers.Tokenizer``."""
        return self._tk

    def __repr__(self) -> str:
        src = f", source={self._source!r}" if self._source else ""
        return f"Tokenizer(vocab_size={self._vocab_size}{src})"

    # ------------------------------------------------------------------ text <-> ids
    def leading_special_ids(self) -> np.ndarray:
        """The ids ``encode(text, add_special_tokens=True)`` puts in front of every text (Llama
        3's ``<|begin_of_text|>``), found by encoding a probe both ways; empty for most
        tokenizers (GPT-2's, Qwen2's, SmolLM2's)."""
        if not hasattr(self, "_lead"):
            probe = "Liberty"
            plain = self._tk.encode(probe, add_special_tokens=False).ids
            full = self._tk.encode(probe, add_special_tokens=True).ids
            k = next((i for i in range(len(full) - len(plain) + 1) if full[i:i + len(plain)] == plain), 0)
            self._lead = np.array(full[:k], dtype=np.int64)
        return self._lead.copy()

    def encode(self, text: str, *, add_special_tokens: bool = False) -> np.ndarray:
        """Token ids of ``text``, a 1-D ``int64`` array (empty for ``""``). Special tokens
        written in the text (``<|endoftext|>``) are recognised. With ``add_special_tokens``
        the tokenizer's post-processor adds what it adds (Llama 3's: ``<|begin_of_text|>`` in
        front), as a prompt is encoded for generation."""
        if not isinstance(text, str):
            raise TypeError(f"encode: text must be a str, got {type(text).__name__}")
        if not isinstance(add_special_tokens, bool):
            raise TypeError(f"encode: add_special_tokens must be a bool, got {add_special_tokens!r}")
        ids = self._tk.encode(text, add_special_tokens=add_special_tokens).ids
        return np.array(ids, dtype=np.int64)

    def decode(self, ids: Any) -> str:
        """Text of token ids (a 1-D sequence of ints). Bytes that do not form UTF-8 characters
        (a prefix cut inside a character) become ``U+FFFD``."""
        return self._tk.decode(self._id_list(ids, "decode"), skip_special_tokens=False)

    def _id_list(self, ids: Any, fn: str) -> List[int]:
        arr = np.asarray(ids)
        if arr.dtype == np.bool_ or (arr.size and arr.dtype.kind not in "iu"):
            raise TypeError(f"{fn}: ids must be integer token ids, got dtype {arr.dtype}")
        if arr.ndim != 1:
            raise ValueError(f"{fn}: ids must be a 1-D sequence of token ids, got shape {arr.shape}")
        if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= self._vocab_size):
            bad = int(arr.min()) if int(arr.min()) < 0 else int(arr.max())
            raise ValueError(f"{fn}: token id {bad} is out of range [0, {self._vocab_size})")
        return [int(i) for i in arr.tolist()]

    def stream(self) -> "StreamDecoder":
        """A fresh ``StreamDecoder`` for this tokenizer."""
        return StreamDecoder(self)


class StreamDecoder:
    """Decode ids one at a time without ever emitting part of a character.

    ``push(id)`` returns the new text that the id completes (often ``""`` while a character's
    bytes are still arriving); ``flush()`` returns what is held back at the end (a character
    left incomplete becomes ``U+FFFD``). The pieces joined equal ``tokenizer.decode`` of all
    the ids. Each call decodes only the ids since the last complete character plus the one
    before, so a long stream costs a constant amount per token.
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        if not isinstance(tokenizer, Tokenizer):
            raise TypeError(f"StreamDecoder: expected a gptcore Tokenizer, got {type(tokenizer).__name__}")
        self._tok = tokenizer
        self._ids: List[int] = []
        self._prefix = 0  # first id decoded each time (context for decoders that look back)
        self._read = 0    # ids before this one have been emitted

    def push(self, token: int) -> str:
        """Add one id; return the text it completes."""
        self._ids.extend(self._tok._id_list([token], "StreamDecoder.push"))
        return self._emit(final=False)

    def extend(self, tokens: Iterable[int]) -> str:
        """Add several ids; return the text they complete."""
        ids = list(tokens)
        if not ids:
            return ""
        self._ids.extend(self._tok._id_list(ids, "StreamDecoder.extend"))
        return self._emit(final=False)

    def flush(self) -> str:
        """Return whatever is held back (incomplete bytes become ``U+FFFD``) and reset."""
        out = self._emit(final=True)
        self._ids, self._prefix, self._read = [], 0, 0
        return out

    def _emit(self, final: bool) -> str:
        if self._read == len(self._ids):
            return ""
        dec = self._tok._tk.decode
        before = dec(self._ids[self._prefix:self._read], skip_special_tokens=False)
        text = dec(self._ids[self._prefix:], skip_special_tokens=False)
        if not final and (len(text) <= len(before) or text.endswith(_REPLACEMENT)):
            return ""  # a character still incomplete: wait for its remaining bytes
        new = text[len(before):]
        # keep the last emitted ids as context (decoders such as Metaspace treat the first
        # token of a decode differently), drop the rest
        del self._ids[: self._prefix]
        self._prefix, self._read = self._read - self._prefix, len(self._ids)
        return new
