//! The Llama family's promises: a decode step with the cache equals the full forward, a prefix
//! equals the prefix of the full forward, batch rows equal rows alone, the bits are the same
//! for every kernel and thread count, 16-bit weights equal the rounded float32 model,
//! grouped-query attention equals multi-head attention with the K/V heads repeated, and the
//! stacked Q/K/V product exports the tensors it was given.

use super::*;
use crate::formats::{Bf16, Float16Format, F16};
use rand::{Rng, SeedableRng};

pub(super) type Weights<T> = Vec<(String, Vec<usize>, &'static str, Vec<T>)>;

pub(super) fn config(n_heads: usize, n_kv_heads: usize, scaling: RopeScaling) -> Config {
    Config {
        family: Family::Llama,
        vocab_size: 89,
        n_ctx: 256,
        d_model: 48,
        n_heads,
        n_kv_heads,
        d_head: 16, // q width 64 != d_model: head_dim given by the config
        n_layers: 2,
        d_ff: 80,
        positions: Positions::Rotary(Rope {
            theta: 500.0, // small, so that positions far apart differ visibly
            scaling,
        }),
        tied: false,
        ln_eps: 1e-6,
        attn_bias: true,
        attn_out_bias: false,
        mlp_bias: false,
        ln_affine: true,
    }
}

pub(super) fn weights<T: Float>(cfg: &Config, seed: u64) -> Weights<T> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    schema(cfg)
        .into_iter()
        .map(|t| {
            let len: usize = t.shape.iter().product();
            let scale = if t.shape.len() == 2 {
                1.5 / (t.shape[1] as f64).sqrt()
            } else {
                0.2
            };
            let base = if t.kind == "ln_weight" { 1.0 } else { 0.0 };
            let vals = (0..len)
                .map(|_| T::from_f64(base + scale * rng.gen_range(-1.7..1.7)))
                .collect();
            (t.name, t.shape, t.kind, vals)
        })
        .collect()
}

pub(super) fn map<T: Float>(w: &Weights<T>) -> HashMap<String, Tensor<'_, T>> {
    w.iter()
        .map(|(n, s, _, v)| {
            (
                n.clone(),
                Tensor {
                    shape: s.clone(),
                    data: v.as_slice(),
                },
            )
        })
        .collect()
}

fn run<T: Float>(
    m: &Model<T>,
    ids: &[u32],
    batch: usize,
    cache: Option<&mut KvCache<T>>,
    logits: Logits,
) -> Vec<T> {
    let req = Request {
        ids,
        batch,
        t_new: ids.len() / batch,
        logits,
        causal: true,
        want_hidden: false,
    };
    m.run(&req, cache, &|| Ok(())).unwrap().logits
}

fn bits<T: Float>(v: &[T]) -> Vec<u64> {
    v.iter().map(|x| x.to_f64().to_bits()).collect()
}

fn ids(n: usize, vocab: usize, seed: u64) -> Vec<u32> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n).map(|_| rng.gen_range(0..vocab as u32)).collect()
}

pub(super) fn llama3() -> RopeScaling {
    RopeScaling::Llama3 {
        factor: 8.0,
        low_freq_factor: 1.0,
        high_freq_factor: 4.0,
        original_max_position_embeddings: 64.0,
    }
}

