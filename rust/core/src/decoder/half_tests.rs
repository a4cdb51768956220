//! 16-bit weights: a bfloat16 / float16 model computes, bit for bit, what the float32 model
//! with its weights rounded to that format computes, for every kernel and thread count, in the
//! forward pass and in cached decoding.

use super::*;
use crate::half::{Bf16, HalfFormat, F16};
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

/// Whether a tensor of this kind is stored 16-bit.
fn is_half(kind: &str) -> bool {
    !matches!(kind, "bias" | "ln_weight" | "ln_bias")
}

fn rounded(w: &Weights, fmt: WeightFormat) -> Weights {
    w.iter()
        .map(|(n, s, k, v)| {
            let v = if is_half(k) {
                v.iter().map(|&x| crate::half::round_f32(x, fmt)).collect()
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

fn check_format(fmt: WeightFormat) {
    for (tied, sinusoidal) in [(true, false), (false, true)] {
        let cfg = config(tied, sinusoidal);
        let w = weights(&cfg, 11);
        let r = rounded(&w, fmt);
        let half = Model::with_format(cfg.clone(), &map(&w), fmt, None).unwrap();
        let want = Model::new(cfg.clone(), &map(&r)).unwrap();
        assert_eq!(half.weight_format(), fmt);
        // Export gives the rounded weights back, widened.
        for ((n, _, v), (n2, _, _, v2)) in half.export().iter().zip(&r) {
            assert_eq!(n, n2);
            assert!(
                v.iter().zip(v2).all(|(a, b)| a.to_bits() == b.to_bits()),
                "{n}"
            );
        }
        assert!(
            half.nbytes() * 10 < want.nbytes() * 6,
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
                    forward(&half, &ids, b) == reference,
                    "{fmt:?} {k:?} {threads} threads tied={tied}"
                );
            }
        }
        crate::kernels::set_kernel(None).unwrap();
        crate::threads::set_num_threads(before).unwrap();
        // Cached decoding reproduces the forward pass.
        let v = cfg.vocab_size;
        let mut cache = half.new_cache(b);
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
        half.run(&req, Some(&mut cache), &|| Ok(())).unwrap();
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
            let out = half.run(&req, Some(&mut cache), &|| Ok(())).unwrap().logits;
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
    check_format(WeightFormat::Bf16);
}

#[test]
fn f16_model_equals_rounded_f32_model() {
    check_format(WeightFormat::F16);
}

/// Large tensors given as 16-bit patterns through `fetch` build the same model as rounding
/// the float32 weights; the float32 map then needs only the small tensors.
#[test]
fn fetched_patterns_build_the_same_model() {
    fn bits_of<H: HalfFormat>(v: &[f32]) -> Vec<u16> {
        v.iter().map(|&x| H::from_f32(x).to_bits()).collect()
    }
    for fmt in [WeightFormat::Bf16, WeightFormat::F16] {
        let cfg = config(false, false);
        let w = weights(&cfg, 12);
        let small: Weights = w.iter().filter(|t| !is_half(t.2)).cloned().collect();
        let fetch = |spec: &TensorSpec| -> Result<Option<Vec<u16>>> {
            let t = w.iter().find(|t| t.0 == spec.name).unwrap();
            Ok(Some(match fmt {
                WeightFormat::Bf16 => bits_of::<Bf16>(&t.3),
                _ => bits_of::<F16>(&t.3),
            }))
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
}
