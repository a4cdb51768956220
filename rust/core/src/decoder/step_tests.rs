//! The ragged step's promise: in [`Model::step_many`], each sequence's logits equal, bit for
//! bit, those of the sequence run alone, however the step's other rows are composed (decode
//! rows and prefill chunks of any lengths, at any positions), on every kernel and thread
//! count, for GPT-2 and the Llama family; and a prompt prefilled in chunks equals the prompt
//! prefilled whole.

use super::llama_tests::{config, llama3, map, weights};
use super::tests::{cfg, random_model};
use super::*;
use rand::{Rng, SeedableRng};

fn bits<T: Float>(v: &[T]) -> Vec<u64> {
    v.iter().map(|x| x.to_f64().to_bits()).collect()
}

fn ok() -> Result<()> {
    Ok(())
}

/// Logits of every position of `ids` run alone (a plain forward: it equals prefill plus
/// decode, which the decoder's tests check).
fn alone<T: Float>(m: &Model<T>, ids: &[u32]) -> Vec<T> {
    let req = Request {
        ids,
        batch: 1,
        t_new: ids.len(),
        logits: Logits::All,
        causal: true,
        want_hidden: false,
    };
    m.run(&req, None, &ok).unwrap().logits
}

/// Sequences of random lengths fed to `step_many` in random pieces: at every step a random
/// subset of the unfinished sequences takes part (others wait, as in a server where requests
/// arrive and leave), each with a piece of 1 to `max_chunk` tokens (1: a decode row), asking
/// for all logits or the last. Every piece's logits must equal the sequence's rows alone.
fn random_compositions<T: Float>(m: &Model<T>, seed: u64, n_seqs: usize, max_len: usize) {
    let v = m.cfg.vocab_size;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let seqs: Vec<Vec<u32>> = (0..n_seqs)
        .map(|_| {
            let n = rng.gen_range(1..=max_len);
            (0..n).map(|_| rng.gen_range(0..v as u32)).collect()
        })
        .collect();
    let want: Vec<Vec<T>> = seqs.iter().map(|s| alone(m, s)).collect();
    let mut caches: Vec<KvCache<T>> = (0..n_seqs).map(|_| m.new_cache(1)).collect();
    let mut done = vec![0usize; n_seqs];
    let mut steps = 0;
    while done.iter().zip(&seqs).any(|(&d, s)| d < s.len()) {
        steps += 1;
        // Who takes part, and with how many tokens.
        let mut plan: Vec<(usize, usize, bool)> = Vec::new();
        for i in 0..n_seqs {
            let left = seqs[i].len() - done[i];
            if left == 0 || rng.gen_bool(0.25) {
                continue;
            }
            let n = if rng.gen_bool(0.5) {
                1
            } else {
                rng.gen_range(1..=left.min(120))
            };
            plan.push((i, n.min(left), rng.gen_bool(0.5)));
        }
        if plan.is_empty() {
            continue;
        }
        // Any order of the sequences within the step.
        for k in (1..plan.len()).rev() {
            plan.swap(k, rng.gen_range(0..=k));
        }
        let mut order: Vec<usize> = plan.iter().map(|p| p.0).collect();
        let mut refs: Vec<Option<&mut KvCache<T>>> = caches.iter_mut().map(Some).collect();
        let mut step: Vec<SeqStep<'_, T>> = plan
            .iter()
            .map(|&(i, n, all)| SeqStep {
                cache: refs[i].take().unwrap(),
                ids: &seqs[i][done[i]..done[i] + n],
                all_logits: all,
            })
            .collect();
        let out = m.step_many(&mut step, &ok).unwrap();
        drop(step);
        let mut row = 0;
        for (k, &(i, n, all)) in plan.iter().enumerate() {
            let got_rows = out.rows[k];
            assert_eq!(got_rows, if all { n } else { 1 });
            let first = if all { done[i] } else { done[i] + n - 1 };
            let got = &out.logits[row * v..(row + got_rows) * v];
            let exp = &want[i][first * v..(done[i] + n) * v];
            assert!(
                bits(got) == bits(exp),
                "sequence {i} positions {first}..{} (step {steps}, with {order:?})",
                done[i] + n
            );
            row += got_rows;
            done[i] += n;
            assert_eq!(caches[i].len(), done[i]);
        }
        order.clear();
    }
}