fn decode_matches_forward<T: Float>() {
    for (nh, nkv, scaling) in [
        (4, 2, RopeScaling::Default),
        (4, 1, llama3()),
        (4, 4, RopeScaling::Linear { factor: 2.0 }),
    ] {
        let c = config(nh, nkv, scaling);
        let w = weights::<T>(&c, 1);
        let m = Model::new(c.clone(), &map(&w)).unwrap();
        let t = 150; // crosses key-block boundaries
        let ids = ids(t, c.vocab_size, 2);
        let full = run(&m, &ids, 1, None, Logits::All);
        let v = c.vocab_size;
        let mut cache = m.new_cache(1);
        let pre = run(&m, &ids[..5], 1, Some(&mut cache), Logits::All);
        assert_eq!(bits(&pre), bits(&full[..5 * v]));
        for p in 5..t {
            let step = run(&m, &ids[p..p + 1], 1, Some(&mut cache), Logits::Last);
            assert_eq!(
                bits(&step),
                bits(&full[p * v..(p + 1) * v]),
                "{nkv} kv heads, position {p}"
            );
        }
        // The cache holds n_kv_heads heads per layer and sequence.
        assert_eq!(cache.n_heads, nkv);
        assert_eq!(cache.layers[0].len(), nkv);
        // A prefix's logits are the first rows of the longer run; a later token changes
        // nothing before it.
        let pre = run(&m, &ids[..70], 1, None, Logits::All);
        assert_eq!(bits(&pre), bits(&full[..70 * v]));
        let mut changed = ids.clone();
        changed[100] = (changed[100] + 1) % v as u32;
        let other = run(&m, &changed, 1, None, Logits::All);
        assert_eq!(bits(&other[..100 * v]), bits(&full[..100 * v]));
        assert_ne!(
            bits(&other[100 * v..101 * v]),
            bits(&full[100 * v..101 * v])
        );
    }
}

#[test]
fn llama_decode_matches_forward_f32() {
    decode_matches_forward::<f32>();
}

#[test]
fn llama_decode_matches_forward_f64() {
    decode_matches_forward::<f64>();
}

/// Rows of a batch equal the rows run alone, for every kernel and thread count.
#[test]
fn llama_batch_rows_kernels_and_threads_agree() {
    let c = config(4, 2, llama3());
    let w = weights::<f32>(&c, 3);
    let m = Model::new(c.clone(), &map(&w)).unwrap();
    let (b, t) = (3, 77);
    let ids = ids(b * t, c.vocab_size, 4);
    let before = crate::threads::num_threads();
    crate::threads::set_num_threads(2).unwrap();
    let all = run(&m, &ids, b, None, Logits::All);
    for k in crate::kernels::available() {
        for threads in 1..=3 {
            crate::threads::set_num_threads(threads).unwrap();
            crate::kernels::set_kernel(Some(k)).unwrap();
            let got = run(&m, &ids, b, None, Logits::All);
            assert!(bits(&got) == bits(&all), "{k:?} on {threads} threads");
        }
    }
    crate::kernels::set_kernel(None).unwrap();
    crate::threads::set_num_threads(before).unwrap();
    let v = c.vocab_size;
    for r in 0..b {
        let row = run(&m, &ids[r * t..(r + 1) * t], 1, None, Logits::All);
        assert_eq!(
            bits(&row),
            bits(&all[r * t * v..(r + 1) * t * v]),
            "row {r}"
        );
    }
}

/// A grouped-query model computes exactly what the multi-head model with each key/value head
/// repeated for its group computes.
#[test]
fn grouped_query_attention_equals_repeated_heads() {
    fn repeat_heads(w: &Weights<f64>, cfg: &Config, group: usize) -> Weights<f64> {
        let dh = cfg.d_head;
        w.iter()
            .map(|(n, s, k, v)| {
                if *k != "k_proj"
                    && *k != "v_proj"
                    && !n.contains("k_proj")
                    && !n.contains("v_proj")
                {
                    return (n.clone(), s.clone(), *k, v.clone());
                }
                // (kv, d) weights or (kv,) biases: each head's dh rows repeated `group` times.
                let width = if s.len() == 2 { s[1] } else { 1 };
                let mut out = Vec::new();
                for head in v.chunks(dh * width) {
                    for _ in 0..group {
                        out.extend_from_slice(head);
                    }
                }
                let mut shape = s.clone();
                shape[0] *= group;
                (n.clone(), shape, *k, out)
            })
            .collect()
    }
    for nkv in [1, 2] {
        let gqa = config(4, nkv, RopeScaling::Default);
        let mha = Config {
            n_kv_heads: 4,
            ..gqa.clone()
        };
        let w = weights::<f64>(&gqa, 5);
        let wr = repeat_heads(&w, &gqa, 4 / nkv);
        let a = Model::new(gqa.clone(), &map(&w)).unwrap();
        let b = Model::new(mha, &map(&wr)).unwrap();
        let ids = ids(100, gqa.vocab_size, 6);
        assert_eq!(
            bits(&run(&a, &ids, 1, None, Logits::All)),
            bits(&run(&b, &ids, 1, None, Logits::All)),
            "{nkv} kv heads"
        );
        // and the cache is smaller by the group size
        let (mut ca, mut cb) = (a.new_cache(1), b.new_cache(1));
        run(&a, &ids, 1, Some(&mut ca), Logits::Last);
        run(&b, &ids, 1, Some(&mut cb), Logits::Last);
        assert_eq!(ca.nbytes() * (4 / nkv), cb.nbytes());
    }
}

