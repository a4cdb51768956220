//! Stored weights: a bfloat16 / float16 model computes, bit for bit, what the float32 model
//! with its weights rounded to that format computes, for every kernel and thread count, in the
//! forward pass and in cached decoding.

use super::*;
use crate::formats::{Bf16, Float16Format, F16};
use rand::{Rng, SeedableRng};

type Weights = Vec<(String, Vec<usize>, &'static str, Vec<f32>)>;

fn weights(cfg: &Config, seed: u64) -> Weights {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    schema(cfg)
        .into_iter()
        .map(|t| {
            let len: usize = t.shape.iter().product();
            let ln_w = t.kind == "ln_weight";
            let vals = (0..len)
                .map(|_| {
                    let x: f32 = rng.gen_range(-1.0..1.0);
                    if ln_w {
                        1.0 + 0.1 * x
                    } else {
                        0.3 * x
                    }
                })
                .collect();
            (t.name, t.shape, t.kind, vals)
        })
        .collect()
}

/// Whether a tensor of this kind is stored in the model's format.
fn is_stored(kind: &str) -> bool {
    !matches!(kind, "bias" | "ln_weight" | "ln_bias")
}

fn rounded<W: Float16Format>(w: &Weights) -> Weights {
    w.iter()
        .map(|(n, s, k, v)| {
            let v = if is_stored(k) {
                v.iter().map(|&x| W::from_f32(x).to_f32()).collect()
            } else {
                v.clone()
            };
            (n.clone(), s.clone(), *k, v)
        })
        .collect()
}

fn map(w: &Weights) -> HashMap<String, Tensor<'_, f32>> {
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

fn forward(m: &Model<f32>, ids: &[u32], batch: usize) -> Vec<u32> {
    let req = Request {
        ids,
        batch,
        t_new: ids.len() / batch,
        logits: Logits::All,
        causal: true,
        want_hidden: false,
    };
    let out = m.run(&req, None, &|| Ok(())).unwrap();
    out.logits.iter().map(|x| x.to_bits()).collect()
}

fn config(tied: bool, sinusoidal: bool) -> Config {
    Config {
        family: Family::Gpt2,
        vocab_size: 101,
        n_ctx: 96,
        d_model: 64,
        n_heads: 4,
        n_kv_heads: 4,
        d_head: 16,
        n_layers: 2,
        d_ff: 160,
        positions: if sinusoidal {
            Positions::Sinusoidal
        } else {
            Positions::Learned
        },
        tied,
        ln_eps: 1e-5,
        attn_bias: true,
        attn_out_bias: true,
        mlp_bias: true,
        ln_affine: true,
    }
}

fn check_format<W: Float16Format>() {
    let fmt = WeightFormat::named(W::FORMAT_NAME).unwrap();
    for (tied, sinusoidal) in [(true, false), (false, true)] {
        let cfg = config(tied, sinusoidal);
        let w = weights(&cfg, 11);
        let r = rounded::<W>(&w);
        let stored = Model::with_format(cfg.clone(), &map(&w), fmt, None).unwrap();
        let want = Model::new(cfg.clone(), &map(&r)).unwrap();
        assert_eq!(stored.weight_format(), fmt);
        // Export gives the rounded weights back, widened.
        for ((n, _, v), (n2, _, _, v2)) in stored.export().iter().zip(&r) {
            assert_eq!(n, n2);
            assert!(
                v.iter().zip(v2).all(|(a, b)| a.to_bits() == b.to_bits()),
                "{n}"
            );
        }
        assert!(
            stored.nbytes() * 10 < want.nbytes() * 6,
            "16-bit storage is smaller"
        );
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let (b, t) = (2, 70);
        let ids: Vec<u32> = (0..b * t).map(|_| rng.gen_range(0..101)).collect();
        let before = crate::threads::num_threads();
        crate::threads::set_num_threads(2).unwrap();
        let reference = forward(&want, &ids, b);
        for k in crate::kernels::available() {
            for threads in 1..=3 {
                crate::threads::set_num_threads(threads).unwrap();
                crate::kernels::set_kernel(Some(k)).unwrap();
                assert!(
                    forward(&stored, &ids, b) == reference,
                    "{fmt:?} {k:?} {threads} threads tied={tied}"
                );
            }
        }
        crate::kernels::set_kernel(None).unwrap();
        crate::threads::set_num_threads(before).unwrap();
        // Cached decoding reproduces the forward pass.
        let v = cfg.vocab_size;
        let mut cache = stored.new_cache(b);
        let pre_ids: Vec<u32> = (0..b)
            .flat_map(|r| ids[r * t..r * t + 3].to_vec())
            .collect();
        let req = Request {
            ids: &pre_ids,
            batch: b,
            t_new: 3,
            logits: Logits::Last,
            causal: true,
            want_hidden: false,
        };
        stored.run(&req, Some(&mut cache), &|| Ok(())).unwrap();
        for p in 3..t {
            let step: Vec<u32> = (0..b).map(|r| ids[r * t + p]).collect();
            let req = Request {
                ids: &step,
                batch: b,
                t_new: 1,
                logits: Logits::Last,
                causal: true,
                want_hidden: false,
            };
            let out = stored
                .run(&req, Some(&mut cache), &|| Ok(()))
                .unwrap()
                .logits;
            for r in 0..b {
                let row = (r * t + p) * v;
                assert!(
                    out[r * v..(r + 1) * v]
                        .iter()
                        .zip(&reference[row..row + v])
                        .all(|(a, &b)| a.to_bits() == b),
                    "decode position {p} row {r}"
                );
            }
        }
    }
}

#[test]
fn bf16_model_equals_rounded_f32_model() {
    check_format::<Bf16>();
}

#[test]
fn f16_model_equals_rounded_f32_model() {
    check_format::<F16>();
}

/// Large tensors given as 16-bit patterns through `fetch` build the same model as rounding
/// the float32 weights; the float32 map then needs only the small tensors.
#[test]
fn fetched_patterns_build_the_same_model() {
    fn check<W: Float16Format>() {
        let fmt = WeightFormat::named(W::FORMAT_NAME).unwrap();
        let cfg = config(false, false);
        let w = weights(&cfg, 12);
        let small: Weights = w.iter().filter(|t| !is_stored(t.2)).cloned().collect();
        let fetch = |spec: &TensorSpec| -> Result<Option<Vec<u16>>> {
            let t = w.iter().find(|t| t.0 == spec.name).unwrap();
            Ok(Some(
                t.3.iter().map(|&x| W::from_f32(x).to_bits()).collect(),
            ))
        };
        let a = Model::with_format(cfg.clone(), &map(&small), fmt, Some(&fetch)).unwrap();
        let b = Model::with_format(cfg.clone(), &map(&w), fmt, None).unwrap();
        let ids: Vec<u32> = (0..40).map(|i| (i * 7) % 101).collect();
        assert!(forward(&a, &ids, 1) == forward(&b, &ids, 1));
        // A fetched tensor of the wrong length is an error naming it.
        let bad = |spec: &TensorSpec| -> Result<Option<Vec<u16>>> {
            Ok(Some(vec![0u16; spec.shape.iter().product::<usize>() - 1]))
        };
        let e = Model::with_format(cfg.clone(), &map(&small), fmt, Some(&bad));
        assert!(matches!(e, Err(crate::Error::Value(ref s)) if s.contains("wte.weight")));
    }
    check::<Bf16>();
    check::<F16>();
}

/// 16-bit patterns for a format that has none, or of the wrong count, are errors (never a
/// panic); every registered format packs its patterns, which unpack to their widened values.
#[test]
fn patterns_for_the_wrong_format_or_shape_are_errors() {
    let bits: Vec<u16> = (0..6u16).map(|i| 0x3f80 + i).collect();
    let e = Packed::<f32>::pack_bits(&bits, 2, 3, false, WeightFormat::Full);
    assert!(matches!(e, Err(crate::Error::Value(ref s)) if s.contains("16-bit patterns")));
    let e = storage::<f64>(WeightFormat::Full).table_bits(bits.clone());
    assert!(matches!(e, Err(crate::Error::Value(ref s)) if s.contains("16-bit patterns")));
    for f in crate::formats::StoredFormat::all() {
        let fmt = WeightFormat::Stored(*f);
        for (k, n) in [(2, 2), (3, 3), (7, 1)] {
            let e = Packed::<f32>::pack_bits(&bits, k, n, false, fmt);
            assert!(
                matches!(e, Err(crate::Error::Value(ref s)) if s.contains("(")),
                "{k}x{n}"
            );
        }
        let widen = f.bits16().unwrap().widen;
        for transposed in [false, true] {
            let p = Packed::<f32>::pack_bits(&bits, 2, 3, transposed, fmt).unwrap();
            assert_eq!((p.rows(), p.cols(), p.format()), (2, 3, fmt));
            let want: Vec<f32> = if transposed {
                // The patterns are (3, 2), read transposed.
                (0..6)
                    .map(|x| widen(&[bits[(x % 3) * 2 + x / 3]])[0])
                    .collect()
            } else {
                widen(&bits)
            };
            assert!(p
                .unpack()
                .iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits()));
        }
    }
}