/// Every kernel, 1 to 3 threads: the same bits as the sequences alone.
fn every_kernel_and_thread_count<T: Float>(m: &Model<T>, max_len: usize) {
    let before = crate::threads::num_threads();
    for (ki, k) in crate::kernels::available().into_iter().enumerate() {
        crate::kernels::set_kernel(Some(k)).unwrap();
        for threads in 1..=3 {
            crate::threads::set_num_threads(threads).unwrap();
            random_compositions(m, 10 * ki as u64 + threads as u64, 6, max_len);
        }
    }
    crate::kernels::set_kernel(None).unwrap();
    crate::threads::set_num_threads(before).unwrap();
}

#[test]
fn ragged_steps_equal_sequences_alone_gpt2() {
    let c = cfg(false, true);
    every_kernel_and_thread_count(&random_model::<f32>(&c, true, true, 21), 190);
    random_compositions(&random_model::<f64>(&c, true, true, 22), 5, 5, 150);
    // Sinusoidal positions (no learned table), untied head.
    let c = cfg(true, false);
    random_compositions(&random_model::<f32>(&c, false, false, 23), 6, 5, 150);
}

#[test]
fn ragged_steps_equal_sequences_alone_llama() {
    for (nh, nkv, scaling) in [(4, 2, llama3()), (4, 1, RopeScaling::Default)] {
        let c = config(nh, nkv, scaling);
        let w = weights::<f32>(&c, 31);
        let m = Model::new(c.clone(), &map(&w)).unwrap();
        every_kernel_and_thread_count(&m, 250);
        let w = weights::<f64>(&c, 32);
        let m = Model::new(c.clone(), &map(&w)).unwrap();
        random_compositions(&m, 7, 5, 200);
    }
}

/// A prompt prefilled in chunks (through `run` with a cache, and through `step_many`) equals
/// the prompt prefilled whole: each chunk's logits are the whole prefill's rows, and the
/// decode step after either is the same.
#[test]
fn chunked_prefill_equals_whole_prefill() {
    let c = config(4, 2, llama3());
    let w = weights::<f32>(&c, 41);
    let m = Model::new(c.clone(), &map(&w)).unwrap();
    let v = c.vocab_size;
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let ids: Vec<u32> = (0..230).map(|_| rng.gen_range(0..v as u32)).collect();
    let prompt = &ids[..229];
    let mut whole = m.new_cache(1);
    fn req(ids: &[u32]) -> Request<'_> {
        Request {
            ids,
            batch: 1,
            t_new: ids.len(),
            logits: Logits::All,
            causal: true,
            want_hidden: false,
        }
    }
    let full = m.run(&req(prompt), Some(&mut whole), &ok).unwrap().logits;
    let next = m
        .run(&req(&ids[229..]), Some(&mut whole), &ok)
        .unwrap()
        .logits;
    for chunk in [1usize, 7, 32, 95, 96, 97, 200] {
        let (mut a, mut b) = (m.new_cache(1), m.new_cache(1));
        let mut at = 0;
        while at < prompt.len() {
            let n = chunk.min(prompt.len() - at);
            let piece = &prompt[at..at + n];
            let got = m.run(&req(piece), Some(&mut a), &ok).unwrap().logits;
            assert_eq!(
                bits(&got),
                bits(&full[at * v..(at + n) * v]),
                "run, chunk {chunk}"
            );
            let mut one = [SeqStep {
                cache: &mut b,
                ids: piece,
                all_logits: true,
            }];
            let got = m.step_many(&mut one, &ok).unwrap().logits;
            assert_eq!(
                bits(&got),
                bits(&full[at * v..(at + n) * v]),
                "step_many, chunk {chunk}"
            );
            at += n;
        }
        let after = m.run(&req(&ids[229..]), Some(&mut a), &ok).unwrap().logits;
        assert_eq!(bits(&after), bits(&next), "decode after chunks of {chunk}");
        // The caches hold the same keys and values as the whole prefill's.
        let mut one = [SeqStep {
            cache: &mut b,
            ids: &ids[229..],
            all_logits: false,
        }];
        let after = m.step_many(&mut one, &ok).unwrap().logits;
        assert_eq!(
            bits(&after),
            bits(&next),
            "step_many decode after chunks of {chunk}"
        );
    }
}