/// Export gives every tensor back under its name and shape, bit for bit (the stacked Q/K/V
/// product split again, the `nn.Linear` weights transposed back), and a model built from the
/// export computes the same bits.
#[test]
fn llama_export_round_trips() {
    for tied in [false, true] {
        let c = Config {
            tied,
            mlp_bias: true,
            attn_out_bias: true,
            ..config(4, 2, RopeScaling::Default)
        };
        let w = weights::<f32>(&c, 7);
        let m = Model::new(c.clone(), &map(&w)).unwrap();
        let out = m.export();
        assert_eq!(out.len(), w.len());
        for ((n, s, v), (n2, s2, _, v2)) in out.iter().zip(&w) {
            assert_eq!((n, s), (n2, s2));
            assert!(bits(v) == bits(v2), "{n}");
        }
        let ids = ids(40, c.vocab_size, 8);
        let again: Weights<f32> = out
            .into_iter()
            .zip(&w)
            .map(|((n, s, v), (_, _, k, _))| (n, s, *k, v))
            .collect();
        let m2 = Model::new(c.clone(), &map(&again)).unwrap();
        assert_eq!(
            bits(&run(&m, &ids, 1, None, Logits::All)),
            bits(&run(&m2, &ids, 1, None, Logits::All))
        );
    }
}

/// bfloat16 and float16 weights compute what the float32 model with its weights rounded
/// computes, for every kernel and in cached decoding.
fn half_model_equals_rounded_f32_model<W: Float16Format>() {
    let fmt = WeightFormat::named(W::FORMAT_NAME).unwrap();
    let c = config(4, 2, RopeScaling::Default);
    let w = weights::<f32>(&c, 9);
    let stored = |k: &str| !matches!(k, "bias" | "ln_weight" | "ln_bias");
    let r: Weights<f32> = w
        .iter()
        .map(|(n, s, k, v)| {
            let v = if stored(k) {
                v.iter().map(|&x| W::from_f32(x).to_f32()).collect()
            } else {
                v.clone()
            };
            (n.clone(), s.clone(), *k, v)
        })
        .collect();
    let half = Model::with_format(c.clone(), &map(&w), fmt, None).unwrap();
    let want = Model::new(c.clone(), &map(&r)).unwrap();
    let ids = ids(2 * 60, c.vocab_size, 10);
    let reference = run(&want, &ids, 2, None, Logits::All);
    for k in crate::kernels::available() {
        crate::kernels::set_kernel(Some(k)).unwrap();
        assert!(
            bits(&run(&half, &ids, 2, None, Logits::All)) == bits(&reference),
            "{} {k:?}",
            W::FORMAT_NAME
        );
    }
    crate::kernels::set_kernel(None).unwrap();
    let v = c.vocab_size;
    let mut cache = half.new_cache(1);
    run(&half, &ids[..3], 1, Some(&mut cache), Logits::Last);
    for p in 3..60 {
        let step = run(&half, &ids[p..p + 1], 1, Some(&mut cache), Logits::Last);
        assert_eq!(
            bits(&step),
            bits(&reference[p * v..(p + 1) * v]),
            "{} {p}",
            W::FORMAT_NAME
        );
    }
    // 16-bit patterns fetched one tensor at a time build the same model.
    let fetch = |spec: &TensorSpec| -> Result<Option<Fetched>> {
        let t = w.iter().find(|t| t.0 == spec.name).unwrap();
        Ok(Some(Fetched::Bits16(
            fmt,
            t.3.iter().map(|&x| W::from_f32(x).to_bits()).collect(),
        )))
    };
    let small: Weights<f32> = w.iter().filter(|t| !stored(t.2)).cloned().collect();
    let fetched = Model::with_format(c.clone(), &map(&small), fmt, Some(&fetch)).unwrap();
    assert!(bits(&run(&fetched, &ids, 2, None, Logits::All)) == bits(&reference));
}

