//! Stored weights: a bfloat16 / float16 / q8_0 / q4_0 model computes, bit for bit, what the
//! float32 model with its weights rounded (quantized and dequantized) to that format computes,
//! for every kernel and thread count, in the forward pass and in cached decoding.

use super::*;
use crate::formats::block::QK;
use crate::formats::{Bf16, BlockFormat, Float16Format, F16, Q4_0, Q8_0};
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

/// `x` (live values of one block) quantized by the format's reference quantizer and
/// dequantized by its definition (`d * value(q)`), independently of any packing.
fn dequantized_block<W: BlockFormat>(x: &[f32]) -> Vec<f32> {
    let mut b = vec![0u8; W::FILE_BLOCK_BYTES];
    W::quantize_block(x, &mut b).unwrap();
    let d = F16(u16::from_le_bytes([b[0], b[1]])).to_f32();
    (0..x.len())
        .map(|i| W::weight(d, W::q_at(&b[2..], i)))
        .collect()
}

/// A `(r, c)` tensor quantized in blocks along its rows (`along_rows`: down each column) or
/// along its columns.
fn dequantized<W: BlockFormat>(v: &[f32], r: usize, c: usize, along_rows: bool) -> Vec<f32> {
    let mut out = v.to_vec();
    let (runs, len) = if along_rows { (c, r) } else { (r, c) };
    let at = |run: usize, i: usize| if along_rows { i * c + run } else { run * c + i };
    for run in 0..runs {
        for b0 in (0..len).step_by(QK) {
            let live = QK.min(len - b0);
            let x: Vec<f32> = (0..live).map(|i| v[at(run, b0 + i)]).collect();
            for (i, y) in dequantized_block::<W>(&x).into_iter().enumerate() {
                out[at(run, b0 + i)] = y;
            }
        }
    }
    out
}

