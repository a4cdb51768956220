"""Ending generation: stop strings matched on the decoded text across token boundaries (never
emitted), stop token ids, and the end-of-sequence ids of the model folder
(``generation_config.json``, else ``config.json``; one id or a list)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

import gptcore
from gptcore.generation_config import eos_token_ids
from gptcore.stop_strings import StopStringMatcher

FIXTURES = Path(__file__).resolve().parent / "fixtures"
FOLDER = FIXTURES / "tiny-bpe"


@pytest.fixture(scope="module")
def model():
    return gptcore.load(FOLDER)


def cut_at_first_stop(text, stops):
    """The reference: the text before the first stop string to be complete, reading from the
    start (the occurrence that ends first; on a tie, the longer)."""
    found = [(i + len(s), i) for i, s in ((text.find(s), s) for s in stops) if i >= 0]
    return (text[:min(found)[1]], True) if found else (text, False)


def run_matcher(pieces, stops):
    m = StopStringMatcher(stops)
    out = []
    for p in pieces:
        released, stopped = m.push(p)
        assert not any(s in released for s in stops)  # a stop string is never released
        out.append(released)
        if stopped:
            return "".join(out), True, m
    out.append(m.flush())
    return "".join(out), False, m


# ------------------------------------------------------------------------------ the matcher
def test_stop_string_split_across_pieces():
    text, stopped, m = run_matcher(["Hello wor", "ld, The", " E", "nd of it"], ["The End"])
    assert (text, stopped, m.found) == ("Hello world, ", True, "The End")
    # held back while it could still become the stop string, then released
    m = StopStringMatcher(["The End"])
    assert m.push("abc The E") == ("abc ", False) and m.held == "The E"
    assert m.push("ternal") == ("The Eternal", False) and m.held == ""
    assert m.flush() == ""


def test_first_complete_occurrence_wins_and_text_after_it_is_dropped():
    assert run_matcher(["xx STOP2 yy STOP1"], ["STOP1", "STOP2"])[:2] == ("xx ", True)
    assert run_matcher(["a", "b", "\n", "\n", "c"], ["\n\n"])[:2] == ("ab", True)
    assert run_matcher(["ab"], ["b", "ab"])[:2] == ("", True)  # same end: the longer
    # "b" is complete before "aba" is: the same however the text is cut into pieces
    for pieces in (["aba"], ["ab", "a"], ["a", "b", "a"]):
        assert run_matcher(pieces, ["aba", "b"])[:2] == ("a", True)


def test_no_stop_releases_everything_at_the_end():
    assert run_matcher(["The E", "n"], ["The End"])[:2] == ("The En", False)
    assert run_matcher(["abc"], [])[:2] == ("abc", False)
    with pytest.raises(ValueError, match="empty"):
        StopStringMatcher([""])


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab\n .", max_size=40), st.lists(st.text(alphabet="ab\n .", min_size=1, max_size=4),
                                                         min_size=1, max_size=3), st.data())
def test_matcher_equals_cutting_the_whole_text(text, stops, data):
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=8)))
    pieces = [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])]
    got, stopped, m = run_matcher(pieces, stops)
    assert (got, stopped) == cut_at_first_stop(text, stops)
    assert len(m.held) < max(map(len, stops))


# ------------------------------------------------------------------------------ text generation
def test_generate_text_stops_at_a_string_spanning_tokens(model):
    prompt = "We hold these truths"
    free = model.generate_text(prompt, 40, greedy=True, stop_at_eos=False)
    ids = model.generate(model.tokenizer.encode(prompt), 40, greedy=True)
    # a stop string that starts inside one token and ends inside a later one
    pieces = [model.tokenizer.decode([t]) for t in ids]
    k = next(i for i in range(2, len(pieces)) if len(pieces[i - 1]) >= 2 and len(pieces[i]) >= 1)
    start = sum(len(p) for p in pieces[:k]) - 1
    stop = free[start:start + 2]
    assert stop[0] == pieces[k - 1][-1] and stop[1] == pieces[k][0]
    text = model.generate_text(prompt, 40, greedy=True, stop=[stop], stop_at_eos=False)
    assert text == free[:free.find(stop)] and stop not in text
    assert "".join(model.stream_text(prompt, 40, greedy=True, stop=stop, stop_at_eos=False)) == text
    # a stop string that never appears changes nothing
    assert model.generate_text(prompt, 40, greedy=True, stop=["\x00never"], stop_at_eos=False) == free


def test_ids_level_stop_strings_end_with_the_completing_token(model):
    ids = model.tokenizer.encode("We hold these truths")
    free = model.generate(ids, 40, greedy=True)
    text = model.tokenizer.decode(free)
    stop = text[10:13]
    out = model.generate(ids, 40, greedy=True, stop=[stop])
    # the first prefix of the tokens whose text holds the stop string
    n = next(i for i in range(1, 41) if stop in model.tokenizer.decode(free[:i]))
    assert out.tolist() == free[:n].tolist()
    tiny = gptcore.Model(dict(gptcore.load_safetensors(FOLDER)[0]), gptcore.load_safetensors(FOLDER)[1])
    with pytest.raises(ValueError, match="generate: stop strings .* tokenizer"):
        tiny.generate(ids, 3, stop=["x"])


def test_stop_tokens_are_not_part_of_the_text(model):
    prompt = "We hold these truths"
    ids = model.generate(model.tokenizer.encode(prompt), 30, greedy=True)
    stop = int(ids[5])
    first = ids.tolist().index(stop)
    text = model.generate_text(prompt, 30, greedy=True, stop_tokens=[stop], stop_at_eos=False)
    assert text == model.tokenizer.decode(ids[:first])


# ------------------------------------------------------------------------------ EOS of the folder
def _folder_with(tmp_path, generation=None, config_eos="keep"):
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        shutil.copy(FOLDER / name, tmp_path / name)
    if config_eos != "keep":
        cfg = json.loads((tmp_path / "config.json").read_text())
        cfg.pop("eos_token_id", None)
        if config_eos is not None:
            cfg["eos_token_id"] = config_eos
        (tmp_path / "config.json").write_text(json.dumps(cfg))
    if generation is not None:
        (tmp_path / "generation_config.json").write_text(json.dumps(generation))
    return tmp_path


def test_eos_ids_come_from_generation_config_then_config(tmp_path, model):
    prompt_ids = model.tokenizer.encode("We hold these truths")
    free = model.generate(prompt_ids, 30, greedy=True).tolist()
    k = max(i for i in range(len(free)) if free.index(free[i]) == i)  # the last token new to the text
    a = free[k]
    b = next(t for t in range(model.config.vocab_size) if t not in free[:k + 1])
    folder = _folder_with(tmp_path, {"eos_token_id": [a, b, a]}, config_eos=99)
    assert eos_token_ids(folder) == (a, b)
    m = gptcore.load(folder)
    assert m.eos_token_ids == (a, b)
    text = m.generate_text("We hold these truths", 30, greedy=True)
    assert text == model.tokenizer.decode(free[:k])  # stops at the first of them, unseen
    assert m.generate(prompt_ids, 30, greedy=True, stop_at_eos=True).tolist() == free[:k + 1]
    assert m.generate(prompt_ids, 30, greedy=True).tolist() == free  # ids: only when asked
    assert m.generate_text("We hold these truths", 30, greedy=True, stop_at_eos=False) == model.tokenizer.decode(free)
    # no generation_config.json: config.json's; neither: the tokenizer's <|endoftext|>
    (folder / "generation_config.json").unlink()
    assert gptcore.load(folder).eos_token_ids == (99,)
    _folder_with(folder, None, config_eos=None)
    assert eos_token_ids(folder) is None and gptcore.load(folder).eos_token_ids == (model.tokenizer.eos_id,)


def test_bad_eos_ids_name_the_file(tmp_path):
    folder = _folder_with(tmp_path, {"eos_token_id": "x"})
    with pytest.raises(ValueError, match="generation_config.json.*token id"):
        gptcore.load(folder)
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": 5000}))
    with pytest.raises(ValueError, match=r"eos_token_id 5000 .*generation_config.json.*vocab_size = 640"):
        gptcore.load(folder)
    (folder / "generation_config.json").write_text("{not json")
    with pytest.raises(ValueError, match="generation_config.json.*not valid JSON"):
        gptcore.load(folder)
