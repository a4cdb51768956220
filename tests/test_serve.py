"""gptcore serve's endpoints and request fields, through a real server on 127.0.0.1 driven by
the openai client and httpx: every route, the answers' shape and usage, streaming (ending
with ``data: [DONE]``), log-probabilities against the model's own (``Model.token_logprobs``),
echo, stop strings and ids, n, the context clamp, and a 400 naming the field for every kind
of bad input."""

from __future__ import annotations

import json

import httpx
import numpy as np
import openai
import pytest

import gptcore
from serve_helpers import GPT2, LLAMA, Server, sse_events


@pytest.fixture(scope="module")
def gpt2():
    with Server(GPT2) as s:
        yield s


@pytest.fixture(scope="module")
def llama():
    with Server(LLAMA) as s:
        yield s


@pytest.fixture(scope="module")
def gpt2_model():
    return gptcore.load(GPT2)


PROMPT = "The old man and the sea"
NO_EOS = {"0": -100}  # tiny-bpe's <|endoftext|> is id 0: answers run to max_tokens


# ------------------------------------------------------------------------------ routes

def test_health_models_metrics(gpt2):
    h = httpx.get(gpt2.url + "/health").json()
    assert h["status"] == "ok" and h["model"] == "tiny-bpe"
    models = gpt2.client().models.list()
    assert [m.id for m in models.data] == ["tiny-bpe"] and models.data[0].object == "model"
    raw = httpx.get(gpt2.base + "/models").json()
    assert raw["object"] == "list" and set(raw["data"][0]) >= {"id", "object", "created", "owned_by"}
    gpt2.client().completions.create(model="tiny-bpe", prompt=PROMPT, max_tokens=3, logit_bias=NO_EOS)
    m = httpx.get(gpt2.url + "/metrics")
    assert m.status_code == 200 and m.headers["content-type"].startswith("text/plain")
    for name in ("gptcore_requests_total", "gptcore_prompt_tokens_total", "gptcore_completion_tokens_total",
                 "gptcore_queue_depth", "gptcore_running_sequences", "gptcore_time_to_first_token_seconds_bucket",
                 "gptcore_inter_token_seconds_bucket"):
        assert name in m.text, name
    assert 'gptcore_requests_total{endpoint="/v1/completions",status="200"}' in m.text
    assert gpt2.metric("gptcore_completion_tokens_total") >= 3
    r = httpx.get(gpt2.url + "/v1/nothing")
    assert r.status_code == 404 and r.json()["error"]["type"] == "invalid_request_error"
    assert httpx.get(gpt2.base + "/completions").status_code == 405


def test_completion_answer(gpt2, gpt2_model):
    r = gpt2.client().completions.create(model="tiny-bpe", prompt=PROMPT, max_tokens=7, temperature=0,
                                         logit_bias=NO_EOS)
    assert r.object == "text_completion" and r.model == "tiny-bpe" and r.id.startswith("cmpl-")
    c = r.choices[0]
    ids = gpt2_model.tokenizer.encode(PROMPT)
    want = gpt2_model.generate(ids, 7, greedy=True, logit_bias={0: -100})
    assert c.text == gpt2_model.tokenizer.decode(want) and c.finish_reason == "length" and c.logprobs is None
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (ids.size, 7, ids.size + 7)


def test_prompt_as_token_ids(gpt2, gpt2_model):
    ids = [int(i) for i in gpt2_model.tokenizer.encode(PROMPT)]
    a = gpt2.client().completions.create(model="tiny-bpe", prompt=ids, max_tokens=5, temperature=0)
    b = gpt2.client().completions.create(model="tiny-bpe", prompt=[PROMPT], max_tokens=5, temperature=0)
    assert a.choices[0].text == b.choices[0].text and a.usage == b.usage


def test_max_tokens_past_the_context_is_clamped(gpt2, gpt2_model):
    n_ctx = gpt2_model.config.n_ctx
    ids = [5] * (n_ctx - 6)
    r = gpt2.client().completions.create(model="tiny-bpe", prompt=ids, max_tokens=50, logit_bias=NO_EOS, seed=1)
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 6 and r.usage.total_tokens == n_ctx


