"""Scoring a corpus on a Dask cluster (gptcore.distributed): the same bits as one process, the
per-worker model cache, per-row errors, Parquet output, a worker killed mid-run, an
unreachable scheduler and the ``gptcore score`` command.

Everything runs on one ``LocalCluster(processes=True)`` of two one-thread workers on
127.0.0.1, shared by the module; every wait is bounded. The worker-killing test comes last.
"""

from __future__ import annotations

import inspect
import logging
import math
import os
import signal
import socket
import threading
import time

import numpy as np
import pytest

# dask, pandas and pyarrow come with the test extra (cluster): missing is an error, not a skip
import pandas as pd  # noqa: E402
from distributed import Client, LocalCluster  # noqa: E402

import gptcore
from gptcore import distributed as gd
from gptcore.cli import main
from gptcore.scoring import score_ids

CONFIG = gptcore.GPTConfig(vocab_size=500, n_ctx=64, d_model=64, n_heads=2, n_layers=2)
WAIT = 90  # seconds: the most any run of this module may take


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "tiny-gpt"
    gptcore.Model(gptcore.init_weights(CONFIG, seed=11, dtype="float32"), CONFIG).save(path)
    return str(path)


@pytest.fixture(scope="module")
def ref_model(model_dir):
    return gptcore.load(model_dir)


@pytest.fixture(scope="module")
def client():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address="127.0.0.1:0", silence_logs=logging.CRITICAL) as cluster:
        with Client(cluster, timeout=60, set_as_default=False) as c:
            c.wait_for_workers(2, timeout=60)
            yield c


def _docs(seed, lengths, vocab=CONFIG.vocab_size):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, size=n) for n in lengths]


# ------------------------------------------------------------------------------------------

def test_every_row_equals_one_process_token_logprobs_bit_for_bit(client, model_dir, ref_model):
    docs = _docs(0, [64, 2, 17, 64, 40, 5, 64, 33] * 3)  # every document fits one window
    df = gd.score(docs, model_dir, client=client, batch_tokens=150, timeout=WAIT)
    assert list(df.columns) == list(gd.COLUMNS) and len(df) == len(docs)
    assert df["error"].isna().all() and df["path"].isna().all()
    assert df["document"].tolist() == list(range(len(docs)))
    for row, ids in zip(df.itertuples(), docs):
        lp = ref_model.token_logprobs(ids)  # one process, one call, the whole document
        nll = -math.fsum(lp.tolist())
        assert row.tokens == len(ids) and row.scored == len(ids) - 1
        assert row.nll == nll  # bit for bit
        assert row.mean == nll / (len(ids) - 1) and row.perplexity == math.exp(nll / (len(ids) - 1))


def test_sliding_windows_on_the_cluster_equal_one_process(client, model_dir, ref_model):
    docs = _docs(1, [200, 64, 65, 1, 0, 130, 97])
    df = gd.score(docs, model_dir, client=client, context=48, stride=20, batch_tokens=128, timeout=WAIT)
    for row, ids in zip(df.itertuples(), docs):
        ref = score_ids(ref_model, ids, context=48, stride=20)
        assert row.scored == ref.tokens
        if ref.tokens:
            assert (row.nll, row.mean, row.perplexity) == (ref.nll, ref.mean, ref.perplexity)
            assert pd.isna(row.error)
        else:  # nothing to score: an error, as gptcore perplexity says of such a file
            assert math.isnan(row.mean) and math.isnan(row.nll) and row.tokens == len(ids)
            assert "nothing to score" in row.error and f"has {len(ids)} token(s)" in row.error
    here = gd.score(docs, model_dir, context=48, stride=20, batch_tokens=128)  # in this process
    pd.testing.assert_frame_equal(df, here)
    # default window: n_ctx = 64 and stride 32
    df = gd.score(docs[:3], model_dir, client=client, timeout=WAIT)
    assert df["nll"].tolist() == [score_ids(ref_model, d, context=64, stride=32).nll for d in docs[:3]]


def test_float64_model_on_the_cluster(client, model_dir):
    docs = _docs(2, [30, 64, 9])
    ref64 = gptcore.load(model_dir, dtype="float64")
    df = gd.score(docs, model_dir, client=client, dtype="float64", timeout=WAIT)
    assert df["nll"].tolist() == [-math.fsum(ref64.token_logprobs(d).tolist()) for d in docs]


