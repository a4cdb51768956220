"""Llama-family speed: SmolLM2-135M's and Qwen2.5-0.5B's shapes with random weights, against
transformers (float32 and bfloat16) and llama.cpp (llama-cpp-python, the same weights as
GGUF ``llama`` files in F32, F16 and BF16), on one thread count (default 2).

Measured, alternating the implementations inside one process (medians of the rounds):

- prefill 1 x 256: the logits of the next token after a 256-token prompt (gptcore:
  ``forward(ids, logits="last")``; transformers: ``model(ids, logits_to_keep=1)``; llama.cpp:
  one ``eval`` of the 256 tokens);
- decode B = 1: seconds per token of single-token steps after a 16-token prompt, cached
  (gptcore ``step``; transformers with its K/V cache; llama.cpp ``eval`` of one token),
  and its share of the bandwidth bound ``read bandwidth / bytes of weights read per token``
  (every weight matrix and the head once; measured bandwidth, or ``--bandwidth``);
- K/V cache bytes per token of gptcore's cache, beside GPT-2 small's.

Widths are compared like with like: gptcore float32 with llama.cpp F32 and transformers
float32; gptcore with bfloat16 storage (float32 arithmetic) with llama.cpp BF16 and
transformers bfloat16; gptcore with float16 storage with llama.cpp F16. Before any timing,
each baseline's logits after a prompt are compared with gptcore's of the same width (the
table's notes give the largest difference relative to the largest logit; llama.cpp's F16/BF16
matrix products round the activations to the weights' format, so those differ more).

llama.cpp's ``llama`` architecture rotates adjacent pairs of a head, where Hugging Face's
layout (gptcore's) rotates value i with value i + d_head/2; its converter permutes the rows of
q_proj and k_proj (and of their biases) to turn one into the other, and so does this script.

Run (the baselines need torch, transformers, llama-cpp-python and gguf; each missing one is
skipped with a note):

    python3 benches/bench_llama.py [--models smollm2-135m,qwen2.5-0.5b] [--threads 2]
"""

from __future__ import annotations

import argparse
import gc
import itertools
import tempfile
import time
from pathlib import Path

from _common import (
    SETTLE_THREADED,
    GptcoreRunner,
    time_decode,
    add_machine_args,
    bandwidth,
    closing_line,
    compare,
    environment_report,
    fmt,
    gptcore,
    hf_cache_keyword,
    hf_returned_cache,
    markdown_table,
    np,
    parse_str_list,
    set_threads,
    setup_machine,
    torch_baseline,
)
from _llamacpp import byte_symbols, import_llama_cpp
from _llamacpp import version as llama_cpp_version

from gptcore.accounting import param_count

PREFILL = 256
PROMPT = 16
STEPS = 32
LLAMA_FTYPE = {"F32": 0, "F16": 1, "BF16": 32}  # llama.h's LLAMA_FTYPE_ALL_F32 / MOSTLY_F16 / MOSTLY_BF16


# ---------------------------------------------------------------------------------------------
# weights


def random_weights(config, seed: int = 0):
    """float32 weights (gptcore.init_weights, scheme 'lesson': fan-in scales, so that the
    logits spread), with the norm weights and biases perturbed so that they count."""
    w = gptcore.init_weights(config, seed, "lesson", dtype="float32")
    rng = np.random.default_rng(seed + 1)
    for k, v in w.items():
        if v.ndim == 1:
            w[k] = (v + rng.standard_normal(v.shape, dtype=np.float32) * np.float32(0.1)).astype(np.float32)
    return w


def weight_bytes_per_token(config, itemsize: int) -> int:
    """Bytes a decode step reads: every projection matrix and the head once (the embedding row
    of the new token is negligible)."""
    p = param_count(config)
    return (p.blocks + config.d_model * config.vocab_size) * itemsize


# ---------------------------------------------------------------------------------------------
# transformers


