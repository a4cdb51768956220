use super::*;
use rand::{Rng, SeedableRng};

fn random_model<T: Float>(cfg: &Config, bias: bool, affine: bool, seed: u64) -> Model<T> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let cfg = Config {
        attn_bias: bias,
        attn_out_bias: bias,
        mlp_bias: bias,
        ln_affine: affine,
        ..cfg.clone()
    };
    let shapes: Vec<(String, Vec<usize>)> = schema(&cfg)
        .into_iter()
        .map(|t| (t.name, t.shape))
        .collect();
    let data: Vec<(String, Vec<usize>, Vec<T>)> = shapes
        .into_iter()
        .map(|(n, s)| {
            let len: usize = s.iter().product();
            let scale = if s.len() == 2 {
                1.0 / (s[0] as f64).sqrt()
            } else {
                0.1
            };
            let base =
                if n.ends_with("ln_1.weight") || n.ends_with("ln_2.weight") || n == "ln_f.weight" {
                    1.0
                } else {
                    0.0
                };
            let vals = (0..len)
                .map(|_| T::from_f64(base + scale * rng.gen_range(-1.7..1.7)))
                .collect();
            (n, s, vals)
        })
        .collect();
    let map: HashMap<String, Tensor<'_, T>> = data
        .iter()
        .map(|(n, s, v)| {
            (
                n.clone(),
                Tensor {
                    shape: s.clone(),
                    data: v.as_slice(),
                },
            )
        })
        .collect();
    Model::new(cfg, &map).unwrap()
}

fn cfg(sinusoidal: bool, tied: bool) -> Config {
    Config {
        family: Family::Gpt2,
        vocab_size: 97,
        n_ctx: 200,
        d_model: 48,
        n_heads: 3,
        n_kv_heads: 3,
        d_head: 16,
        n_layers: 2,
        d_ff: 96,
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

fn run<T: Float>(
    m: &Model<T>,
    ids: &[u32],
    batch: usize,
    cache: Option<&mut KvCache<T>>,
    logits: Logits,
) -> Result<RunOutput<T>> {
    let req = Request {
        ids,
        batch,
        t_new: ids.len() / batch,
        logits,
        causal: true,
        want_hidden: false,
    };
    m.run(&req, cache, &ok)
}

fn ok() -> Result<()> {
    Ok(())
}

fn forward<T: Float>(m: &Model<T>, ids: &[u32], batch: usize) -> Vec<T> {
    run(m, ids, batch, None, Logits::All).unwrap().logits
}

fn bits<T: Float>(v: &[T]) -> Vec<u64> {
    v.iter().map(|x| x.to_f64().to_bits()).collect()
}

fn decode_matches_forward<T: Float>() {
    let c = cfg(false, true);
    let m = random_model::<T>(&c, true, true, 1);
    let mut rng = rand::rngs::StdRng::seed_from_u64(2);
    let t = 150; // crosses two key-block boundaries
    let ids: Vec<u32> = (0..t)
        .map(|_| rng.gen_range(0..c.vocab_size as u32))
        .collect();
    let full = forward(&m, &ids, 1);
    let v = c.vocab_size;
    // Prefill 5 positions, then decode one at a time.
    let mut cache = m.new_cache(1);
    let pre = run(&m, &ids[..5], 1, Some(&mut cache), Logits::All)
        .unwrap()
        .logits;
    assert_eq!(bits(&pre), bits(&full[..5 * v]));
    for p in 5..t {
        let step = run(&m, &ids[p..p + 1], 1, Some(&mut cache), Logits::Last)
            .unwrap()
            .logits;
        assert_eq!(bits(&step), bits(&full[p * v..(p + 1) * v]), "position {p}");
    }
    // Causality: a prefix's logits equal the first rows of the longer run; changing a later
    // token leaves earlier rows untouched.
    let pre = forward(&m, &ids[..70], 1);
    assert_eq!(bits(&pre), bits(&full[..70 * v]));
    let mut changed = ids.clone();
    changed[100] = (changed[100] + 1) % c.vocab_size as u32;
    let other = forward(&m, &changed, 1);
    assert_eq!(bits(&other[..100 * v]), bits(&full[..100 * v]));
    assert_ne!(
        bits(&other[100 * v..101 * v]),
        bits(&full[100 * v..101 * v])
    );
}

#[test]
fn decode_matches_forward_f32() {
    decode_matches_forward::<f32>();
}

#[test]
fn decode_matches_forward_f64() {
    decode_matches_forward::<f64>();
}

#[test]
fn batch_equals_rows_and_threads_do_not_matter() {
    let c = cfg(true, false);
    let m = random_model::<f32>(&c, false, false, 3);
    let mut rng = rand::rngs::StdRng::seed_from_u64(4);
    let (b, t) = (3, 77);
    let ids: Vec<u32> = (0..b * t)
        .map(|_| rng.gen_range(0..c.vocab_size as u32))
        .collect();
    crate::threads::set_num_threads(2).unwrap();
    let all = forward(&m, &ids, b);
    crate::threads::set_num_threads(1).unwrap();
    let one = forward(&m, &ids, b);
    crate::threads::set_num_threads(2).unwrap();
    assert_eq!(bits(&all), bits(&one));
    let v = c.vocab_size;
    for r in 0..b {
        let row = forward(&m, &ids[r * t..(r + 1) * t], 1);
        assert_eq!(bits(&row), bits(&all[r * t * v..(r + 1) * t * v]));
    }
}

#[test]
fn bad_ids_and_lengths_are_errors() {
    let c = cfg(false, true);
    let m = random_model::<f64>(&c, true, true, 5);
    assert!(run(&m, &[1, 97], 1, None, Logits::All).is_err());
    let long: Vec<u32> = vec![1; 201];
    assert!(run(&m, &long, 1, None, Logits::All).is_err());
}

#[test]
fn kept_work_buffers_do_not_change_results() {
    // A pass runs on the buffers a finished pass left behind: poisoned with NaN, and from a
    // longer pass, they must not change a single bit.
    let c = cfg(false, true);
    let m = random_model::<f32>(&c, true, true, 8);
    let mut rng = rand::rngs::StdRng::seed_from_u64(9);
    let long: Vec<u32> = (0..2 * 150)
        .map(|_| rng.gen_range(0..c.vocab_size as u32))
        .collect();
    let short = &long[..40];
    let fresh = random_model::<f32>(&c, true, true, 8);
    let want_short = forward(&fresh, short, 1);
    let want_long = forward(&fresh, &long, 2);
    assert_eq!(bits(&forward(&m, &long, 2)), bits(&want_long));
    {
        let mut pool = m.workspaces.0.lock().unwrap();
        assert!(!pool.is_empty(), "a finished pass keeps its buffers");
        for ws in pool.iter_mut() {
            for buf in [
                &mut ws.h,
                &mut ws.qkv,
                &mut ws.att,
                &mut ws.y,
                &mut ws.u,
                &mut ws.g,
            ] {
                buf.iter_mut().for_each(|x| *x = f32::NAN);
            }
            for hk in ws.kv.iter_mut().flat_map(|c| c.layers.iter_mut().flatten()) {
                hk.kt.iter_mut().for_each(|x| *x = f32::NAN);
                hk.v.iter_mut().for_each(|x| *x = f32::NAN);
            }
        }
    }
    assert_eq!(bits(&forward(&m, short, 1)), bits(&want_short));
    assert_eq!(bits(&forward(&m, &long, 2)), bits(&want_long));
}