def test_model_built_once_per_worker_and_threads_from_the_worker(client, model_dir):
    client.run(gd.clear_model_cache)
    assert set(client.run(gptcore.get_num_threads).values()) != {0}
    docs = _docs(3, [60] * 12)
    tasks = gd._tasks([60] * 12, 64)
    assert len(tasks) == 12  # one document per task
    for _ in range(2):  # two runs
        gd.score(docs, model_dir, client=client, batch_tokens=64, timeout=WAIT)
    info = client.run(gd.model_cache_info)
    assert sum(i["tasks"] for i in info.values()) == 24
    assert max(i["tasks"] for i in info.values()) >= 12  # some worker ran many tasks ...
    for i in info.values():
        assert i["builds"] == (1 if i["tasks"] else 0), info  # ... and built the model once
        assert i["path"] in (None, model_dir)
    # each worker has one thread, so gptcore runs with one thread there (the default is the cores)
    threads = client.run(gptcore.get_num_threads)
    assert all(threads[w] == 1 for w, i in info.items() if i["tasks"]), threads
    # preload builds nothing more where the model is already there, and builds it elsewhere
    info = client.run(gd.preload, model_dir)
    assert all(i["builds"] == 1 and i["path"] == model_dir for i in info.values()), info
    # other load options are another model: built again
    gd.score(docs[:4], model_dir, client=client, dtype="float64", timeout=WAIT)
    info2 = client.run(gd.model_cache_info)
    assert sum(i["builds"] for i in info2.values()) > sum(i["builds"] for i in info.values())


def test_tasks_have_a_bounded_token_count(tmp_path):
    assert gd._tasks([10, 20, 30, 40, 100, 5], 60) == [[0, 1, 2], [3], [4], [5]]
    assert gd._tasks([], 60) == []
    np.save(tmp_path / "a.npy", np.arange(77, dtype=np.int32))
    (tmp_path / "t.txt").write_text("hello world", encoding="utf-8")
    assert gd._estimate_tokens(str(tmp_path / "a.npy")) == 77
    assert gd._estimate_tokens(str(tmp_path / "t.txt")) == 11
    assert gd._estimate_tokens(str(tmp_path / "missing.npy")) == 1
    for sizes in ([7] * 50, [1, 100, 3, 64, 64, 64, 2]):
        for limit in (1, 64, 130):
            tasks = gd._tasks(sizes, limit)
            assert sum(tasks, []) == list(range(len(sizes)))
            assert all(len(t) == 1 or sum(sizes[i] for i in t) <= limit for t in tasks)