/// Bad input names the sequence and leaves every cache as it was; an interrupted step too.
#[test]
fn bad_input_names_the_sequence_and_changes_no_cache() {
    let c = cfg(false, true);
    let m = random_model::<f64>(&c, true, true, 51);
    let mut caches: Vec<KvCache<f64>> = (0..3).map(|_| m.new_cache(1)).collect();
    {
        let [a, b, cc] = &mut caches[..] else {
            unreachable!()
        };
        let mut s = [
            SeqStep {
                cache: a,
                ids: &[1, 2, 3],
                all_logits: false,
            },
            SeqStep {
                cache: b,
                ids: &[4],
                all_logits: false,
            },
            SeqStep {
                cache: cc,
                ids: &[5, 6],
                all_logits: true,
            },
        ];
        let out = m.step_many(&mut s, &ok).unwrap();
        assert_eq!(out.rows, vec![1, 1, 2]);
        assert_eq!(out.logits.len(), 4 * c.vocab_size);
    }
    let lens = |c: &[KvCache<f64>]| c.iter().map(|c| c.len()).collect::<Vec<_>>();
    assert_eq!(lens(&caches), vec![3, 1, 2]);
    let long = vec![1u32; 200];
    let cases: Vec<(Vec<Vec<u32>>, &str)> = vec![
        (
            vec![vec![1], vec![97], vec![2]],
            "ids[1]: token id 97 is out of range",
        ),
        (vec![vec![1], vec![2], vec![]], "ids[2]: no new tokens"),
        (
            vec![vec![1], long.clone(), vec![2]],
            "ids[1]: sequence length 201",
        ),
    ];
    for (ids, msg) in cases {
        let [a, b, cc] = &mut caches[..] else {
            unreachable!()
        };
        let mut s = [
            SeqStep {
                cache: a,
                ids: &ids[0],
                all_logits: false,
            },
            SeqStep {
                cache: b,
                ids: &ids[1],
                all_logits: false,
            },
            SeqStep {
                cache: cc,
                ids: &ids[2],
                all_logits: false,
            },
        ];
        let err = m
            .step_many(&mut s, &ok)
            .err()
            .expect("an error")
            .to_string();
        assert!(err.contains(msg), "{err:?} should contain {msg:?}");
        assert_eq!(lens(&caches), vec![3, 1, 2]);
    }
    // A cache of two sequences.
    let mut two = m.new_cache(2);
    let mut s = [
        SeqStep {
            cache: &mut caches[0],
            ids: &[1],
            all_logits: false,
        },
        SeqStep {
            cache: &mut two,
            ids: &[1],
            all_logits: false,
        },
    ];
    let err = m
        .step_many(&mut s, &ok)
        .err()
        .expect("an error")
        .to_string();
    assert!(
        err.starts_with("caches[1]:") || err.contains("caches[1]:"),
        "{err}"
    );
    // Interrupted between layers: the caches keep their positions and their heads, and the
    // next step gives what it would have given.
    let calls = std::sync::atomic::AtomicUsize::new(0);
    let stop = || -> Result<()> {
        if calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed) == 1 {
            crate::value_error!("interrupted")
        } else {
            Ok(())
        }
    };
    let [a, b, _] = &mut caches[..] else {
        unreachable!()
    };
    let mut s = [
        SeqStep {
            cache: a,
            ids: &[7, 8],
            all_logits: false,
        },
        SeqStep {
            cache: b,
            ids: &[9],
            all_logits: false,
        },
    ];
    assert!(m.step_many(&mut s, &stop).is_err());
    assert_eq!(lens(&caches), vec![3, 1, 2]);
    assert_eq!(caches[0].layers[0].len(), c.n_kv_heads);
    let [a, b, _] = &mut caches[..] else {
        unreachable!()
    };
    let mut s = [
        SeqStep {
            cache: a,
            ids: &[7, 8],
            all_logits: false,
        },
        SeqStep {
            cache: b,
            ids: &[9],
            all_logits: false,
        },
    ];
    let out = m.step_many(&mut s, &ok).unwrap();
    let v = c.vocab_size;
    let a_alone = alone(&m, &[1, 2, 3, 7, 8]);
    let b_alone = alone(&m, &[4, 9]);
    assert_eq!(bits(&out.logits[..v]), bits(&a_alone[4 * v..]));
    assert_eq!(bits(&out.logits[v..]), bits(&b_alone[v..]));
    // No sequences: nothing to do.
    let out = m.step_many(&mut [], &ok).unwrap();
    assert!(out.logits.is_empty() && out.rows.is_empty());
}