#[test]
fn llama_bf16_model_equals_rounded_f32_model() {
    half_model_equals_rounded_f32_model::<Bf16>();
}

#[test]
fn llama_f16_model_equals_rounded_f32_model() {
    half_model_equals_rounded_f32_model::<F16>();
}

#[test]
fn llama_bad_configs_are_errors() {
    let ok = config(4, 2, RopeScaling::Default);
    assert!(validate(&ok).is_ok());
    let e = validate(&Config {
        n_kv_heads: 3,
        ..ok.clone()
    });
    assert!(matches!(e, Err(crate::Error::Value(ref s)) if s.contains("multiple of n_kv_heads")));
    let e = validate(&Config {
        d_head: 15,
        ..ok.clone()
    });
    assert!(matches!(e, Err(crate::Error::Value(ref s)) if s.contains("even head width")));
    let e = validate(&Config {
        positions: Positions::Learned,
        ..ok.clone()
    });
    assert!(e.is_err());
    // A tensor of the wrong shape names itself.
    let w = weights::<f32>(&ok, 1);
    let mut bad = w.clone();
    let i = bad
        .iter()
        .position(|t| t.0.ends_with("layers.1.self_attn.k_proj.weight"))
        .unwrap();
    bad[i].1 = vec![16, 48];
    let e = Model::new(ok.clone(), &map(&bad));
    assert!(
        matches!(e, Err(crate::Error::Value(ref s)) if s.contains("layers.1.self_attn.k_proj.weight"))
    );
    // Beyond the context: an error, not a position without a table.
    let m = Model::new(ok.clone(), &map(&w)).unwrap();
    let long = vec![1u32; 257];
    let req = Request {
        ids: &long,
        batch: 1,
        t_new: 257,
        logits: Logits::Last,
        causal: true,
        want_hidden: false,
    };
    assert!(m.run(&req, None, &|| Ok(())).is_err());
}

/// `(r, c)` values of a Llama weight (`nn.Linear (n, k)`, the embedding, the head: every run
/// along a row) quantized block by block by the format's reference quantizer and dequantized
/// by its definition; and the file blocks.
fn dequantized_rows<W: crate::formats::BlockFormat>(
    v: &[f32],
    r: usize,
    c: usize,
) -> (Vec<f32>, Vec<u8>) {
    use crate::formats::block::QK;
    let mut out = Vec::with_capacity(r * c);
    let mut blocks = Vec::new();
    for row in v.chunks(c) {
        for x in row.chunks(QK) {
            let mut b = vec![0u8; W::FILE_BLOCK_BYTES];
            W::quantize_block(x, &mut b).unwrap();
            let d = F16(u16::from_le_bytes([b[0], b[1]])).to_f32();
            out.extend((0..x.len()).map(|i| W::weight(d, W::q_at(&b[2..], i))));
            blocks.extend(b);
        }
    }
    (out, blocks)
}