def test_bad_documents_are_reported_per_row(client, model_dir, ref_model, tmp_path):
    good = _docs(4, [20, 30])
    np.save(tmp_path / "good.npy", good[1].astype(np.int32))
    np.save(tmp_path / "floats.npy", np.linspace(0, 1, 10))
    np.save(tmp_path / "matrix.npy", np.zeros((3, 4), dtype=np.int64))
    np.save(tmp_path / "objects.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    (tmp_path / "garbage.npy").write_bytes(b"\x93NUMPY garbage, not an array")
    docs = [
        good[0],
        np.array([1, 2, 500, 3]),  # id == vocab_size
        np.array([4, -2, 5]),
        str(tmp_path / "missing.npy"),
        str(tmp_path / "garbage.npy"),
        str(tmp_path / "floats.npy"),
        str(tmp_path / "matrix.npy"),
        str(tmp_path / "objects.npy"),
        str(tmp_path / "good.npy"),
    ]
    df = gd.score(docs, model_dir, client=client, batch_tokens=40, timeout=WAIT)
    errors = df["error"].tolist()
    assert pd.isna(errors[0]) and pd.isna(errors[8])
    assert "token id 500 at position 2 is out of range [0, 500)" in errors[1]
    assert "token id -2 at position 1" in errors[2]
    assert errors[3].startswith("FileNotFoundError") and "missing.npy" in errors[3]
    assert errors[4].startswith("ValueError")
    assert "integer" in errors[5] and "float64" in errors[5]
    assert "1-D" in errors[6] and "(3, 4)" in errors[6]
    assert "pickle" in errors[7].lower()
    for i in range(1, 8):
        assert df["scored"][i] == 0 and math.isnan(df["nll"][i])
    # the rest of the run went on
    assert df["nll"][0] == -math.fsum(ref_model.token_logprobs(good[0]).tolist())
    assert df["nll"][8] == -math.fsum(ref_model.token_logprobs(good[1]).tolist())
    assert df["path"][8] == str(tmp_path / "good.npy") and df["tokens"][8] == 30


def test_parquet_written_by_the_workers_reads_back_equal(client, model_dir, tmp_path):
    docs = _docs(5, [64, 10, 100, 3, 64, 64, 0, 50])
    np.save(tmp_path / "doc.npy", docs[2])
    docs[2] = str(tmp_path / "doc.npy")
    docs.append(str(tmp_path / "nothing-here.npy"))
    memory = gd.score(docs, model_dir, client=client, batch_tokens=130, timeout=WAIT)
    out = tmp_path / "scores.parquet"
    parts = gd.score(docs, model_dir, client=client, batch_tokens=130, out=out, timeout=WAIT)
    files = sorted(os.listdir(out))
    assert files == [f"part-{i:05d}.parquet" for i in range(len(parts))] == parts["part"].tolist()
    assert len(parts) == len(gd._tasks([64, 10, 100, 3, 64, 64, 1, 50, 1], 130))
    assert parts["documents"].sum() == len(docs) and parts["errors"].sum() == 2  # the missing file, the empty one
    assert parts["scored"].sum() == memory["scored"].sum()
    pd.testing.assert_frame_equal(pd.read_parquet(out), memory)
    with pytest.raises(FileExistsError, match="not an empty folder"):
        gd.score(docs, model_dir, client=client, out=out)


def test_unreachable_scheduler_fails_fast_and_clearly(model_dir):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    with pytest.raises(ConnectionError, match=f"cannot reach a Dask scheduler at 'tcp://127.0.0.1:{port}'"):
        gd.score(_docs(6, [5]), model_dir, client=f"tcp://127.0.0.1:{port}", connect_timeout=2)
    assert time.monotonic() - t0 < 15


def test_arguments_are_checked(client, model_dir, tmp_path):
    with pytest.raises(TypeError, match="a list of documents"):
        gd.score(str(tmp_path / "a.npy"), model_dir)
    with pytest.raises(TypeError, match="a list of documents"):
        gd.score(np.arange(5), model_dir)
    with pytest.raises(ValueError, match="batch_tokens must be >= 1"):
        gd.score([np.arange(5)], model_dir, batch_tokens=0)
    with pytest.raises(ValueError, match="stride must be smaller than context"):
        gd.score([np.arange(5)], model_dir, context=8, stride=8)
    with pytest.raises(TypeError, match="weight_dtype"):
        gd.score([np.arange(5)], model_dir, weight_dtype=np.float16)
    with pytest.raises(ValueError, match="dtype must be one of 'float32', 'float64'"):
        gd.score([np.arange(5)], model_dir, dtype="float16")
    with pytest.raises(TimeoutError, match="not done after"):
        gd.score(_docs(12, [64] * 40), model_dir, client=client, batch_tokens=64, timeout=0.001)
    # the model's own limits are checked where it is loaded, and fail the whole run
    with pytest.raises(ValueError, match="n_ctx = 64"):
        gd.score([np.arange(5)], model_dir, client=client, context=65, stride=8, timeout=WAIT)
    with pytest.raises(FileNotFoundError):
        gd.score([np.arange(5)], str(tmp_path / "no-model"), client=client, timeout=WAIT)


def test_weight_dtype_is_passed_to_load(client, model_dir):
    if "weight_dtype" not in inspect.signature(gptcore.load).parameters:
        pytest.skip("gptcore.load has no weight_dtype in this version")
    docs = _docs(7, [64, 20])
    ref = gptcore.load(model_dir, weight_dtype="bfloat16")
    df = gd.score(docs, model_dir, client=client, weight_dtype="bfloat16", timeout=WAIT)
    assert df["nll"].tolist() == [-math.fsum(ref.token_logprobs(d).tolist()) for d in docs]


def test_text_documents_use_the_model_folders_tokenizer(client, model_dir, tmp_path):
    Tokenizer = pytest.importorskip("gptcore.tokenizer").Tokenizer
    import shutil

    from tokenizers import Tokenizer as HFTokenizer, decoders, models, pre_tokenizers, trainers

    folder = tmp_path / "with-tokenizer"
    shutil.copytree(model_dir, folder)
    sentences = ["the quick brown fox jumps over the lazy dog", "a model scores every document of a corpus",
                 "perplexity is the exponential of the mean negative log-likelihood"] * 5
    hf = HFTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    hf.train_from_iterator(sentences, trainers.BpeTrainer(vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    assert hf.get_vocab_size() <= CONFIG.vocab_size
    hf.save(str(folder / "tokenizer.json"))
    texts = ["the lazy fox scores a corpus", "every document of the brown dog " * 4]
    files = []
    for i, text in enumerate(texts):
        (tmp_path / f"doc{i}.txt").write_text(text, encoding="utf-8")
        files.append(str(tmp_path / f"doc{i}.txt"))
    model = gptcore.load(folder)
    ours = Tokenizer.from_folder(folder)
    df = gd.score(files, folder, client=client, timeout=WAIT)
    for row, text in zip(df.itertuples(), texts):
        ids = np.asarray(hf.encode(text).ids)
        np.testing.assert_array_equal(np.asarray(ours.encode(text)), ids)
        assert pd.isna(row.error) and row.tokens == len(ids)
        assert row.nll == score_ids(model, ids).nll


# ------------------------------------------------------------------------------------------
# the command line

def test_cli_score_on_a_scheduler_and_to_parquet(client, model_dir, tmp_path, capsys):
    docs = _docs(8, [30, 64, 90])
    files = []
    for i, d in enumerate(docs):
        np.save(tmp_path / f"d{i}.npy", d)
        files.append(str(tmp_path / f"d{i}.npy"))
    files.append(str(tmp_path / "absent.npy"))
    expected = gd.score(files, model_dir)
    address = client.scheduler.address
    # a document could not be scored: the table, then exit status 1 (0 with --allow-errors)
    assert main(["score", model_dir, *files, "--scheduler", address, "--no-progress"]) == 1
    captured = capsys.readouterr()
    lines = captured.out.strip().splitlines()
    assert lines[0].split() == ["path", "scored", "nll", "mean", "perplexity", "error"]
    for line, row in zip(lines[1:4], expected.itertuples()):
        assert line.split()[:3] == [row.path, str(row.scored), f"{row.nll:.6f}"]
    assert "FileNotFoundError" in lines[4]
    assert "1 document(s) could not be scored" in captured.err
    out = tmp_path / "scores.parquet"
    assert main(["score", model_dir, *files, "--scheduler", address, "--out", str(out), "--allow-errors"]) == 0
    captured = capsys.readouterr()
    assert "4 documents" in captured.out and "scoring" in captured.err  # the progress bar
    pd.testing.assert_frame_equal(pd.read_parquet(out), expected)


def test_cli_local_cluster(model_dir, tmp_path, capsys):
    np.save(tmp_path / "d.npy", _docs(9, [50])[0])
    out = tmp_path / "s.parquet"
    assert main(["score", model_dir, str(tmp_path / "d.npy"), "--local", "1", "--out", str(out),
                 "--no-progress"]) == 0
    pd.testing.assert_frame_equal(pd.read_parquet(out), gd.score([str(tmp_path / "d.npy")], model_dir))


def test_cli_unreachable_scheduler(model_dir, tmp_path, capsys):
    np.save(tmp_path / "d.npy", np.arange(5))
    t0 = time.monotonic()
    assert main(["score", model_dir, str(tmp_path / "d.npy"), "--scheduler", "tcp://127.0.0.1:9",
                 "--connect-timeout", "1"]) == 2
    assert "cannot reach a Dask scheduler at 'tcp://127.0.0.1:9'" in capsys.readouterr().err
    assert time.monotonic() - t0 < 15


# ------------------------------------------------------------------------------------------
# last: a worker dies in the middle of a run

def test_worker_killed_mid_run_loses_nothing(client, model_dir):
    docs = _docs(10, [64] * 100)
    expected = gd.score(docs, model_dir, batch_tokens=64)  # one process
    pids = client.run(os.getpid)
    result = {}

    def run():
        try:
            result["df"] = gd.score(docs, model_dir, client=client, batch_tokens=64, timeout=WAIT)
        except BaseException as exc:  # reported below
            result["error"] = exc

    worker = threading.Thread(target=run)
    worker.start()
    victim, deadline = None, time.monotonic() + 30
    while victim is None and time.monotonic() < deadline:
        busy = [w for w, keys in client.processing().items() if keys]
        if busy:
            victim = busy[0]
        else:
            time.sleep(0.005)
    assert victim is not None, "no worker ever had a task"
    assert worker.is_alive(), "the run was over before the kill"
    os.kill(pids[victim], signal.SIGKILL)
    worker.join(WAIT + 30)
    assert not worker.is_alive()
    assert "error" not in result, result.get("error")
    pd.testing.assert_frame_equal(result["df"], expected)
    assert victim not in client.scheduler_info()["workers"]  # it really died