def hf_llama(weights, config, torch, transformers, dtype):
    """A transformers LlamaForCausalLM (Qwen2ForCausalLM when only q/k/v have biases) holding
    ``weights`` in ``dtype`` (torch.float32 or torch.bfloat16)."""
    qwen2 = config.attn_bias and not config.attn_out_bias
    common = dict(vocab_size=config.vocab_size, hidden_size=config.d_model, intermediate_size=config.d_ff,
                  num_hidden_layers=config.n_layers, num_attention_heads=config.n_heads,
                  num_key_value_heads=config.n_kv_heads, max_position_embeddings=config.n_ctx,
                  rms_norm_eps=config.ln_eps, rope_theta=config.rope_theta, tie_word_embeddings=config.tied,
                  hidden_act="silu", attention_dropout=0.0)
    if qwen2:
        cfg, cls = transformers.Qwen2Config(**common, use_sliding_window=False), transformers.Qwen2ForCausalLM
    else:
        cfg = transformers.LlamaConfig(**common, head_dim=config.head_dim, attention_bias=config.attn_bias,
                                       mlp_bias=config.bias)
        cls = transformers.LlamaForCausalLM
    cfg._attn_implementation = "sdpa"
    with torch.device("meta"):
        model = cls(cfg)
    state = {k: torch.from_numpy(v).to(dtype) for k, v in weights.items()}
    missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
    model.tie_weights()
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise RuntimeError(f"hf_llama: missing {missing}, unexpected {unexpected}")
    # The rotary frequencies are a buffer built at construction: rebuild them off the meta device.
    for m in model.modules():
        if type(m).__name__.endswith("RotaryEmbedding"):
            inv, scale = (m.compute_default_rope_parameters(cfg) if m.rope_type == "default" else (None, None))
            m.inv_freq = inv
            m.original_inv_freq = inv.clone()
            m.attention_scaling = scale
    return model.eval()


class TorchRunner:
    def __init__(self, model, torch):
        self.model, self.torch = model, torch
        self.past = None
        self.keyword = hf_cache_keyword(model)

    def prefill_logits(self, ids):
        t = self.torch.from_numpy(ids[None, :])
        with self.torch.inference_mode():
            out = self.model(input_ids=t, use_cache=False, logits_to_keep=1)
        return out.logits[0, -1].float().numpy()

    def start(self, ids):
        t = self.torch.from_numpy(ids[None, :])
        with self.torch.inference_mode():
            out = self.model(input_ids=t, use_cache=True, logits_to_keep=1)
        self.past = hf_returned_cache(out, self.keyword)
        return int(out.logits[0, -1].argmax())

    def step(self, tok):
        t = self.torch.tensor([[tok]])
        with self.torch.inference_mode():
            out = self.model(input_ids=t, use_cache=True, **{self.keyword: self.past})
        self.past = hf_returned_cache(out, self.keyword)
        return int(out.logits[0, -1].argmax())


# ---------------------------------------------------------------------------------------------
# llama.cpp


