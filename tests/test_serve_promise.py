"""The promise under load: a request's tokens and log-probabilities are bit-identical whether
it runs alone or among other requests arriving at any time, greedy or seeded.

16 requests of different prompt and output lengths (greedy and seeded, streamed and not, with
and without alternatives) arrive staggered at a real server whose batch (8) is smaller than
the load and whose prompt chunk (16 tokens) cuts the longer prompts into several steps; each
answer is compared, float for float, with the same request run alone on the same server, and
with ``Model.generate`` in this process (an independent path: whole-prompt prefill, no
server). The same for chat requests on a Llama-family model."""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest

import gptcore
from serve_helpers import GPT2, LLAMA, Server


@pytest.fixture(scope="module")
def gpt2_server():
    with Server(GPT2, "--max-batch", "8", "--prefill-chunk", "16") as s:
        yield s


def completion_cases(model):
    rng = np.random.default_rng(49)
    v = model.tokenizer.vocab_size
    cases = []
    for i in range(16):
        t = int(rng.integers(1, 70))
        case = dict(prompt=[int(x) for x in rng.integers(1, v, size=t)], max_tokens=int(rng.integers(1, 40)),
                    logprobs=[None, 0, 3][i % 3], stream=i % 4 in (1, 2))
        if i % 2 == 0:
            case.update(temperature=0.0)
        else:
            case.update(temperature=0.9, top_p=0.95, seed=1000 + i)
        cases.append(case)
    return cases


def complete(server, case):
    """(text, token logprobs, top logprobs, finish_reason, completion_tokens) through the
    openai client, streamed or not."""
    client = server.client()
    kw = {k: v for k, v in case.items() if k != "stream"}
    if not case["stream"]:
        r = client.completions.create(model=server.name, **kw)
        c = r.choices[0]
        lp = c.logprobs
        return (c.text, lp and lp.token_logprobs, lp and lp.top_logprobs, c.finish_reason, r.usage.completion_tokens)
    text, lps, tops, finish, usage = [], [], [], None, None
    for chunk in client.completions.create(model=server.name, stream=True, **kw):
        if chunk.usage is not None:
            usage = chunk.usage.completion_tokens
        for c in chunk.choices:
            text.append(c.text)
            if c.logprobs is not None:
                lps += c.logprobs.token_logprobs
                tops += c.logprobs.top_logprobs
            finish = c.finish_reason or finish
    has_lp = case["logprobs"] is not None
    return "".join(text), lps if has_lp else None, tops if has_lp else None, finish, usage


def reference(model, case):
    """The same request through Model.generate (stop at the model's end-of-sequence ids)."""
    opts = dict(temperature=case["temperature"], seed=case.get("seed"), top_p=case.get("top_p"))
    toks, lps = model.generate(np.array(case["prompt"]), case["max_tokens"], stop_at_eos=True,
                               return_logprobs=True, **opts)
    n = len(toks)
    if n and int(toks[-1]) in model.eos_token_ids:
        toks, lps, finish = toks[:-1], lps[:-1], "stop"
    else:
        finish = "length"
    return model.tokenizer.decode(toks), [float(x) for x in lps], finish, n


def test_sixteen_staggered_requests_equal_their_solo_runs(gpt2_server):
    model = gptcore.load(GPT2)
    cases = completion_cases(model)
    solo = [complete(gpt2_server, c) for c in cases]

    def late(i):
        time.sleep(0.003 * i)
        return complete(gpt2_server, cases[i])

    with ThreadPoolExecutor(16) as pool:
        together = list(pool.map(late, range(16)))
    assert gpt2_server.metric("gptcore_steps_total") > 0
    for i, (case, a, b) in enumerate(zip(cases, solo, together)):
        assert a == b, f"request {i} differs under load: {case}"
        text, lps, tops, finish, n = a
        ref_text, ref_lps, ref_finish, ref_n = reference(model, case)
        assert (text, finish, n) == (ref_text, ref_finish, ref_n), i
        if case["logprobs"] is not None:
            assert lps == ref_lps, i  # floats through JSON: exact
            k = case["logprobs"]
            # alternatives keyed by their text: two ids with one text (pieces of characters) share a key
            assert all(0 < len(t) <= k if k else t == {} for t in tops), i
            if k and case["temperature"] == 0:  # the greedy token is the most likely alternative
                assert all(max(t.values()) == lp for t, lp in zip(tops, lps)), i
    # the load really overlapped: steps of several sequences (the solo runs have 1)
    body = httpx.get(gpt2_server.url + "/metrics").text
    few = float(re.search(r'^gptcore_step_sequences_bucket\{le="1.0"\} (\S+)$', body, re.M).group(1))
    assert gpt2_server.metric("gptcore_step_sequences_count") > few
    # a long prompt never stalls the batch for more than one chunk: no step fed more than the
    # prompt chunk (16) plus one token per other sequence (at most 8), whatever the prompts
    steps = gpt2_server.metric("gptcore_step_tokens_count")
    small = float(re.search(r'^gptcore_step_tokens_bucket\{le="32.0"\} (\S+)$', body, re.M).group(1))
    assert small == steps


def test_chat_requests_under_load_equal_their_solo_runs():
    model = gptcore.load(LLAMA)
    topics = ["the sea", "a red kite", "bread", "winter light", "old maps", "rain on tin", "a clock", "salt"]
    cases = []
    for i, topic in enumerate(topics):
        msgs = [{"role": "user", "content": f"Tell me about {topic}." + " Please." * i}]
        case = dict(messages=msgs, max_tokens=5 + 3 * i, logprobs=True, top_logprobs=i % 3)
        case.update(dict(temperature=0.0) if i % 2 == 0 else dict(temperature=0.8, seed=7 + i))
        cases.append(case)

    def chat(server, case, stream):
        client = server.client()
        if not stream:
            r = client.chat.completions.create(model=server.name, **case)
            c = r.choices[0]
            return c.message.content, [(t.token, t.logprob, [a.logprob for a in t.top_logprobs])
                                       for t in c.logprobs.content], c.finish_reason
        text, lps, finish = [], [], None
        for chunk in client.chat.completions.create(model=server.name, stream=True, **case):
            for c in chunk.choices:
                text.append(c.delta.content or "")
                if c.logprobs is not None:
                    lps += [(t.token, t.logprob, [a.logprob for a in t.top_logprobs]) for t in c.logprobs.content]
                finish = c.finish_reason or finish
        return "".join(text), lps, finish

    with Server(LLAMA, "--max-batch", "3", "--prefill-chunk", "24") as server:
        solo = [chat(server, c, False) for c in cases]

        def late(i):
            time.sleep(0.01 * i)
            return chat(server, cases[i], i % 2 == 1)

        with ThreadPoolExecutor(8) as pool:
            together = list(pool.map(late, range(8)))
    for i, (case, a, b) in enumerate(zip(cases, solo, together)):
        assert a == b, f"chat request {i} differs under load"
        ids = model.tokenizer.encode(model.tokenizer.apply_chat_template(case["messages"], add_generation_prompt=True))
        toks, lps = model.generate(ids, case["max_tokens"], temperature=case["temperature"], seed=case.get("seed"),
                                   stop_at_eos=True, return_logprobs=True)
        keep = len(toks) - (1 if len(toks) and int(toks[-1]) in model.eos_token_ids else 0)
        assert [x[1] for x in a[1]] == [float(x) for x in lps[:keep]], i
        assert a[0] == model.tokenizer.decode(toks[:keep]), i
