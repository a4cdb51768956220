"""Tokenizers and chat templates of Llama-family folders, against what transformers computed
with the same files (``tests/fixtures/*/expected_text.json``, made by
``make_llama_fixtures.py``): ids with and without the special tokens the post-processor adds,
decoding, the ids that end generation, chats rendered with and without the generation prompt,
and the errors templates raise."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from gptcore.chat_template import ChatTemplate
from gptcore.tokenizer import Tokenizer

FIXTURES = Path(__file__).parent / "fixtures"
FOLDERS = ["llama-tiny", "qwen2-tiny", "smollm2-tiny"]


def expected(name):
    return json.loads((FIXTURES / name / "expected_text.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", FOLDERS)
def test_encoding_matches_transformers(name):
    tok = Tokenizer.from_folder(FIXTURES / name)
    for case in expected(name)["encode"]:
        assert tok.encode(case["text"], add_special_tokens=True).tolist() == case["ids"], case["text"]
        assert tok.encode(case["text"]).tolist() == case["ids_plain"], case["text"]
        assert tok.decode(case["ids_plain"]) == case["decoded"]


def test_bos_is_added_where_the_post_processor_adds_it():
    llama = Tokenizer.from_folder(FIXTURES / "llama-tiny")
    ids = llama.encode("Liberty", add_special_tokens=True)
    assert llama.bos_id is not None and ids[0] == llama.bos_id and ids[1:].tolist() == llama.encode("Liberty").tolist()
    for name in ("qwen2-tiny", "smollm2-tiny"):
        tok = Tokenizer.from_folder(FIXTURES / name)
        assert tok.encode("Liberty", add_special_tokens=True).tolist() == tok.encode("Liberty").tolist()


@pytest.mark.parametrize("name", FOLDERS)
def test_eos_ids_come_from_the_generation_config(name):
    tok = Tokenizer.from_folder(FIXTURES / name)
    want = expected(name)["eos_ids"]
    gen = json.loads((FIXTURES / name / "generation_config.json").read_text())["eos_token_id"]
    assert list(tok.eos_ids) == want == (gen if isinstance(gen, list) else [gen])
    assert tok.eos_id == want[0]


@pytest.mark.parametrize("name", FOLDERS)
def test_chats_render_as_transformers_renders_them(name):
    tok = Tokenizer.from_folder(FIXTURES / name)
    cases = expected(name)["chats"]
    assert {c["add_generation_prompt"] for c in cases} == {True, False}
    for c in cases:
        text = tok.apply_chat_template(c["messages"], add_generation_prompt=c["add_generation_prompt"], **c["kwargs"])
        assert text == c["text"]
        assert tok.encode(text).tolist() == c["ids"]


@pytest.mark.parametrize("name", FOLDERS)
def test_template_failures_name_the_template(name):
    tok = Tokenizer.from_folder(FIXTURES / name)
    for c in expected(name)["chat_errors"]:
        with pytest.raises(ValueError) as e:
            tok.apply_chat_template(c["messages"], **c["kwargs"])
        assert c["error"] in str(e.value)
        assert "chat template" in str(e.value) and name in str(e.value)


def test_llama3_template_dates_with_strftime_now():
    tok = Tokenizer.from_folder(FIXTURES / "llama-tiny")
    before = datetime.now().strftime("%d %b %Y")
    text = tok.apply_chat_template([{"role": "user", "content": "Hi"}])
    after = datetime.now().strftime("%d %b %Y")
    assert f"Today Date: {before}" in text or f"Today Date: {after}" in text
    assert text.startswith("<|begin_of_text|>")  # bos_token, from tokenizer_config.json


def test_named_templates_and_template_files(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": [
        {"name": "default", "template": "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}"},
        {"name": "tool_use", "template": "{{ tools | tojson }}|{{ messages | length }}"},
    ]}))
    t = ChatTemplate.from_folder(tmp_path)
    assert t.names == ("default", "tool_use")
    msgs = [{"role": "user", "content": "é"}]
    assert t.render(msgs, special_tokens={"bos_token": "<s>"}) == "<s>é"
    assert t.render(msgs, tools=[{"name": "f", "x": "ü"}]) == '[{"name": "f", "x": "ü"}]|1'
    assert t.render(msgs, template="tool_use") == "null|1"
    with pytest.raises(ValueError, match="no template named 'other'"):
        t.render(msgs, template="other")
    # chat_template.jinja wins over tokenizer_config.json, as in newer transformers.
    (tmp_path / "chat_template.jinja").write_text("{% for m in messages %}[{{ m.role }}]{% endfor %}\n")
    assert ChatTemplate.from_folder(tmp_path).render(msgs) == "[user]"


def test_bad_templates_and_messages_are_value_errors(tmp_path):
    broken = ChatTemplate("{% for m in messages %}{{ m.content }", source="'broken.json'")
    with pytest.raises(ValueError, match=r"chat template 'broken.json' failed \(line 1\): TemplateSyntaxError"):
        broken.render([{"role": "user", "content": "x"}])
    refuse = ChatTemplate("{{ raise_exception('Roles must alternate') }}", source="'t'")
    with pytest.raises(ValueError, match="chat template 't' failed.*TemplateError: Roles must alternate"):
        refuse.render([{"role": "user", "content": "x"}])
    sandboxed = ChatTemplate("{{ messages.__class__.__mro__ }}")
    with pytest.raises(ValueError, match="SecurityError|UndefinedError"):
        sandboxed.render([{"role": "user", "content": "x"}])
    ok = ChatTemplate("{{ messages[0].content }}")
    with pytest.raises(ValueError, match=r"messages\[0\] must be a dict with a str 'role'"):
        ok.render([{"content": "no role"}])
    with pytest.raises(TypeError, match="messages must be a list"):
        ok.render("hello")
    with pytest.raises(TypeError, match="got a set"):
        ok.render([{"role": "user", "content": {1, 2}}])
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": 5}))
    with pytest.raises(ValueError, match="tokenizer_config.json.*must be a string or a list"):
        ChatTemplate.from_folder(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text("{not json")
    with pytest.raises(ValueError, match="is not valid JSON"):
        ChatTemplate.from_folder(tmp_path)


def test_folder_settings_are_checked(tmp_path):
    src = FIXTURES / "qwen2-tiny"
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (tmp_path / f).write_bytes((src / f).read_bytes())
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [5, 10**6]}))
    with pytest.raises(ValueError, match=r"eos_token_id 1000000 in .*generation_config.json.* is outside"):
        Tokenizer.from_folder(tmp_path)
    (tmp_path / "generation_config.json").unlink()
    tc = json.loads((src / "tokenizer_config.json").read_text())
    tc["bos_token"] = "<|no such token|>"
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(tc))
    with pytest.raises(ValueError, match=r"bos_token '<\|no such token\|>' in .* is not in the tokenizer's vocabulary"):
        Tokenizer.from_folder(tmp_path)
    tc["bos_token"] = {"content": "<|im_start|>", "special": True}  # an AddedToken as written by older versions
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(tc))
    tok = Tokenizer.from_folder(tmp_path)
    assert tok.special_tokens["bos_token"] == "<|im_start|>"
    # Without generation_config.json or config.json, the eos_token of tokenizer_config.json ends generation.
    assert tok.eos_ids == (tok.backend.token_to_id("<|im_end|>"),)
