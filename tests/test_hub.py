"""Models by their Hugging Face Hub name, offline first (``gptcore.hub``): a cache folder laid
out as ``huggingface_hub`` lays it out (``models--OWNER--NAME/refs/main``,
``snapshots/COMMIT/`` with links into ``blobs/``), ``HF_HUB_CACHE`` / ``HF_HOME`` pointing at
it and ``HF_HUB_OFFLINE=1``, in a child process; no network anywhere."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gptcore
from gptcore import hub

FIXTURES = Path(__file__).resolve().parent / "fixtures"
FOLDER = FIXTURES / "tiny-bpe"
PKG = Path(gptcore.__file__).resolve().parent.parent
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def fake_cache(root: Path, repo_id: str, source: Path = FOLDER, names=None) -> Path:
    """``source``'s files as huggingface_hub caches the repository ``repo_id`` under ``root``."""
    repo = root / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / COMMIT
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    snap.mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(COMMIT)
    for f in sorted(source.iterdir()):
        if names is not None and f.name not in names:
            continue
        data = f.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        os.symlink(os.path.relpath(blob, snap), snap / f.name)
    return snap


def run_child(code: str, cwd: Path, **env):
    full = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    full.update(PYTHONPATH=str(PKG), **env)
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=full, capture_output=True, text=True, timeout=120)


PRINT_GREEDY = ("import gptcore, sys; m = gptcore.load(sys.argv[1] if len(sys.argv) > 1 else {name!r}); "
                "print(m.config.vocab_size, m.generate_text('We hold these truths', 8, greedy=True))")


def expected_line(folder=FOLDER):
    m = gptcore.load(folder)
    return f"{m.config.vocab_size} {m.generate_text('We hold these truths', 8, greedy=True)}"


@pytest.mark.parametrize("repo_id", ["some-org/tiny-bpe", "tinybpe"])
def test_a_cached_model_loads_by_name_with_no_network(tmp_path, repo_id):
    fake_cache(tmp_path / "cache", repo_id)
    r = run_child(PRINT_GREEDY.format(name=repo_id), tmp_path, HF_HUB_CACHE=str(tmp_path / "cache"),
                  HF_HUB_OFFLINE="1")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == expected_line()
    # HF_HOME/hub is the cache when HF_HUB_CACHE is not set
    fake_cache(tmp_path / "home" / "hub", repo_id)
    r = run_child(PRINT_GREEDY.format(name=repo_id), tmp_path, HF_HOME=str(tmp_path / "home"), HF_HUB_OFFLINE="1")
    assert r.returncode == 0 and r.stdout.strip() == expected_line(), r.stderr


def test_offline_and_not_cached_says_how_to_get_it(tmp_path):
    (tmp_path / "cache").mkdir()
    code = "import gptcore; gptcore.load('some-org/absent')"
    r = run_child(code, tmp_path, HF_HUB_CACHE=str(tmp_path / "cache"), HF_HUB_OFFLINE="1")
    assert r.returncode == 1
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("FileNotFoundError: load: 'some-org/absent' is not a local file or folder")
    assert "HF_HUB_OFFLINE" in last and "hf download some-org/absent" in last and str(tmp_path / "cache") in last
    # in the cache without weights (say, a transformers download of pytorch_model.bin only): the same
    fake_cache(tmp_path / "cache", "some-org/partial", names={"config.json", "tokenizer.json"})
    r = run_child("import gptcore; gptcore.load('some-org/partial')", tmp_path,
                  HF_HUB_CACHE=str(tmp_path / "cache"), HF_HUB_OFFLINE="1")
    assert r.returncode == 1 and "holds it only in part" in r.stderr, r.stderr


def test_a_local_folder_wins_over_a_repository_id(tmp_path):
    fake_cache(tmp_path / "cache", "some-org/tiny")  # the cache has tiny-bpe (vocab 640) ...
    local = tmp_path / "work" / "some-org" / "tiny"  # ... a folder of that name here another model
    local.mkdir(parents=True)
    for f in (FIXTURES / "tiny-a-hf").iterdir():
        shutil.copy(f, local / f.name)
    code = "import gptcore; print(gptcore.load('some-org/tiny').config.vocab_size)"
    r = run_child(code, tmp_path / "work", HF_HUB_CACHE=str(tmp_path / "cache"), HF_HUB_OFFLINE="1")
    assert r.returncode == 0, r.stderr
    assert int(r.stdout) == gptcore.load(FIXTURES / "tiny-a-hf").config.vocab_size != 640


def test_not_cached_and_online_downloads_only_what_gptcore_reads(monkeypatch):
    """The download call, without the network: huggingface_hub's snapshot_download is
    replaced by one that records its arguments. The cache is asked first, with no network;
    only then is the repository fetched, with allow_patterns that hold the safetensors and
    tokenizer files and no pickle."""
    import huggingface_hub

    calls = []

    def fake_snapshot_download(repo_id, **kwargs):
        calls.append((repo_id, kwargs))
        if kwargs.get("local_files_only"):
            raise FileNotFoundError("not in the cache")  # what LocalEntryNotFoundError derives from
        return str(FOLDER)

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    model = gptcore.load("some-org/remote-model")
    assert [c[1].get("local_files_only", False) for c in calls] == [True, False]
    patterns = calls[1][1]["allow_patterns"]
    import fnmatch

    for wanted in ("model.safetensors", "model-00001-of-00002.safetensors", "model.safetensors.index.json",
                   "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                   "vocab.json", "merges.txt"):
        assert any(fnmatch.fnmatch(wanted, p) for p in patterns), wanted
    for unwanted in ("pytorch_model.bin", "model.pt", "tf_model.h5", "flax_model.msgpack", "model.onnx"):
        assert not any(fnmatch.fnmatch(unwanted, p) for p in patterns), unwanted
    assert np.array_equal(model.forward([1, 2, 3]), gptcore.load(FOLDER).forward([1, 2, 3]))
    # a download that fails (no network, no such repository) is a clear FileNotFoundError
    def failing(repo_id, **kwargs):
        raise OSError("connection refused") if not kwargs.get("local_files_only") else FileNotFoundError()

    monkeypatch.setattr(huggingface_hub, "snapshot_download", failing)
    with pytest.raises(FileNotFoundError, match=r"'some-org/other' .* could not be downloaded from the Hub "
                                                r"\(OSError: connection refused\)"):
        gptcore.load("some-org/other")


def test_what_counts_as_a_repository_id():
    for name in ("gpt2", "openai-community/gpt2", "HuggingFaceTB/SmolLM2-135M", "a.b_c-d/e.f"):
        assert hub.looks_like_repo_id(name), name
    for name in ("./gpt2", "/abs/path", "a/b/c", "no/such/folder", "", "-x", "a--b/c", "x/../y", "a/", "with space"):
        assert not hub.looks_like_repo_id(name), name
