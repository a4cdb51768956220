"""The command line's surfaces, as a user meets them (subprocesses on the fixture folder
``tests/fixtures/tiny-bpe``): the same meaning as the API, the sampling and stopping options,
--prompt-file and standard input, --json, --weight-dtype, exit codes (usage 2, file and model
1, interrupted 130), errors and warnings that name what the user wrote."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import gptcore
from gptcore.weights import safetensors_file

FIXTURES = Path(__file__).resolve().parent / "fixtures"
FOLDER = FIXTURES / "tiny-bpe"
TEXT_FILE = FIXTURES / "text" / "public-domain.txt"
PKG = Path(gptcore.__file__).resolve().parent.parent
PROMPT = "We hold these truths"


def cli(*argv, stdin=None, env=None, timeout=300):
    full = dict(os.environ, PYTHONPATH=str(PKG) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    full.update(env or {})
    p = subprocess.run([sys.executable, "-m", "gptcore", *map(str, argv)], capture_output=True, input=stdin,
                       env=full, timeout=timeout)
    return p.returncode, p.stdout.decode("utf-8"), p.stderr.decode("utf-8")


@pytest.fixture(scope="module")
def model():
    return gptcore.load(FOLDER)


# ------------------------------------------------------------------------------ the same as the API
def test_max_new_tokens_zero_means_nothing_in_both(model):
    assert model.generate(model.tokenizer.encode(PROMPT), 0).size == 0
    assert model.generate_text(PROMPT, 0) == ""
    rc, out, err = cli("generate", FOLDER, PROMPT, "--max-new-tokens", "0")
    assert (rc, out) == (0, "\n"), err
    rc, out, err = cli("generate", FOLDER, PROMPT, "--max-new-tokens", "0", "--json")
    assert rc == 0 and json.loads(out)["ids"] == [] and json.loads(out)["text"] == ""


def test_sampling_and_stopping_options_mean_what_the_api_means(model):
    opts = ["--seed", "5", "--temperature", "0.9", "--top-k", "50", "--min-p", "0.02", "--repetition-penalty", "1.3",
            "--frequency-penalty", "0.5", "--presence-penalty", "0.25", "--logit-bias", "69=2.5",
            "--logit-bias", "257=-100"]
    kw = dict(seed=5, temperature=0.9, top_k=50, min_p=0.02, repetition_penalty=1.3, frequency_penalty=0.5,
              presence_penalty=0.25, logit_bias={69: 2.5, 257: -100.0})
    rc, out, err = cli("generate", FOLDER, PROMPT, "--max-new-tokens", "40", *opts)
    assert rc == 0, err
    assert out == model.generate_text(PROMPT, 40, **kw) + "\n"
    free = model.generate_text(PROMPT, 40, **kw, stop_at_eos=False)
    stop = free[5:8]
    rc, out, err = cli("generate", FOLDER, PROMPT, "--max-new-tokens", "40", *opts, "--stop", stop, "--ignore-eos")
    assert rc == 0 and out == free[:free.find(stop)] + "\n", err
    assert stop not in out
    ids = model.generate(model.tokenizer.encode(PROMPT), 40, **kw).tolist()
    rc, out, err = cli("generate", FOLDER, PROMPT, "--max-new-tokens", "40", *opts, "--stop-token", ids[3],
                       "--ignore-eos", "--json")
    result = json.loads(out)
    assert rc == 0 and result["ids"] == ids[:ids.index(ids[3]) + 1], err
    assert result["finish_reason"] == "stop" and result["stopped_by"] == ids[3]
    assert result["text"] == model.tokenizer.decode(ids[:ids.index(ids[3])])


def test_prompt_file_and_standard_input(tmp_path, model):
    want = model.generate_text(PROMPT + "\n", 12, greedy=True) + "\n"
    f = tmp_path / "prompt.txt"
    f.write_text(PROMPT + "\n", encoding="utf-8")
    assert cli("generate", FOLDER, "--prompt-file", f, "--max-new-tokens", "12", "--greedy")[:2] == (0, want)
    assert cli("generate", FOLDER, "-", "--max-new-tokens", "12", "--greedy", stdin=(PROMPT + "\n").encode())[:2] == \
        (0, want)
    assert cli("generate", FOLDER, "--prompt-file", "-", "--max-new-tokens", "12", "--greedy",
               stdin=(PROMPT + "\n").encode())[:2] == (0, want)
    # errors name the argument
    rc, _, err = cli("generate", FOLDER, "--prompt-file", tmp_path / "absent.txt")
    assert rc == 1 and "--prompt-file: no such file" in err
    (tmp_path / "empty.txt").write_text("")
    rc, _, err = cli("generate", FOLDER, "--prompt-file", tmp_path / "empty.txt")
    assert rc == 2 and f"--prompt-file '{tmp_path / 'empty.txt'}' is empty" in err
    rc, _, err = cli("generate", FOLDER, "-", stdin=b"")
    assert rc == 2 and "the prompt on standard input is empty" in err
    rc, _, err = cli("generate", FOLDER, PROMPT, "--prompt-file", f)
    assert rc == 2 and "not both" in err
    rc, _, err = cli("generate", FOLDER)
    assert rc == 2 and "the prompt is missing" in err


def test_generate_json_is_one_object(model):
    rc, out, err = cli("generate", FOLDER, PROMPT, "--max-new-tokens", "15", "--greedy", "--ignore-eos", "--json")
    assert rc == 0 and err == "", err
    result = json.loads(out)
    ids = model.generate(model.tokenizer.encode(PROMPT), 15, greedy=True).tolist()
    assert result["ids"] == ids and result["text"] == model.tokenizer.decode(ids)
    assert result["finish_reason"] == "length" and result["prompt_tokens"] == len(model.tokenizer.encode(PROMPT))
    t = result["timings"]
    assert t["prefill_tokens"] == result["prompt_tokens"] and t["decode_tokens"] == 14
    assert all(t[k] >= 0 for k in ("encode_s", "prefill_s", "decode_s"))


def test_perplexity_json_and_weight_dtype(model):
    rc, out, err = cli("perplexity", FOLDER, TEXT_FILE, "--json", "--weight-dtype", "bfloat16")
    assert rc == 0, err
    result = json.loads(out)
    bf16 = gptcore.load(FOLDER, weight_dtype="bfloat16")
    want = bf16.score_text(TEXT_FILE.read_text(encoding="utf-8"))
    (row,) = result["files"]
    assert (row["file"], row["tokens"], row["nll"]) == (str(TEXT_FILE), want.tokens, want.nll)  # bit for bit
    assert result["total"]["nll"] == want.nll and result["errors"] == []
    assert want.nll != model.score_text(TEXT_FILE.read_text(encoding="utf-8")).nll  # really 16-bit
    rc, out, err = cli("generate", FOLDER, PROMPT, "--max-new-tokens", "10", "--greedy", "--weight-dtype", "float16")
    assert rc == 0 and out == gptcore.load(FOLDER, weight_dtype="float16").generate_text(PROMPT, 10, greedy=True) + "\n"
    rc, _, err = cli("generate", FOLDER, PROMPT, "--weight-dtype", "bfloat16", "--dtype", "float64")
    assert rc == 2 and "--weight-dtype bfloat16 needs --dtype float32" in err


# ------------------------------------------------------------------------------ exit codes
def test_perplexity_prints_the_good_files_and_names_the_bad(tmp_path, model):
    one = tmp_path / "one.txt"
    one.write_text("W", encoding="utf-8")
    latin = tmp_path / "latin1.txt"
    latin.write_bytes("caf\u00e9".encode("latin-1"))
    rc, out, err = cli("perplexity", FOLDER, TEXT_FILE, one, tmp_path / "absent.txt", latin)
    assert rc == 1
    assert str(TEXT_FILE) in out and "total" in out
    want = model.score_text(TEXT_FILE.read_text(encoding="utf-8"))
    assert f"{want.mean:.6f}" in out.splitlines()[-1]  # the total is the good file's
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 3
    assert f"'{one}' has 1 token(s): nothing to score" in errors[0]
    assert f"'{tmp_path / 'absent.txt'}' no such file" in errors[1]
    assert f"'{latin}' is not UTF-8 text (byte 0xe9 at offset 3)" in errors[2]
    rc, out, err = cli("perplexity", FOLDER, one, "--json")

    def no_nan(name):
        raise AssertionError(f"{name} is not JSON")

    result = json.loads(out, parse_constant=no_nan)
    assert rc == 1 and result["files"] == [] and result["total"] == {"tokens": 0, "nll": None, "mean": None,
                                                                     "perplexity": None}
    assert result["errors"] == [{"file": str(one), "error": "has 1 token(s): nothing to score (the first token is "
                                                            "never scored)"}]


def test_empty_documents_are_errors_in_both_commands(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    rc, out, err = cli("perplexity", FOLDER, empty)
    assert rc == 1 and "has 0 token(s): nothing to score" in err
    rc, out, err = cli("score", FOLDER, empty, TEXT_FILE, "--no-progress")
    assert rc == 1 and "has 0 token(s): nothing to score" in out and "1 document(s) could not be scored" in err
    rc, out, err = cli("score", FOLDER, empty, TEXT_FILE, "--no-progress", "--allow-errors")
    assert rc == 0 and "warning: 1 document(s)" in err


def test_model_errors_exit_1_and_usage_errors_2(tmp_path):
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        shutil.copy(FOLDER / name, tmp_path / name)
    entries, meta = safetensors_file.read_header(tmp_path / "model.safetensors", "t")
    tensors = {e.name: ("F32", safetensors_file.read_tensor(e, "t").astype(np.float32)) for e in entries}
    tensors["transformer.wte.weight"][1][4, 2] = np.nan
    safetensors_file.write_file(tmp_path / "model.safetensors", tensors, meta)
    for command in (["generate", tmp_path, PROMPT], ["perplexity", tmp_path, TEXT_FILE]):
        rc, out, err = cli(*command)
        assert rc == 1 and "tensor 'transformer.wte.weight'" in err and "[4, 2]" in err, err
        assert out == ""  # no empty line pretending to be a continuation
    rc, _, err = cli("score", tmp_path, TEXT_FILE, "--no-progress")
    assert rc == 1 and "tensor 'transformer.wte.weight'" in err
    rc, _, err = cli("generate", FOLDER, PROMPT, "--logit-bias", "640=1")
    assert rc == 2 and "--logit-bias: token id 640 is out of range [0, 640)" in err
    rc, _, err = cli("generate", FOLDER, PROMPT, "--stop-token", "9999")
    assert rc == 2 and "--stop-token: token id 9999" in err


def test_interrupted_exits_130():
    full = dict(os.environ, PYTHONPATH=str(PKG) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    # The child takes SIGINT as a terminal's Ctrl-C does, also when the suite itself runs with
    # SIGINT ignored (started in the background by a shell, which children inherit).
    p = subprocess.Popen([sys.executable, "-m", "gptcore", "generate", str(FOLDER), PROMPT, "--max-new-tokens",
                          "1000000000", "--context-shift", "32", "--ignore-eos"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=full,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        p.stdout.read(20)  # generating, with bounded memory: a stream may run forever
        time.sleep(0.2)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
    finally:
        p.kill()
    assert p.returncode == 130 and b"gptcore generate: interrupted" in err


# ------------------------------------------------------------------------------ messages
def test_errors_name_the_function_the_user_called(model):
    with pytest.raises(ValueError, match=r"^generate_text: prompt is empty"):
        model.generate_text("", 3)
    with pytest.raises(ValueError, match=r"^stream_text: prompt is empty"):
        model.stream_text("", 3)
    with pytest.raises(ValueError, match=r"^generate_text: min_p"):
        model.generate_text(PROMPT, 3, min_p=7)
    with pytest.raises(TypeError, match=r"^generate_text: unexpected keyword argument 'topk'"):
        model.generate_text(PROMPT, 3, topk=3)


def test_warnings_point_at_the_callers_line(model):
    long_prompt = TEXT_FILE.read_text(encoding="utf-8")[:600]
    calls = [lambda: model.generate_text(long_prompt, 3, greedy=True),
             lambda: "".join(model.stream_text(long_prompt, 3, greedy=True)),
             lambda: list(model.stream(model.tokenizer.encode(long_prompt)[:127], 3, greedy=True))]
    for call in calls:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            call()
        assert len(caught) == 1 and "context_shift=1" in str(caught[0].message)
        assert caught[0].filename == __file__, caught[0].filename


@pytest.mark.parametrize("argv,warned", [
    (["--threads", "1"], False),
    ([], True),
])
def test_thread_variable_warning_only_when_it_would_be_used(argv, warned):
    rc, out, err = cli("generate", FOLDER, PROMPT, "--max-new-tokens", "3", "--greedy", *argv,
                       env={"GPTCORE_NUM_THREADS": "-1"})
    assert rc == 0, err
    assert ("GPTCORE_NUM_THREADS='-1' is below 1" in err) == warned, err
    assert "not a whole number" not in err


def test_hub_name_on_the_command_line(tmp_path, model):
    from test_hub import fake_cache

    fake_cache(tmp_path / "cache", "some-org/tiny-bpe")
    env = {"HF_HUB_CACHE": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}
    rc, out, err = cli("generate", "some-org/tiny-bpe", PROMPT, "--max-new-tokens", "8", "--greedy", env=env)
    assert rc == 0 and out == model.generate_text(PROMPT, 8, greedy=True) + "\n", err
    rc, out, err = cli("perplexity", "some-org/tiny-bpe", TEXT_FILE, "--json", env=env)
    assert rc == 0 and json.loads(out)["total"]["tokens"] == model.score_text(TEXT_FILE.read_text()).tokens
    rc, out, err = cli("info", "some-org/tiny-bpe", env=env)
    assert rc == 0 and "vocab 640" in out
    rc, out, err = cli("generate", "some-org/absent", PROMPT, env=env)
    assert rc == 1 and "hf download some-org/absent" in err and "HF_HUB_OFFLINE" in err