def permute_rotary_rows(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Rows of a q/k projection (or its bias) from the rotate-half layout to llama.cpp's
    adjacent pairs: within each head, rows [0 .. dh/2) and [dh/2 .. dh) interleave (what
    llama.cpp's converter does to Hugging Face Llama checkpoints)."""
    return w.reshape(n_heads, 2, w.shape[0] // n_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def byte_level_vocab(n: int):
    """A synthetic byte-level BPE vocabulary of ``n`` tokens (llama.cpp refuses a file without
    a tokenizer; the bench feeds token ids): the 256 byte symbols of GPT-2's map, then merges
    of two existing tokens, each giving a new token, and a final end-of-text control token."""
    tokens = byte_symbols()
    seen = set(tokens)
    merges = []
    level = list(tokens)
    while len(tokens) < n - 1:
        nxt = []
        for a, b in itertools.product(level, tokens[:256]):
            if len(tokens) >= n - 1:
                break
            if a + b in seen:
                continue
            merges.append(f"{a} {b}")
            tokens.append(a + b)
            seen.add(a + b)
            nxt.append(a + b)
        level = nxt
    tokens.append("<|endoftext|>")
    types = [1] * (n - 1) + [3]
    return tokens, types, merges


def write_llama_gguf(gguf, path: Path, weights, config) -> Path:
    """The float32 weights as a GGUF ``llama`` file (F32), q/k rows permuted."""
    c = config
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("random Llama-family weights from gptcore's bench")
    w.add_context_length(min(c.n_ctx, 4096))
    w.add_embedding_length(c.d_model)
    w.add_feed_forward_length(c.d_ff)
    w.add_block_count(c.n_layers)
    w.add_head_count(c.n_heads)
    w.add_head_count_kv(c.n_kv_heads)
    w.add_key_length(c.head_dim)
    w.add_value_length(c.head_dim)
    w.add_rope_dimension_count(c.head_dim)
    w.add_rope_freq_base(float(c.rope_theta))
    w.add_layer_norm_rms_eps(float(c.ln_eps))
    w.add_vocab_size(c.vocab_size)
    w.add_file_type(0)
    tokens, types, merges = byte_level_vocab(c.vocab_size)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(c.vocab_size - 1)
    w.add_eos_token_id(c.vocab_size - 1)
    w.add_add_bos_token(False)

    def f32(a):
        return np.ascontiguousarray(a, np.float32)

    w.add_tensor("token_embd.weight", f32(weights["model.embed_tokens.weight"]))
    for i in range(c.n_layers):
        p, q = f"model.layers.{i}.", f"blk.{i}."
        a = p + "self_attn."
        w.add_tensor(q + "attn_norm.weight", f32(weights[p + "input_layernorm.weight"]))
        w.add_tensor(q + "attn_q.weight", f32(permute_rotary_rows(weights[a + "q_proj.weight"], c.n_heads)))
        w.add_tensor(q + "attn_k.weight", f32(permute_rotary_rows(weights[a + "k_proj.weight"], c.n_kv_heads)))
        w.add_tensor(q + "attn_v.weight", f32(weights[a + "v_proj.weight"]))
        if c.attn_bias:
            w.add_tensor(q + "attn_q.bias", f32(permute_rotary_rows(weights[a + "q_proj.bias"], c.n_heads)))
            w.add_tensor(q + "attn_k.bias", f32(permute_rotary_rows(weights[a + "k_proj.bias"], c.n_kv_heads)))
            w.add_tensor(q + "attn_v.bias", f32(weights[a + "v_proj.bias"]))
        w.add_tensor(q + "attn_output.weight", f32(weights[a + "o_proj.weight"]))
        if c.attn_out_bias:
            w.add_tensor(q + "attn_output.bias", f32(weights[a + "o_proj.bias"]))
        w.add_tensor(q + "ffn_norm.weight", f32(weights[p + "post_attention_layernorm.weight"]))
        w.add_tensor(q + "ffn_gate.weight", f32(weights[p + "mlp.gate_proj.weight"]))
        w.add_tensor(q + "ffn_up.weight", f32(weights[p + "mlp.up_proj.weight"]))
        w.add_tensor(q + "ffn_down.weight", f32(weights[p + "mlp.down_proj.weight"]))
    w.add_tensor("output_norm.weight", f32(weights["model.norm.weight"]))
    if not c.tied:
        w.add_tensor("output.weight", f32(weights["lm_head.weight"]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


class LlamaCppRunner:
    def __init__(self, llama_cpp, path, threads, n_ctx):
        self.llama_cpp = llama_cpp
        self.llm = llama_cpp.Llama(model_path=str(path), n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx,
                                   n_threads=threads, n_threads_batch=threads, logits_all=False,
                                   use_mmap=False, verbose=False, type_k=0, type_v=0)
        self.n_vocab = int(self.llm.n_vocab())

    def _last(self):
        ptr = self.llama_cpp.llama_get_logits_ith(self.llm.ctx, -1)
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,))

    def prefill_logits(self, ids):
        self.llm.reset()
        self.llm.eval([int(t) for t in ids])
        return self._last().copy()

    def start(self, ids):
        self.llm.reset()
        self.llm.eval([int(t) for t in ids])
        return int(np.argmax(self._last()))

    def step(self, tok):
        self.llm.eval([tok])
        return int(np.argmax(self._last()))

    def close(self):
        self.llm.close()


# ---------------------------------------------------------------------------------------------


def rel_diff(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / np.abs(b).max())


def bench_model(name, args, torch, transformers, ll, workdir, notes, rows_prefill, rows_decode, rows_kv):
    config = gptcore.GPTConfig.preset(name).replace(n_ctx=4096)
    threads = args.threads
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    weights = random_weights(config)
    notes.append(f"- {name}: {param_count(config).total / 1e6:.1f} M parameters, random weights "
                 f"(init_weights 'lesson', norms and biases perturbed), made in {time.perf_counter() - t0:.0f} s")
    prefill_ids = rng.integers(0, config.vocab_size, PREFILL)
    prompt = rng.integers(0, config.vocab_size, PROMPT)
    bw = bandwidth(threads)

    gguf_f32 = None
    if ll is not None:
        llama_cpp, gguf = ll
        gguf_f32 = write_llama_gguf(gguf, workdir / f"{name}-F32.gguf", weights, config)
        for ft in ("F16", "BF16"):
            params = llama_cpp.llama_model_quantize_default_params()
            params.ftype = LLAMA_FTYPE[ft]
            params.nthread = threads
            rc = llama_cpp.llama_model_quantize(str(gguf_f32).encode(), str(workdir / f"{name}-{ft}.gguf").encode(),
                                                params)
            if rc != 0:
                raise RuntimeError(f"llama_model_quantize to {ft} failed ({rc})")

    # ---- float32: gptcore, transformers float32, llama.cpp F32 --------------------------------
    runners = {"gptcore float32": GptcoreRunner(gptcore.Model(weights, config))}
    if torch is not None:
        runners["transformers float32"] = TorchRunner(hf_llama(weights, config, torch, transformers, torch.float32),
                                                      torch)
    if gguf_f32 is not None:
        runners["llama.cpp F32"] = LlamaCppRunner(ll[0], gguf_f32, threads, PREFILL + 16)
    check_agreement(runners, "gptcore float32", prefill_ids[:64], notes, name)
    pre = compare({k: (lambda r=r: r.prefill_logits(prefill_ids)) for k, r in runners.items()}, args.reps,
                  min_time=0.0, max_inner=1, settle=SETTLE_THREADED)
    med = {k: v.median for k, v in pre.items()}
    g = med["gptcore float32"]
    for k, v in med.items():
        rows_prefill.append([name, k, f"{v * 1e3:.1f}", f"{PREFILL / v:.1f}", fmt(v / g)])
    dec, _ = time_decode(runners, prompt, args.reps, args.steps)
    add_decode_rows(rows_decode, name, dec, "gptcore float32", config, 4, bw)
    # 192 positions: whole blocks of the cache's 96-position layout, so no room is counted twice.
    m32 = runners["gptcore float32"].model
    cache = m32.new_cache(1)
    m32.step(cache, rng.integers(0, config.vocab_size, (1, 192)))
    rows_kv.append([name, f"{cache.nbytes / 192:,.0f}",
                    f"{2 * config.n_layers * config.n_kv_heads * config.head_dim * 4:,}"])
    for r in runners.values():
        if isinstance(r, LlamaCppRunner):
            r.close()
    runners.clear()
    gc.collect()

    # ---- 16-bit: gptcore bfloat16 / float16 storage, transformers bfloat16, llama.cpp BF16 / F16
    runners = {"gptcore bfloat16": GptcoreRunner(gptcore.Model(weights, config, weight_dtype="bfloat16")),
               "gptcore float16": GptcoreRunner(gptcore.Model(weights, config, weight_dtype="float16"))}
    if torch is not None:
        runners["transformers bfloat16"] = TorchRunner(
            hf_llama(weights, config, torch, transformers, torch.bfloat16), torch)
    if gguf_f32 is not None:
        runners["llama.cpp BF16"] = LlamaCppRunner(ll[0], workdir / f"{name}-BF16.gguf", threads, PREFILL + 16)
        runners["llama.cpp F16"] = LlamaCppRunner(ll[0], workdir / f"{name}-F16.gguf", threads, PREFILL + 16)
    check_agreement(runners, "gptcore bfloat16", prefill_ids[:64], notes, name)
    pre = compare({k: (lambda r=r: r.prefill_logits(prefill_ids)) for k, r in runners.items()}, args.reps,
                  min_time=0.0, max_inner=1, settle=SETTLE_THREADED)
    for k, v in pre.items():
        rows_prefill.append([name, k, f"{v.median * 1e3:.1f}", f"{PREFILL / v.median:.1f}", fmt(v.median / g)])
    dec, _ = time_decode(runners, prompt, args.reps, args.steps)
    add_decode_rows(rows_decode, name, dec, "gptcore bfloat16", config, 2, bw)
    for r in runners.values():
        if isinstance(r, LlamaCppRunner):
            r.close()
    runners.clear()
    del weights
    gc.collect()


def check_agreement(runners, base, ids, notes, name):
    ref = runners[base].prefill_logits(ids)
    for k, r in runners.items():
        if k == base:
            continue
        d = rel_diff(r.prefill_logits(ids), ref)
        notes.append(f"- {name}: {k} logits after a {len(ids)}-token prompt differ from {base}'s by {d:.1e} "
                     "(max |difference| / max |logit|)")
        if "float32" in base and d > 1e-3:
            raise SystemExit(f"{name}: {k} disagrees with {base} ({d:.1e}); not timing different models")


def weight_width(implementation: str) -> int:
    """Bytes per weight of an implementation, from its name."""
    return 4 if ("float32" in implementation or "F32" in implementation) else 2


def add_decode_rows(rows, name, dec, base, config, itemsize, bw):
    bound = bw / weight_bytes_per_token(config, itemsize)
    g = dec[base]
    for k, v in dec.items():
        share = (1 / v) / (bw / weight_bytes_per_token(config, weight_width(k)))
        rows.append([name, k, f"{v * 1e3:.2f}", f"{1 / v:.1f}", fmt(v / g), f"{100 * share:.0f} %"])
    rows.append([name, f"bandwidth bound ({itemsize}-byte weights, {bw / 1e9:.1f} GB/s)", f"{1e3 / bound:.2f}",
                 f"{bound:.1f}", "", ""])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="smollm2-135m,qwen2.5-0.5b", help="presets (default: %(default)s)")
    ap.add_argument("--threads", type=int, default=2, help="threads for every implementation (default 2)")
    ap.add_argument("--reps", type=int, default=5, help="alternating rounds (default 5)")
    ap.add_argument("--steps", type=int, default=STEPS, help=f"decode steps per sample (default {STEPS})")
    ap.add_argument("--no-torch", action="store_true", help="leave transformers out")
    ap.add_argument("--no-llama-cpp", action="store_true", help="leave llama.cpp out")
    add_machine_args(ap)
    args = ap.parse_args()
    t_start = time.perf_counter()
    notes = []
    torch, transformers = (None, None) if args.no_torch else torch_baseline(notes, "transformers")
    set_threads(args.threads, torch)
    setup_machine(args, [args.threads], ("float32",))
    ll = None
    if not args.no_llama_cpp:
        ll, why = import_llama_cpp()
        if ll is None:
            notes.append(f"- llama.cpp baseline skipped: {why}")
        else:
            notes.append(f"- {llama_cpp_version(*ll)}; GGUF llama files written here (F32), F16 and BF16 made "
                         "from it by llama_model_quantize; F32 K/V cache; weights in memory (no mmap)")
    rows_prefill, rows_decode, rows_kv = [], [], []
    with tempfile.TemporaryDirectory(prefix="gptcore-bench-llama-") as tmp:
        for name in parse_str_list(args.models):
            bench_model(name, args, torch, transformers, ll, Path(tmp), notes, rows_prefill, rows_decode, rows_kv)
    gpt2 = gptcore.GPTConfig.preset("gpt2")
    rows_kv.append(["gpt2 (small)", "-", f"{2 * gpt2.n_layers * gpt2.n_heads * gpt2.d_head * 4:,}"])
    print(f"## Llama-family speed, {args.threads} threads\n")
    print(environment_report(notes))
    print(f"\n### Prefill 1 x {PREFILL} (median of {args.reps} alternating rounds; ratio = time / gptcore float32's)\n")
    print(markdown_table(["model", "implementation", "ms", "tok/s", "time ratio"], rows_prefill))
    print(f"\n### Decode B = 1 (after a {PROMPT}-token prompt, {args.steps} steps per sample; ratio = time / gptcore's "
          "of the width; bound share = tok/s over read bandwidth / weight bytes at that width)\n")
    print(markdown_table(["model", "implementation", "ms/token", "tok/s", "time ratio", "share of bound"],
                         rows_decode))
    print("\n### K/V cache, float32, bytes per token (gptcore's cache measured after the decode run; "
          "2 x layers x K/V heads x d_head x 4)\n")
    print(markdown_table(["model", "gptcore cache bytes / position", "2 L H_kv d_head 4"], rows_kv))
    print()
    print(closing_line(t_start))


if __name__ == "__main__":
    main()
