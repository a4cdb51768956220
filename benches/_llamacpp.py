"""The llama.cpp baseline: the bench's random GPT-2 weights written as a GGUF file (architecture
``gpt2``, F32 or F16) with the ``gguf`` package, and greedy decoding of it in-process through
llama-cpp-python.

Layout (what llama.cpp's GPT-2 converter writes and its ``gpt2`` loader reads): GPT-2's Conv1D
weights are stored (in, out); ggml wants each matrix as (out, in) rows, so ``c_attn``,
``attn.c_proj``, ``c_fc`` and ``mlp.c_proj`` are transposed. A numpy array of shape (rows,
cols) becomes a ggml tensor with ne = [cols, rows], which is the shape the loader asks for
(``attn_qkv`` {n_embd, 3 n_embd}, ``ffn_up`` {n_embd, n_ff}, ``ffn_down`` {n_ff, n_embd}).
The tied LM head is not written: the loader falls back to ``token_embd`` (as for a converted
GPT-2). In the F16 file every matrix is float16 except ``position_embd``; 1-D tensors stay
float32 (the converter's rules for ``--outtype f16``).

llama.cpp refuses a file without a tokenizer. No real GPT-2 vocabulary can be had here, and the
bench feeds token ids, so the file carries a synthetic byte-level BPE vocabulary of the same
size: the 256 byte symbols (GPT-2's byte-to-unicode map), one merge per further token joining
two byte symbols, and ``<|endoftext|>`` as the last (control) token. It is consistent (every
merge's result is a token) but unrelated to GPT-2's real merges: text through it is
meaningless, token ids are all that matter.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

import numpy as np

Weights = dict[str, np.ndarray]

#: ggml type ids for the KV cache (llama.h's ggml_type): F32 = 0, F16 = 1.
GGML_TYPE_F32 = 0


def import_llama_cpp():
    """(llama_cpp, gguf) modules, or (None, reason)."""
    try:
        import gguf
        import llama_cpp
    except (ImportError, OSError, RuntimeError) as exc:  # not installed, or its library fails to load
        return None, f"{type(exc).__name__}: {exc}".splitlines()[0]
    return (llama_cpp, gguf), None


def byte_symbols() -> list[str]:
    """GPT-2's reversible byte -> printable character map, as the 256 symbols of bytes 0..255
    (printable ASCII and Latin-1 stand for themselves; the rest, spaces and control characters
    included, map to characters from U+0100 on)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    chars = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def byte_level_vocab(n_vocab: int) -> tuple[list[str], list[int], list[str]]:
    """(tokens, token types, merges) of a synthetic byte-level BPE vocabulary of ``n_vocab``
    tokens: 256 byte symbols, ``n_vocab - 257`` merges of two byte symbols, and a final
    ``<|endoftext|>`` control token."""
    if n_vocab < 257 or n_vocab - 257 > 256 * 256:
        raise ValueError(f"n_vocab: expected 257..{257 + 256 * 256}, got {n_vocab}")
    symbols = byte_symbols()
    tokens = list(symbols)
    merges = []
    for a, b in itertools.islice(itertools.product(symbols, repeat=2), n_vocab - 257):
        merges.append(f"{a} {b}")
        tokens.append(a + b)
    tokens.append("<|endoftext|>")
    normal, control = 1, 3  # gguf.TokenType.NORMAL, CONTROL
    types = [normal] * (n_vocab - 1) + [control]
    assert len(tokens) == n_vocab and len(set(tokens)) == n_vocab
    return tokens, types, merges


def gguf_tensors(weights: Weights, config, ftype: str) -> list[tuple[str, np.ndarray]]:
    """(GGUF name, C-contiguous array) pairs for a GPT-2 weight dict in gptcore's naming
    (``wte.weight``, ``h.N.attn.c_attn.weight`` stored (in, out), ...). ``ftype`` 'F32' or
    'F16'."""
    if ftype not in ("F32", "F16"):
        raise ValueError(f"ftype: expected 'F32' or 'F16', got {ftype!r}")
    if config.pos != "learned" or not config.bias or not config.ln_affine:
        raise ValueError("gguf_tensors: only GPT-2 style configs (learned positions, biases, affine LN)")
    half = ftype == "F16"

    def mat(a, transpose=False, keep_f32=False):
        a = np.asarray(a, np.float32)
        if transpose:
            a = a.T
        return np.ascontiguousarray(a, np.float32 if keep_f32 or not half else np.float16)

    def vec(a):
        return np.ascontiguousarray(a, np.float32)

    out = [("token_embd.weight", mat(weights["wte.weight"])),
           ("position_embd.weight", mat(weights["wpe.weight"], keep_f32=True))]
    for i in range(config.n_layers):
        p, q = f"h.{i}.", f"blk.{i}."
        out += [
            (q + "attn_norm.weight", vec(weights[p + "ln_1.weight"])),
            (q + "attn_norm.bias", vec(weights[p + "ln_1.bias"])),
            (q + "attn_qkv.weight", mat(weights[p + "attn.c_attn.weight"], transpose=True)),
            (q + "attn_qkv.bias", vec(weights[p + "attn.c_attn.bias"])),
            (q + "attn_output.weight", mat(weights[p + "attn.c_proj.weight"], transpose=True)),
            (q + "attn_output.bias", vec(weights[p + "attn.c_proj.bias"])),
            (q + "ffn_norm.weight", vec(weights[p + "ln_2.weight"])),
            (q + "ffn_norm.bias", vec(weights[p + "ln_2.bias"])),
            (q + "ffn_up.weight", mat(weights[p + "mlp.c_fc.weight"], transpose=True)),
            (q + "ffn_up.bias", vec(weights[p + "mlp.c_fc.bias"])),
            (q + "ffn_down.weight", mat(weights[p + "mlp.c_proj.weight"], transpose=True)),
            (q + "ffn_down.bias", vec(weights[p + "mlp.c_proj.bias"])),
        ]
    out += [("output_norm.weight", vec(weights["ln_f.weight"])),
            ("output_norm.bias", vec(weights["ln_f.bias"]))]
    if not config.tied:
        # an untied head: gptcore's lm_head.weight is (vocab, d), already (out, in)
        out.append(("output.weight", mat(weights["lm_head.weight"])))
    return out


