"""Serving speed: ``gptcore serve`` against llama-cpp-python's OpenAI server (``python -m
llama_cpp.server``) on the same weights, driven by the same client and load.

Models: GPT-2 small and SmolLM2-135M's shape, with random weights (``_models.random_weights``,
``bench_llama.random_weights``). Each is written once as a gptcore model folder and once as a
GGUF F32 file for llama.cpp (GPT-2 by ``Model.save('x.gguf')``, the Llama shape by
``bench_llama.write_llama_gguf``, its q/k rows permuted to llama.cpp's rotary layout). Both
servers read the same synthetic byte-level vocabulary (``vocab.json`` + ``merges.txt`` in the
folder, the GGUF's tokenizer metadata), so a prompt is the same tokens on both sides: the 256
byte symbols, then pairs and triples of printable ASCII characters, then the end-of-text
token. The byte symbols 0x80-0xFF are banned by ``logit_bias`` (with the end-of-text id), so
every generated token is ASCII text on its own: both servers stream one chunk per token
(random weights would otherwise produce byte sequences that are not UTF-8, which both hold
back), and the timings of the chunks are the timings of the tokens.

Both servers run at once on 127.0.0.1 with the same thread count (default 2); llama.cpp with
a float32 K/V cache, weights in memory, ``--interrupt_requests false`` (else a new request
stops the one streaming). The load: ``S`` concurrent clients (S = 1, 4, 8), each sending
``--requests`` streamed completions one after another (the same prompt, greedy, the
end-of-sequence id banned by ``logit_bias`` so every answer is ``--max-tokens`` tokens). The
two servers are measured alternately, A B then B A, for ``--rounds`` rounds.

Reported per server and stream count: aggregate tokens/s (all tokens of the phase over its
wall time; median of the rounds), time to first token (send to the first streamed text) and
inter-token latency (per request: last text minus first text over tokens - 1), p50 and p95
over every request of every round. llama-cpp-python's server runs one request at a time (a
lock around its one context), so its aggregate stays near its single-stream rate;
``gptcore serve`` batches the streams into one step.

Run (llama.cpp side in another environment when needed):

    python3 benches/bench_serve.py [--models gpt2,smollm2-135m] [--threads 2]
        [--llamacpp-python /path/to/venv/bin/python]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

from _common import closing_line, environment_report, fmt, gptcore, load_average, markdown_table, np, parse_int_list
from _common import parse_str_list
from _llamacpp import byte_symbols

STREAMS = "1,4,8"
PROMPT = "The quick brown fox jumps over the lazy dog while the old man reads a book by the sea. "


# ---------------------------------------------------------------------------------------------
# the model on both sides


def ascii_vocab(n: int):
    """(tokens, token types, merges) of ``n`` tokens (see the module): GPT-2's 256 byte
    symbols, pairs and then triples of the printable ASCII characters ``!``..``~`` (each a
    merge of existing tokens), and ``<|endoftext|>`` last (a control token)."""
    tokens = byte_symbols()
    ascii_chars = [chr(c) for c in range(ord("!"), ord("~") + 1)]
    merges = []
    level = ascii_chars
    while len(tokens) < n - 1:
        nxt = []
        for a in level:
            for b in ascii_chars:
                if len(tokens) >= n - 1:
                    break
                merges.append(f"{a} {b}")
                tokens.append(a + b)
                nxt.append(a + b)
        level = nxt
    tokens.append("<|endoftext|>")
    assert len(tokens) == n and len(set(tokens)) == n
    return tokens, [1] * (n - 1) + [3], merges


def banned_ids(n: int) -> Dict[str, float]:
    """``logit_bias`` banning the byte symbols 0x80-0xFF and the end-of-text id."""
    return {str(i): -100.0 for i in list(range(0x80, 0x100)) + [n - 1]}


def write_models(name: str, folder: Path) -> Dict[str, object]:
    """A gptcore folder and a GGUF file of the same random weights and vocabulary."""
    config = gptcore.GPTConfig.preset(name)
    v = config.vocab_size
    if config.family == "gpt2":
        from _models import random_weights
        weights, _ = random_weights(config, seed=0)
    else:
        import bench_llama
        weights = bench_llama.random_weights(config, seed=0)
    tokens, _, merges = ascii_vocab(v)
    gdir = folder / f"{name}"
    model = gptcore.Model(weights, config)
    model.save(gdir)
    (gdir / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(tokens)}, ensure_ascii=False),
                                     encoding="utf-8")
    (gdir / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")
    (gdir / "generation_config.json").write_text(json.dumps({"eos_token_id": v - 1}), encoding="utf-8")
    gguf_path = folder / f"{name}.gguf"
    if config.family == "gpt2":
        gptcore.load(gdir).save(gguf_path)  # with the folder's tokenizer as GGUF metadata
    else:
        import gguf
        # write_llama_gguf writes the vocabulary of bench_llama.byte_level_vocab: this one instead
        bench_llama.byte_level_vocab = ascii_vocab
        bench_llama.write_llama_gguf(gguf, gguf_path, weights, config)
    return {"folder": gdir, "gguf": gguf_path, "eos": v - 1, "config": config}


# ---------------------------------------------------------------------------------------------
# the servers


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bench_env() -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


class ServerProcess:
    def __init__(self, label: str, cmd: List[str], url: Optional[str] = None) -> None:
        self.label, self.cmd, self.url = label, cmd, url
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE if url is None else self.log, stderr=self.log,
                                     text=url is None, env=bench_env())
        if url is None:
            line = self.proc.stdout.readline()
            m = re.search(r"at (http://\S+) ", line)
            if not m:
                self.proc.wait(timeout=30)
                self.log.seek(0)
                err = self.log.read().decode(errors="replace").strip().splitlines()[-5:]
                raise RuntimeError(f"{label} did not start: {line!r}; its last lines: {err}")
            self.url = m.group(1)
        self.wait_ready()

    def wait_ready(self, timeout: float = 300) -> None:
        import httpx
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.log.seek(0)
                raise RuntimeError(f"{self.label} exited: {self.log.read()[-2000:]!r}")
            try:
                if httpx.get(self.url + "/v1/models", timeout=5).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{self.label} did not answer within {timeout} s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# ---------------------------------------------------------------------------------------------
# the load


async def one_request(client, url: str, body: dict) -> dict:
    t0 = time.perf_counter()
    first = last = None
    usage = None
    async with client.stream("POST", url + "/v1/completions", json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"{url}: HTTP {r.status_code}: {(await r.aread())[:300]!r}")
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                usage = chunk["usage"]
            if any(c.get("text") for c in chunk.get("choices", [])):
                now = time.perf_counter()
                first = first if first is not None else now
                last = now
    n = usage["completion_tokens"] if usage else body["max_tokens"]
    return {"ttft": first - t0, "itl": (last - first) / max(1, n - 1), "tokens": n}


async def phase(url: str, body: dict, streams: int, requests: int) -> dict:
    import httpx

    async def client_loop(out):
        async with httpx.AsyncClient(timeout=600) as client:
            for _ in range(requests):
                out.append(await one_request(client, url, body))

    results: List[dict] = []
    t0 = time.perf_counter()
    await asyncio.gather(*(client_loop(results) for _ in range(streams)))
    wall = time.perf_counter() - t0
    return {"rate": sum(r["tokens"] for r in results) / wall, "requests": results}


def pct(xs: List[float], q: float) -> float:
    return float(np.percentile(np.array(xs), q))


def bench_model(name: str, args, tmp: Path, rows: List[list], notes: List[str]) -> None:
    m = write_models(name, tmp)
    label = name
    notes.append(f"- {name}: {m['config'].n_layers} layers, d {m['config'].d_model}, vocabulary "
                 f"{m['config'].vocab_size:,}")
    servers = {}
    try:
        servers["gptcore"] = ServerProcess("gptcore serve", [
            sys.executable, "-m", "gptcore", "serve", str(m["folder"]), "--port", "0", "--threads", str(args.threads),
            "--max-batch", str(max(parse_int_list(args.streams))), "--model-name", name])
        if not args.no_llama_cpp:
            port = free_port()
            servers["llama.cpp"] = ServerProcess("llama_cpp.server", [
                args.llamacpp_python, "-m", "llama_cpp.server", "--model", str(m["gguf"]), "--host", "127.0.0.1",
                "--port", str(port), "--n_threads", str(args.threads), "--n_threads_batch", str(args.threads),
                "--n_ctx", "2048", "--n_batch", "512", "--type_k", "0", "--type_v", "0", "--use_mmap", "false",
                "--interrupt_requests", "false", "--model_alias", name, "--verbose", "false"],
                url=f"http://127.0.0.1:{port}")
        body = {"model": name, "prompt": PROMPT, "max_tokens": args.max_tokens, "temperature": 0, "stream": True,
                "logit_bias": banned_ids(m["config"].vocab_size)}
        import httpx
        for key, s in servers.items():  # warm up; the answer must have all its tokens
            r = httpx.post(s.url + "/v1/completions", json={**body, "stream": False}, timeout=600).json()
            n = r["usage"]["completion_tokens"]
            if n != args.max_tokens:
                raise RuntimeError(f"{key}: a warm-up answer has {n} tokens, not {args.max_tokens}")
            notes.append(f"- {name}, {key}: prompt {r['usage']['prompt_tokens']} tokens, "
                         f"{args.max_tokens} new tokens per request")
        results: Dict[tuple, List[dict]] = {}
        streams = parse_int_list(args.streams)
        for rnd in range(args.rounds):
            for k, s_count in enumerate(streams):
                order = list(servers) if (rnd + k) % 2 == 0 else list(reversed(servers))
                for key in order:
                    res = asyncio.run(phase(servers[key].url, body, s_count, args.requests))
                    results.setdefault((key, s_count), []).append(res)
                    print(f"  {name} {key} {s_count} streams round {rnd + 1}: {res['rate']:.1f} tok/s", flush=True)
        one = {key: statistics.median(r["rate"] for r in results[(key, streams[0])]) for key in servers}
        for s_count in streams:
            rates = {key: statistics.median(r["rate"] for r in results[(key, s_count)]) for key in servers}
            reqs = {key: [q for r in results[(key, s_count)] for q in r["requests"]] for key in servers}
            g = reqs["gptcore"]
            ll = reqs.get("llama.cpp")
            row = [label, s_count, fmt(rates["gptcore"], 1), fmt(rates["gptcore"] / one["gptcore"], 2)]
            row += [fmt(rates["llama.cpp"], 1), fmt(rates["gptcore"] / rates["llama.cpp"], 2)] if ll else ["-", "-"]
            for key_reqs in (g, ll):
                for metric in ("ttft", "itl"):
                    if key_reqs is None:
                        row.append("-")
                        continue
                    xs = [q[metric] * 1e3 for q in key_reqs]
                    row.append(f"{pct(xs, 50):.0f} / {pct(xs, 95):.0f}")
            rows.append(row)
    finally:
        for s in servers.values():
            s.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="gpt2,smollm2-135m", help="presets (default: %(default)s)")
    ap.add_argument("--threads", type=int, default=2, help="threads of each server (default 2)")
    ap.add_argument("--streams", default=STREAMS, help="concurrent clients, comma-separated (default %(default)s)")
    ap.add_argument("--requests", type=int, default=2, help="requests per client per phase (default 2)")
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds (default 2)")
    ap.add_argument("--max-tokens", type=int, default=64, help="new tokens per request (default 64)")
    ap.add_argument("--llamacpp-python", default=sys.executable,
                    help="the Python with llama-cpp-python[server] (default: this one)")
    ap.add_argument("--no-llama-cpp", action="store_true", help="leave llama.cpp out")
    args = ap.parse_args()
    t0 = time.perf_counter()
    environment = environment_report()  # now: its load average is the one at the start
    notes: List[str] = []
    if not args.no_llama_cpp:
        p = subprocess.run([args.llamacpp_python, "-c", "import llama_cpp, llama_cpp.server.app as a; "
                            "print(llama_cpp.__version__)"], capture_output=True, text=True, env=bench_env())
        if p.returncode != 0:
            notes.append(f"- llama.cpp skipped: {args.llamacpp_python} cannot import llama_cpp.server "
                         f"({p.stderr.strip().splitlines()[-1] if p.stderr.strip() else p.returncode})")
            args.no_llama_cpp = True
        else:
            notes.append(f"- llama-cpp-python {p.stdout.strip()} (python -m llama_cpp.server): GGUF F32, F32 K/V "
                         "cache, no mmap, --interrupt_requests false")
    rows: List[list] = []
    with tempfile.TemporaryDirectory(prefix="gptcore-bench-serve-") as tmp:
        for name in parse_str_list(args.models):
            bench_model(name, args, Path(tmp), rows, notes)
    print(f"## Serving, {args.threads} threads per server\n")
    print("\n".join([environment] + notes))
    print(f"\n### Streamed completions, greedy, {args.max_tokens} new tokens each; {args.requests} requests per "
          f"client per phase; tok/s = median of {args.rounds} alternating rounds; ms = p50 / p95 over all requests\n")
    print(markdown_table(["model", "streams", "gptcore tok/s", "x 1 stream", "llama.cpp tok/s", "gptcore / llama.cpp"],
                         [r[:6] for r in rows]))
    print("\nLatency, ms, p50 / p95:\n")
    print(markdown_table(["model", "streams", "gptcore TTFT", "gptcore ITL", "llama.cpp TTFT", "llama.cpp ITL"],
                         [r[:2] + r[6:] for r in rows]))
    print()
    load = load_average()
    print(closing_line(t0) if load is not None else "")


if __name__ == "__main__":
    main()