/// A Llama model with q8_0 / q4_0 weights equals the float32 model of its dequantized weights
/// (stacked Q/K/V and SwiGLU included, widths that are and are not multiples of 32), for every
/// kernel and in cached decoding; file blocks fetched a tensor at a time build the same model;
/// parts of the stacked product fetched in different forms are each stored as alone.
#[test]
fn llama_block_model_equals_dequantized_f32_model() {
    fn check<W: crate::formats::BlockFormat>()
    where
        f32: crate::kernels::KernelsFor<W>,
    {
        let fmt = WeightFormat::named(W::FORMAT_NAME).unwrap();
        let wide = Config {
            d_model: 64,
            d_ff: 96,
            tied: true,
            ..config(4, 2, RopeScaling::Default)
        };
        for c in [wide, config(4, 2, RopeScaling::Default)] {
            let w = weights::<f32>(&c, 21);
            let stored = |k: &str| !matches!(k, "bias" | "ln_weight" | "ln_bias");
            let r: Weights<f32> = w
                .iter()
                .map(|(n, s, k, v)| {
                    let v = if stored(k) {
                        dequantized_rows::<W>(v, s[0], s[1]).0
                    } else {
                        v.clone()
                    };
                    (n.clone(), s.clone(), *k, v)
                })
                .collect();
            let q = Model::with_format(c.clone(), &map(&w), fmt, None).unwrap();
            let want = Model::new(c.clone(), &map(&r)).unwrap();
            let ids = ids(2 * 40, c.vocab_size, 12);
            let reference = run(&want, &ids, 2, None, Logits::All);
            for k in crate::kernels::available() {
                crate::kernels::set_kernel(Some(k)).unwrap();
                assert!(
                    bits(&run(&q, &ids, 2, None, Logits::All)) == bits(&reference),
                    "{} {k:?} d={}",
                    W::FORMAT_NAME,
                    c.d_model
                );
            }
            crate::kernels::set_kernel(None).unwrap();
            let v = c.vocab_size;
            let mut cache = q.new_cache(1);
            run(&q, &ids[..3], 1, Some(&mut cache), Logits::Last);
            for p in 3..40 {
                let step = run(&q, &ids[p..p + 1], 1, Some(&mut cache), Logits::Last);
                assert_eq!(bits(&step), bits(&reference[p * v..(p + 1) * v]), "{p}");
            }
            // File blocks, one tensor at a time; the stacked parts' blocks come back apart.
            let fetch = |spec: &TensorSpec| -> Result<Option<Fetched>> {
                let t = w.iter().find(|t| t.0 == spec.name).unwrap();
                Ok(Some(Fetched::Blocks(
                    fmt,
                    dequantized_rows::<W>(&t.3, t.1[0], t.1[1]).1,
                )))
            };
            let small: Weights<f32> = w.iter().filter(|t| !stored(t.2)).cloned().collect();
            let fetched = Model::with_format(c.clone(), &map(&small), fmt, Some(&fetch)).unwrap();
            assert!(bits(&run(&fetched, &ids, 2, None, Logits::All)) == bits(&reference));
            for t in w
                .iter()
                .filter(|t| t.0.contains("layers.1.") && stored(t.2))
            {
                let (f, b) = fetched.stored_blocks(&t.0).expect("held in blocks");
                assert_eq!(f, fmt);
                assert!(
                    b == dequantized_rows::<W>(&t.3, t.1[0], t.1[1]).1,
                    "{}",
                    t.0
                );
            }
            // Mixed forms for Q, K, V: blocks, float32 kept, values to quantize.
            let mixed = |spec: &TensorSpec| -> Result<Option<Fetched>> {
                let t = w.iter().find(|t| t.0 == spec.name).unwrap();
                Ok(match t.2 {
                    "q_proj" => Some(Fetched::Blocks(
                        fmt,
                        dequantized_rows::<W>(&t.3, t.1[0], t.1[1]).1,
                    )),
                    "k_proj" => Some(Fetched::Full),
                    _ => None,
                })
            };
            let m = Model::with_format(c.clone(), &map(&w), fmt, Some(&mixed)).unwrap();
            let mut r2 = r.clone();
            for (t, orig) in r2.iter_mut().zip(&w) {
                if t.2 == "k_proj" {
                    t.3 = orig.3.clone();
                }
            }
            let want2 = Model::new(c.clone(), &map(&r2)).unwrap();
            assert!(
                bits(&run(&m, &ids, 2, None, Logits::All))
                    == bits(&run(&want2, &ids, 2, None, Logits::All))
            );
            let held = m.stored_tensors();
            assert!(held
                .iter()
                .any(|(n, f, _)| n.ends_with("q_proj.weight") && *f == WeightFormat::Full));
            assert!(held
                .iter()
                .any(|(n, f, _)| n.ends_with("o_proj.weight") && *f == fmt));
        }
    }
    check::<crate::formats::Q8_0>();
    check::<crate::formats::Q4_0>();
}
