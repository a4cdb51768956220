"""Large logits arrays hand their memory back to the model when Python drops them, and the
next forward writes into it: results must be the same bits as from fresh memory, and an
array (or a view of one) still in use must never be written to."""

import gc

import numpy as np
import pytest

import gptcore


def big_model(dtype):
    # vocab 4096: 300 positions of logits take 4.9 MB (float32), above the pooling threshold.
    cfg = gptcore.GPTConfig(vocab_size=4096, n_ctx=512, d_model=64, n_heads=4, n_layers=2, d_ff=256)
    return gptcore.Model(gptcore.init_weights(cfg, seed=3, scheme="gpt2"), dtype=dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_reused_memory_gives_the_same_bits(dtype):
    model = big_model(dtype)
    fresh = big_model(dtype)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 4096, size=300)
    want = fresh.forward(ids)
    first = model.forward(ids)
    address = first.__array_interface__["data"][0]
    np.testing.assert_array_equal(first, want)
    first[:] = np.nan  # the caller may scribble on its array before dropping it
    del first
    gc.collect()
    again = model.forward(ids)
    assert again.__array_interface__["data"][0] == address, "the dropped array's memory is reused"
    np.testing.assert_array_equal(again, want)
    # A shorter pass (more than half the size) reuses it too; a batch gives the same rows.
    del again
    short = model.forward(ids[:200])
    np.testing.assert_array_equal(short, want[:200])
    del short
    batch = model.forward(np.stack([ids[:160], ids[:160]]))
    np.testing.assert_array_equal(batch[1], want[:160])


def test_arrays_in_use_are_never_overwritten():
    model = big_model("float32")
    rng = np.random.default_rng(1)
    a_ids, b_ids = rng.integers(0, 4096, size=(2, 300))
    a = model.forward(a_ids)
    a_copy = a.copy()
    row = a[7]  # a view keeps the whole buffer alive
    del a
    gc.collect()
    for _ in range(3):
        b = model.forward(b_ids)
        assert not np.shares_memory(b, row)
        del b
    np.testing.assert_array_equal(row, a_copy[7])
    kept = model.forward(a_ids)
    other = model.forward(b_ids)
    assert not np.shares_memory(kept, other)
    np.testing.assert_array_equal(kept, a_copy)


def test_arrays_outlive_their_model():
    model = big_model("float64")
    ids = np.arange(300) % 4096
    out = model.forward(ids)
    want = out.copy()
    del model
    gc.collect()
    np.testing.assert_array_equal(out, want)
    assert out.flags["WRITEABLE"]
    del out  # the pool is gone with the model: the memory is simply freed
    gc.collect()