def test_stream_equals_the_whole_answer_and_ends_with_done(gpt2):
    body = {"model": "tiny-bpe", "prompt": PROMPT, "max_tokens": 12, "seed": 3, "logit_bias": NO_EOS}
    whole = gpt2.post("/completions", body).json()
    r = gpt2.post("/completions", {**body, "stream": True})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r.text)
    assert events[-1] == "[DONE]" and r.text.endswith("data: [DONE]\n\n")
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "text_completion" and c["id"] == chunks[0]["id"] for c in chunks)
    assert "".join(c["choices"][0]["text"] for c in chunks) == whole["choices"][0]["text"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["usage"] == whole["usage"]
    # include_usage: a last chunk without choices
    chunks = list(gpt2.client().completions.create(model="tiny-bpe", prompt=PROMPT, max_tokens=4, stream=True,
                                                   stream_options={"include_usage": True}))
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens <= 4


def test_logprobs_are_the_models_own(gpt2, gpt2_model):
    r = gpt2.client().completions.create(model="tiny-bpe", prompt=PROMPT, max_tokens=6, temperature=0.7, seed=11,
                                         logprobs=3, echo=True, logit_bias=NO_EOS)
    c = r.choices[0]
    lp = c.logprobs
    tok = gpt2_model.tokenizer
    prompt = tok.encode(PROMPT)
    # the echoed prompt leads: text, tokens, a first token without a log-probability
    assert c.text.startswith(PROMPT) and len(lp.tokens) == prompt.size + 6
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    # every log-probability against Model.token_logprobs of the whole text (another path: a
    # full forward pass and the Rust log-softmax)
    gen = gpt2_model.generate(prompt, 6, temperature=0.7, seed=11, logit_bias={0: -100})
    ids = np.concatenate([prompt, gen])
    want = gpt2_model.token_logprobs(ids[None, :])[0]
    got = np.array(lp.token_logprobs[1:], dtype=np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert lp.tokens == [tok.decode([int(i)]) for i in ids]
    assert lp.text_offset == list(np.cumsum([0] + [len(t) for t in lp.tokens[:-1]]))
    for alts, chosen in zip(lp.top_logprobs[1:], lp.token_logprobs[1:]):
        vals = list(alts.values())
        assert 0 < len(alts) <= 3 and vals == sorted(vals, reverse=True) and max(vals) >= chosen


def test_chat_answer_stream_and_logprobs(llama):
    client = llama.client()
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."}]
    r = client.chat.completions.create(model="smollm2-tiny", messages=msgs, max_tokens=8, seed=5, logprobs=True,
                                       top_logprobs=2)
    c = r.choices[0]
    assert r.object == "chat.completion" and c.message.role == "assistant" and c.finish_reason in ("stop", "length")
    content = c.logprobs.content
    assert "".join(bytes(t.bytes).decode("utf-8", "replace") for t in content) == c.message.content
    assert all(len(t.top_logprobs) == 2 and t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob for t in content)
    stream = client.chat.completions.create(model="smollm2-tiny", messages=msgs, max_tokens=8, seed=5, stream=True)
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks) == c.message.content
    assert chunks[-1].choices[0].finish_reason == c.finish_reason and chunks[-1].usage == r.usage
    # content as a list of text parts, and the developer role
    parts = [{"role": "developer", "content": "Be brief."},
             {"role": "user", "content": [{"type": "text", "text": "Name a "}, {"type": "text", "text": "colour."}]}]
    r2 = client.chat.completions.create(model="smollm2-tiny", messages=parts, max_tokens=8, seed=5)
    assert r2.choices[0].message.content == c.message.content


def test_chat_without_template_is_a_400(gpt2):
    r = gpt2.post("/chat/completions", {"model": "tiny-bpe", "messages": [{"role": "user", "content": "hi"}]})
    err = r.json()["error"]
    assert r.status_code == 400 and err["param"] == "messages" and err["code"] == "chat_template_missing"
    assert "chat template" in err["message"]


def test_stop_strings_and_token_ids(gpt2, gpt2_model):
    client = gpt2.client()
    base = client.completions.create(model="tiny-bpe", prompt=PROMPT, max_tokens=30, temperature=0,
                                     logit_bias=NO_EOS).choices[0].text
    assert len(base) > 10
    stop = base[5:8]
    r = client.completions.create(model="tiny-bpe", prompt=PROMPT, max_tokens=30, temperature=0, stop=[stop, "\x00"],
                                  logit_bias=NO_EOS)
    assert r.choices[0].finish_reason == "stop" and r.choices[0].text == base[:base.index(stop)]
    gen = gpt2_model.generate(gpt2_model.tokenizer.encode(PROMPT), 30, greedy=True, logit_bias={0: -100})
    r = client.completions.create(model="tiny-bpe", prompt=PROMPT, max_tokens=30, temperature=0, logit_bias=NO_EOS,
                                  extra_body={"stop_token_ids": [int(gen[4])]})
    first = list(gen).index(gen[4])
    assert r.choices[0].finish_reason == "stop" and r.usage.completion_tokens == first + 1
    assert r.choices[0].text == gpt2_model.tokenizer.decode(gen[:first])


def test_n_choices_each_with_its_own_seed(gpt2):
    client = gpt2.client()
    r = client.completions.create(model="tiny-bpe", prompt=PROMPT, max_tokens=8, n=3, seed=40, logit_bias=NO_EOS)
    assert [c.index for c in r.choices] == [0, 1, 2] and r.usage.completion_tokens == 24
    for i, c in enumerate(r.choices):
        alone = client.completions.create(model="tiny-bpe", prompt=PROMPT, max_tokens=8, seed=40 + i,
                                          logit_bias=NO_EOS)
        assert c.text == alone.choices[0].text
    chunks = list(client.completions.create(model="tiny-bpe", prompt=PROMPT, max_tokens=8, n=2, seed=40,
                                            logit_bias=NO_EOS, stream=True))
    for i in range(2):
        assert "".join(ch.choices[0].text for ch in chunks if ch.choices and ch.choices[0].index == i) \
            == r.choices[i].text


# ------------------------------------------------------------------------------ bad input

GOOD = {"model": "tiny-bpe", "prompt": PROMPT, "max_tokens": 4}

BAD_COMPLETIONS = [
    ({"max_tokens": 0}, "max_tokens", "at least 1"),
    ({"max_tokens": -3}, "max_tokens", "at least 1"),
    ({"max_tokens": "4"}, "max_tokens", "integer"),
    ({"max_tokens": 2.5}, "max_tokens", "integer"),
    ({"max_tokens": True}, "max_tokens", "integer"),
    ({"temperature": "hot"}, "temperature", "number"),
    ({"temperature": 2.5}, "temperature", "[0, 2]"),
    ({"top_p": 0}, "top_p", "(0, 1]"),
    ({"top_p": 1.5}, "top_p", "(0, 1]"),
    ({"seed": -1}, "seed", "at least 0"),
    ({"seed": "x"}, "seed", "integer"),
    ({"n": 0}, "n", "at least 1"),
    ({"n": 17}, "n", "at most 16"),
    ({"logprobs": 21}, "logprobs", "at most 20"),
    ({"logprobs": True}, "logprobs", "integer"),
    ({"stop": 5}, "stop", "string"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop", "at most 4"),
    ({"stop": ["a", ""]}, "stop[1]", "empty"),
    ({"stream": "yes"}, "stream", "boolean"),
    ({"echo": 1}, "echo", "boolean"),
    ({"stream_options": {"include_usage": True}}, "stream_options", "stream"),
    ({"logit_bias": {"999999": 1}}, "logit_bias", "out of range"),
    ({"logit_bias": {"3": 500}}, "logit_bias", "[-100, 100]"),
    ({"frequency_penalty": 3}, "frequency_penalty", "[-2, 2]"),
    ({"prompt": ""}, "prompt", "empty"),
    ({"prompt": 7}, "prompt", "string"),
    ({"prompt": [1, 2, 640]}, "prompt[2]", "out of range"),
    ({"prompt": [1, -2]}, "prompt[1]", "out of range"),
    ({"prompt": [1, "a"]}, "prompt[1]", "integer"),
    ({"prompt": ["a", "b"]}, "prompt", "one prompt"),
    ({"prompt": [3] * 128}, "prompt", "context"),
    ({"prompt": [3] * 500}, "prompt", "context"),
    ({"prompt": None}, "prompt", "provide a prompt"),
    ({"suffix": "end"}, "suffix", "not supported"),
    ({"best_of": 3}, "best_of", "not supported"),
    ({"stop_token_ids": [640]}, "stop_token_ids[0]", "out of range"),
    ({"frobnicate": 1}, "frobnicate", "Unrecognized request argument supplied: frobnicate"),
    ({"model": None}, "model", "provide a model"),
    ({"model": 3}, "model", "string"),
]


@pytest.mark.parametrize("change,param,words", BAD_COMPLETIONS, ids=[p for _, p, _ in BAD_COMPLETIONS])
def test_bad_completion_fields_are_400s_naming_the_field(gpt2, change, param, words):
    r = gpt2.post("/completions", {**GOOD, **change})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["type"] == "invalid_request_error" and err["param"] == param and words in err["message"], err


BAD_CHATS = [
    ({"messages": "hi"}, "messages", "array"),
    ({"messages": []}, "messages", "empty"),
    ({"messages": [{"content": "hi"}]}, "messages[0].role", "role"),
    ({"messages": [{"role": "user"}]}, "messages[0].content", "required"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content", "string"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages[0].content[0]", "text"),
    ({"top_logprobs": 2}, "top_logprobs", "logprobs"),
    ({"logprobs": True, "top_logprobs": 30}, "top_logprobs", "at most 20"),
    ({"logprobs": 3}, "logprobs", "boolean"),
    ({"max_completion_tokens": 0}, "max_completion_tokens", "at least 1"),
    ({"tools": [{"type": "function"}]}, "tools", "not supported"),
    ({"response_format": {"type": "json_object"}}, "response_format", "not supported"),
    ({"echo": True}, "echo", "Unrecognized"),
    ({"prompt": "x"}, "prompt", "Unrecognized"),
]


@pytest.mark.parametrize("change,param,words", BAD_CHATS, ids=[p for _, p, _ in BAD_CHATS])
def test_bad_chat_fields_are_400s_naming_the_field(llama, change, param, words):
    body = {"model": "smollm2-tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, **change}
    r = llama.post("/chat/completions", body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and words in err["message"], err


def test_malformed_bodies_and_unknown_models(gpt2):
    for raw in (b"{", b"not json", b"", b"[1, 2]", b'"text"', b"\xff\xfe"):
        r = gpt2.post("/completions", raw)
        assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error", raw
    r = gpt2.post("/completions", {**GOOD, "model": "gpt-4"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    with pytest.raises(openai.NotFoundError):
        gpt2.client().completions.create(model="gpt-4", prompt="x", max_tokens=1)
    with pytest.raises(openai.BadRequestError) as e:
        gpt2.client().completions.create(model="tiny-bpe", prompt="x", max_tokens=0)
    assert e.value.body["param"] == "max_tokens"
    with pytest.raises(openai.BadRequestError):  # n and unknown fields as the API answers them
        gpt2.client().completions.create(model="tiny-bpe", prompt="x", max_tokens=1, n=0)
    with pytest.raises(openai.BadRequestError) as e:
        gpt2.client().completions.create(model="tiny-bpe", prompt="x", max_tokens=1, extra_body={"nope": 1})
    assert e.value.body["param"] == "nope"
    big = json.dumps({**GOOD, "prompt": "x" * (17 << 20)})
    r = gpt2.post("/completions", big)
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
    assert httpx.get(gpt2.url + "/health").status_code == 200


# ------------------------------------------------------------------------------ the command

def test_serve_command_errors(tmp_path):
    import socket
    import subprocess
    import sys

    def serve(*args):
        return subprocess.run([sys.executable, "-m", "gptcore", "serve", *map(str, args)], capture_output=True,
                              text=True, timeout=120)

    p = serve(tmp_path / "nothing")
    assert p.returncode == 1 and "no such model" in p.stderr
    weights_only = tmp_path / "weights-only"
    gptcore.load(GPT2).save(weights_only)  # config.json + model.safetensors, no tokenizer
    p = serve(weights_only, "--port", "0")
    assert p.returncode == 1 and "tokenizer" in p.stderr
    p = serve(GPT2, "--port", "70000")
    assert p.returncode == 2 and "--port" in p.stderr
    p = serve(GPT2, "--api-key", " ")
    assert p.returncode == 2 and "--api-key" in p.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        p = serve(GPT2, "--port", taken.getsockname()[1])
    assert p.returncode == 1 and "cannot serve on 127.0.0.1" in p.stderr