def write_gguf(gguf, path, weights: Weights, config, ftype: str) -> Path:
    """Write ``weights`` (GPT-2, gptcore naming) to ``path`` as a llama.cpp ``gpt2`` GGUF in
    ``ftype`` ('F32' or 'F16'). Returns the path."""
    path = Path(path)
    tensors = gguf_tensors(weights, config, ftype)
    tokens, types, merges = byte_level_vocab(config.vocab_size)
    w = gguf.GGUFWriter(str(path), "gpt2")
    w.add_name(f"random GPT-2 ({config.n_layers} layers, d {config.d_model}) from gptcore's bench")
    w.add_context_length(config.n_ctx)
    w.add_embedding_length(config.d_model)
    w.add_feed_forward_length(config.d_ff)
    w.add_block_count(config.n_layers)
    w.add_head_count(config.n_heads)
    w.add_layer_norm_eps(float(config.ln_eps))
    w.add_file_type(0 if ftype == "F32" else 1)  # LlamaFileType ALL_F32 / MOSTLY_F16
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(config.vocab_size - 1)
    w.add_eos_token_id(config.vocab_size - 1)
    w.add_add_bos_token(False)
    for name, arr in tensors:
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


class LlamaCppGreedy:
    """A GGUF model loaded in llama-cpp-python, decoding one sequence greedily from token ids:
    the prompt in one ``eval`` (one batch), then per new token the argmax of the last logits
    and an ``eval`` of that token. The KV cache is float32 (``type_k``/``type_v`` F32) unless
    ``kv_f32`` is False (llama.cpp's default F16 cache). The weights are read into the
    process's memory (``use_mmap=False``), as gptcore and torch hold theirs, rather than
    served from the page cache of the file."""

    def __init__(self, llama_cpp, path, threads: int, n_ctx: int = 256, kv_f32: bool = True):
        self.llama_cpp = llama_cpp
        kv = {"type_k": GGML_TYPE_F32, "type_v": GGML_TYPE_F32} if kv_f32 else {}
        self.llm = llama_cpp.Llama(model_path=str(path), n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx,
                                   n_threads=threads, n_threads_batch=threads, logits_all=False,
                                   use_mmap=False, verbose=False, **kv)
        self.n_vocab = int(self.llm.n_vocab())
        self.threads = threads

    def set_threads(self, n: int) -> None:
        if n != self.threads:
            self.llama_cpp.llama_set_n_threads(self.llm.ctx, n, n)
            self.threads = n

    def last_logits(self) -> np.ndarray:
        """A copy of the logits of the last evaluated token."""
        ptr = self.llama_cpp.llama_get_logits_ith(self.llm.ctx, -1)
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).copy()

    def prompt_logits(self, ids: Sequence[int]) -> np.ndarray:
        """Logits after the prompt (the first new token's distribution)."""
        self.llm.reset()
        self.llm.eval([int(t) for t in ids])
        return self.last_logits()

    def start(self, ids: Sequence[int]) -> int:
        """A fresh prompt in one ``eval``; its greedy next token (a decode runner, as
        ``_common.decode_fn`` drives one)."""
        self.llm.reset()
        self.llm.eval([int(t) for t in ids])
        return self._argmax()

    def step(self, tok: int) -> int:
        """One cached step: an ``eval`` of ``tok``; the greedy next token."""
        self.llm.eval([int(tok)])
        return self._argmax()

    def _argmax(self) -> int:
        ptr = self.llama_cpp.llama_get_logits_ith(self.llm.ctx, -1)
        return int(np.argmax(np.ctypeslib.as_array(ptr, shape=(self.n_vocab,))))

    def generate(self, ids: Sequence[int], new: int) -> np.ndarray:
        """``new`` greedy token ids after the prompt ``ids``."""
        llm, ctx, get = self.llm, self.llm.ctx, self.llama_cpp.llama_get_logits_ith
        llm.reset()
        llm.eval([int(t) for t in ids])
        out = np.empty(new, np.int64)
        for i in range(new):
            tok = int(np.argmax(np.ctypeslib.as_array(get(ctx, -1), shape=(self.n_vocab,))))
            out[i] = tok
            if i + 1 < new:
                llm.eval([tok])
        return out

    def close(self) -> None:
        llm, self.llm = self.llm, None
        if llm is not None:
            llm.close()


def version(llama_cpp, gguf) -> str:
    return f"llama-cpp-python {getattr(llama_cpp, '__version__', '?')}, gguf {_dist_version('gguf')}"


def _dist_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as v
    try:
        return v(name)
    except PackageNotFoundError:
        return "?"