/// Logits of the last rows only (the last block then runs its attention and MLP on those rows
/// alone): a batch's last rows equal, bit for bit, the last rows of every row's logits, with
/// and without a cache, and the cache the last-rows pass leaves behind holds the same keys and
/// values (the decode step after it equals the one after the all-rows pass). GPT-2 and Llama,
/// every kernel, 1 and 2 threads.
#[test]
fn last_rows_equal_the_last_of_all_rows() {
    fn req(ids: &[u32], batch: usize, t_new: usize, logits: Logits) -> Request<'_> {
        Request {
            ids,
            batch,
            t_new,
            logits,
            causal: true,
            want_hidden: false,
        }
    }
    fn check<T: Float>(m: &Model<T>, seed: u64) {
        let v = m.cfg.vocab_size;
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        for (batch, t) in [(1usize, 2usize), (1, 37), (3, 7), (2, 130)] {
            let ids: Vec<u32> = (0..batch * t).map(|_| rng.gen_range(0..v as u32)).collect();
            let next: Vec<u32> = (0..batch).map(|_| rng.gen_range(0..v as u32)).collect();
            let (mut ca, mut cl) = (m.new_cache(batch), m.new_cache(batch));
            let all = m
                .run(&req(&ids, batch, t, Logits::All), Some(&mut ca), &ok)
                .unwrap();
            let last = m
                .run(&req(&ids, batch, t, Logits::Last), Some(&mut cl), &ok)
                .unwrap();
            let plain = m
                .run(&req(&ids, batch, t, Logits::Last), None, &ok)
                .unwrap();
            let want: Vec<T> = (0..batch)
                .flat_map(|b| all.logits[((b + 1) * t - 1) * v..(b + 1) * t * v].to_vec())
                .collect();
            assert_eq!(bits(&last.logits), bits(&want), "{batch} x {t}, cached");
            assert_eq!(bits(&plain.logits), bits(&want), "{batch} x {t}, plain");
            let a = m
                .run(&req(&next, batch, 1, Logits::Last), Some(&mut ca), &ok)
                .unwrap();
            let l = m
                .run(&req(&next, batch, 1, Logits::Last), Some(&mut cl), &ok)
                .unwrap();
            assert_eq!(
                bits(&l.logits),
                bits(&a.logits),
                "{batch} x {t}, step after"
            );
        }
    }
    let before = crate::threads::num_threads();
    let llama = {
        let c = config(4, 2, llama3());
        Model::new(c.clone(), &map(&weights::<f32>(&c, 51))).unwrap()
    };
    let gpt2 = random_model::<f32>(&cfg(false, true), true, true, 52);
    for k in crate::kernels::available() {
        crate::kernels::set_kernel(Some(k)).unwrap();
        for threads in 1..=2 {
            crate::threads::set_num_threads(threads).unwrap();
            check(&llama, 53);
            check(&gpt2, 54);
        }
    }
    crate::kernels::set_kernel(None).unwrap();
    crate::threads::set_num_threads(before).unwrap();
    let c = config(4, 1, RopeScaling::Default);
    check(
        &Model::new(c.clone(), &map(&weights::<f64>(&c, 55))).unwrap(),
        56,
    );
}

/// Which rows a last block keeps: consecutive rows of each segment, in order, at their own
/// positions; `None` for every row, rows out of order, or a segment's rows with a gap.
#[test]
fn a_kept_pass_holds_the_rows_asked_for() {
    let pass = Pass::ragged(&[(3, 10), (1, 4), (5, 0)], 8, true);
    let k = pass.kept(&[2, 3, 7, 8]).unwrap();
    let seg = |row0, rows, p0, table0| Segment {
        row0,
        rows,
        p0,
        table0,
    };
    assert_eq!(
        k.segments,
        vec![seg(0, 1, 12, 2), seg(1, 1, 4, 3), seg(2, 2, 3, 7)]
    );
    assert_eq!(k.positions, vec![12, 4, 3, 4]);
    assert_eq!((k.d, k.causal, k.kernel), (8, true, pass.kernel));
    // A segment without a kept row keeps its place (its index names its heads).
    let k = pass.kept(&[0, 1]).unwrap();
    assert_eq!(
        k.segments,
        vec![seg(0, 2, 10, 0), seg(2, 0, 4, 3), seg(2, 0, 0, 4)]
    );
    assert!(pass.kept(&(0..9).collect::<Vec<_>>()).is_none());
    assert!(pass.kept(&[3, 2]).is_none());
    assert!(pass.kept(&[2, 2]).is_none());
    assert!(pass.kept(&[4, 6]).is_none()); // rows 0 and 2 of the last segment
    assert!(pass.kept(&[9]).is_none()); // no such row
}