/// The float32 model a block-format model equals: the matrices (Conv1D `(k, n)`: blocks down
/// the columns, along K), the head and the token embedding (`(V, d)`: along the rows) quantized
/// and dequantized; the position table, biases and LayerNorm parameters as they are.
fn rounded_blocks<W: BlockFormat>(w: &Weights) -> Weights {
    w.iter()
        .map(|(n, s, k, v)| {
            let v = match *k {
                "wte" | "lm_head" => dequantized::<W>(v, s[0], s[1], false),
                "c_attn" | "attn_proj" | "c_fc" | "mlp_proj" => {
                    dequantized::<W>(v, s[0], s[1], true)
                }
                _ => v.clone(),
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
    sized(tied, sinusoidal, 64, 160)
}

fn sized(tied: bool, sinusoidal: bool, d_model: usize, d_ff: usize) -> Config {
    Config {
        family: Family::Gpt2,
        vocab_size: 101,
        n_ctx: 96,
        d_model,
        n_heads: 4,
        n_kv_heads: 4,
        d_head: d_model / 4,
        n_layers: 2,
        d_ff,
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

/// Format `name`'s model against the float32 model of `round`ed weights, for `configs`, and
/// its bytes held at most `max_ratio` of the float32 model's.
fn check_format(name: &str, round: fn(&Weights) -> Weights, configs: &[Config], max_ratio: f64) {
    let fmt = WeightFormat::named(name).unwrap();
    for cfg in configs {
        let (tied, cfg) = (cfg.tied, cfg.clone());
        let w = weights(&cfg, 11);
        let r = round(&w);
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
            (stored.nbytes() as f64) < want.nbytes() as f64 * max_ratio,
            "{name}: {} bytes against float32's {}",
            stored.nbytes(),
            want.nbytes()
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

fn configs() -> Vec<Config> {
    vec![config(true, false), config(false, true)]
}

#[test]
fn bf16_model_equals_rounded_f32_model() {
    check_format("bfloat16", rounded::<Bf16>, &configs(), 0.6);
}

#[test]
fn f16_model_equals_rounded_f32_model() {
    check_format("float16", rounded::<F16>, &configs(), 0.6);
}

/// Block formats, also with widths that are no multiple of 32 (short last blocks, K = 48 and
/// 72); the small model's float32 biases, LayerNorm parameters and position table weigh more
/// than in a real one, hence the loose bounds on its bytes.
fn block_configs() -> Vec<Config> {
    let mut c = configs();
    c.push(sized(true, false, 48, 72));
    c.push(sized(false, false, 96, 40));
    c
}

#[test]
fn q8_0_model_equals_dequantized_f32_model() {
    check_format("q8_0", rounded_blocks::<Q8_0>, &block_configs(), 0.45);
}

#[test]
fn q4_0_model_equals_dequantized_f32_model() {
    check_format("q4_0", rounded_blocks::<Q4_0>, &block_configs(), 0.35);
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
        let fetch = |spec: &TensorSpec| -> Result<Option<Fetched>> {
            let t = w.iter().find(|t| t.0 == spec.name).unwrap();
            Ok(Some(Fetched::Bits16(
                fmt,
                t.3.iter().map(|&x| W::from_f32(x).to_bits()).collect(),
            )))
        };
        let a = Model::with_format(cfg.clone(), &map(&small), fmt, Some(&fetch)).unwrap();
        let b = Model::with_format(cfg.clone(), &map(&w), fmt, None).unwrap();
        let ids: Vec<u32> = (0..40).map(|i| (i * 7) % 101).collect();
        assert!(forward(&a, &ids, 1) == forward(&b, &ids, 1));
        // A fetched tensor of the wrong length is an error naming it.
        let bad = |spec: &TensorSpec| -> Result<Option<Fetched>> {
            Ok(Some(Fetched::Bits16(
                fmt,
                vec![0u16; spec.shape.iter().product::<usize>() - 1],
            )))
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
        if f.bits16().is_none() {
            let e = Packed::<f32>::pack_bits(&bits, 2, 3, false, fmt);
            assert!(matches!(e, Err(crate::Error::Value(ref s)) if s.contains("16-bit patterns")));
            continue;
        }
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

/// The file blocks of a tensor of `w` (runs along K: down a Conv1D matrix's columns, along a
/// table's or the head's rows).
fn file_blocks<W: BlockFormat>(t: &(String, Vec<usize>, &'static str, Vec<f32>)) -> Vec<u8> {
    let (s, v) = (&t.1, &t.3);
    let along_rows = !matches!(t.2, "wte" | "lm_head");
    let (runs, len) = if along_rows {
        (s[1], s[0])
    } else {
        (s[0], s[1])
    };
    let at = |run: usize, i: usize| {
        if along_rows {
            i * s[1] + run
        } else {
            run * s[1] + i
        }
    };
    let mut out = Vec::new();
    for run in 0..runs {
        for b0 in (0..len).step_by(QK) {
            let x: Vec<f32> = (b0..len.min(b0 + QK)).map(|i| v[at(run, i)]).collect();
            let mut b = vec![0u8; W::FILE_BLOCK_BYTES];
            W::quantize_block(&x, &mut b).unwrap();
            out.extend(b);
        }
    }
    out
}

/// Large tensors given as file blocks through `fetch` build the same model as quantizing the
/// float32 weights, and give the same blocks back; a tensor fetched as `Full` stays in float32
/// (a model of mixed formats: the float32 model with only the other tensors dequantized); blocks
/// of the wrong length, or for a format of values, are errors naming the tensor.
#[test]
fn fetched_blocks_build_the_same_model() {
    fn check<W: BlockFormat>()
    where
        f32: crate::kernels::KernelsFor<W>,
    {
        let fmt = WeightFormat::named(W::FORMAT_NAME).unwrap();
        for cfg in [config(false, false), sized(true, false, 48, 72)] {
            let w = weights(&cfg, 13);
            let small: Weights = w
                .iter()
                .filter(|t| !is_stored(t.2) || t.2 == "wpe")
                .cloned()
                .collect();
            let fetch = |spec: &TensorSpec| -> Result<Option<Fetched>> {
                let t = w.iter().find(|t| t.0 == spec.name).unwrap();
                Ok((t.2 != "wpe").then(|| Fetched::Blocks(fmt, file_blocks::<W>(t))))
            };
            let a = Model::with_format(cfg.clone(), &map(&small), fmt, Some(&fetch)).unwrap();
            let b = Model::with_format(cfg.clone(), &map(&w), fmt, None).unwrap();
            let ids: Vec<u32> = (0..40).map(|i| (i * 7) % 101).collect();
            assert!(forward(&a, &ids, 1) == forward(&b, &ids, 1));
            assert_eq!(a.nbytes(), b.nbytes());
            // The blocks come back as they were given.
            for t in w
                .iter()
                .filter(|t| matches!(t.2, "wte" | "c_fc" | "lm_head"))
            {
                let got = a.stored_blocks(&t.0).expect("a block tensor");
                assert_eq!(got.0, fmt);
                assert!(got.1 == file_blocks::<W>(t), "{}", t.0);
            }
            // Mixed: the MLP's first matrices kept in float32.
            let mixed = |spec: &TensorSpec| -> Result<Option<Fetched>> {
                Ok(spec
                    .name
                    .contains("mlp.c_fc.weight")
                    .then_some(Fetched::Full))
            };
            let m = Model::with_format(cfg.clone(), &map(&w), fmt, Some(&mixed)).unwrap();
            let mut r = rounded_blocks::<W>(&w);
            for (t, orig) in r.iter_mut().zip(&w) {
                if t.0.contains("mlp.c_fc.weight") {
                    t.3 = orig.3.clone();
                }
            }
            let want = Model::new(cfg.clone(), &map(&r)).unwrap();
            assert!(forward(&m, &ids, 2) == forward(&want, &ids, 2));
            let fc = m.stored_tensors();
            assert!(fc
                .iter()
                .any(|(n, f, _)| n.contains("c_fc") && *f == WeightFormat::Full));
            assert!(fc.iter().any(|(n, f, _)| n.contains("c_proj") && *f == fmt));
            assert!(fc
                .iter()
                .any(|(n, f, _)| n == "wpe.weight" && *f == WeightFormat::Full));
            // float32 values handed over one at a time: the same as the map's.
            let values = |spec: &TensorSpec| -> Result<Option<Fetched>> {
                let t = w.iter().find(|t| t.0 == spec.name).unwrap();
                Ok(Some(Fetched::Values(t.3.clone())))
            };
            let v = Model::with_format(cfg.clone(), &map(&small), fmt, Some(&values)).unwrap();
            assert!(forward(&v, &ids, 1) == forward(&b, &ids, 1));
            // Wrong lengths and wrong formats.
            let short = |spec: &TensorSpec| -> Result<Option<Fetched>> {
                let t = w.iter().find(|t| t.0 == spec.name).unwrap();
                let mut b = file_blocks::<W>(t);
                b.pop();
                Ok((t.2 == "c_attn").then_some(Fetched::Blocks(fmt, b)))
            };
            let e = Model::with_format(cfg.clone(), &map(&w), fmt, Some(&short));
            assert!(
                matches!(e, Err(crate::Error::Value(ref s)) if s.contains("h.0.attn.c_attn.weight") && s.contains("bytes")),
                "{:?}",
                e.err()
            );
            let table = |spec: &TensorSpec| -> Result<Option<Fetched>> {
                Ok((spec.kind == "wte").then(|| Fetched::Blocks(fmt, vec![0u8; 3])))
            };
            let e = Model::with_format(cfg.clone(), &map(&w), fmt, Some(&table));
            assert!(matches!(e, Err(crate::Error::Value(ref s)) if s.contains("wte.weight")));
            let bf = WeightFormat::named("bfloat16").unwrap();
            let wrong = |spec: &TensorSpec| -> Result<Option<Fetched>> {
                Ok((spec.kind == "c_fc").then(|| Fetched::Blocks(bf, vec![0u8; 34])))
            };
            let e = Model::with_format(cfg.clone(), &map(&w), fmt, Some(&wrong));
            assert!(
                matches!(e, Err(crate::Error::Value(ref s)) if s.contains("c_fc") && s.contains("not given as blocks"))
            );
        }
    }
    check::<Q8_0>();
    check::<Q4_0>();
}

/// A value that is not finite cannot be quantized: an error naming the tensor and the place.
#[test]
fn non_finite_weights_are_refused_by_block_formats() {
    let cfg = config(true, false);
    let mut w = weights(&cfg, 14);
    let t = w
        .iter_mut()
        .find(|t| t.0 == "h.1.mlp.c_proj.weight")
        .unwrap();
    t.3[5 * t.1[1] + 3] = f32::NAN;
    for name in ["q8_0", "q4_0"] {
        let e = Model::with_format(
            cfg.clone(),
            &map(&w),
            WeightFormat::named(name).unwrap(),
            None,
        );
        assert!(
            matches!(e, Err(crate::Error::Value(ref s)) if s.contains("h.1.mlp.c_proj.weight") && s.contains("depth 5 of column 3")),
            "{:?}",
            e.err()
        );
    }
}

/// A model's packed matrices of at least `memory::GATHER_MIN_BYTES` lie back to back in shared
/// regions of whole huge pages (one region for a model this small), in every kind of format;
/// smaller ones in buffers of their own.
#[test]
#[cfg(target_os = "linux")]
fn packed_matrices_are_gathered() {
    let cfg = sized(false, false, 512, 2048);
    let w = weights(&cfg, 3);
    for name in ["bfloat16", "q8_0"] {
        let fmt = WeightFormat::named(name).unwrap();
        for m in [
            Model::new(cfg.clone(), &map(&w)).unwrap(),
            Model::with_format(cfg.clone(), &map(&w), fmt, None).unwrap(),
        ] {
            let mut regions = vec![];
            for (n, t) in m.large_tensors() {
                if let Large::Matrix(lm) = t {
                    match lm.w.region() {
                        Some(r) => regions.push(r.span().0),
                        None => assert!(lm.w.nbytes() < crate::memory::GATHER_MIN_BYTES, "{n}"),
                    }
                }
            }
            // At least the four matrices of each of the two blocks (the head's 101 columns
            // pack to 262144 bytes in float32, under the bound in the block format).
            assert!(regions.len() >= 8, "{name}: {}", regions.len());
            assert!(regions.iter().all(|&r| r == regions[0]), "{name}");
        }
    }
}
