//! Products against half-size B: every family's kernels, bit for bit against the reference
//! loop run on the widened values.

use super::*;
use crate::half::{Bf16, HalfFormat, F16};
use crate::kernels::KernelsFor;
use crate::threads;
use rand::{Rng, SeedableRng};

/// B rounded to `H`, and its widened values.
fn rounded<H: HalfFormat>(b: &[f32]) -> (Vec<H>, Vec<f32>) {
    let h: Vec<H> = b.iter().map(|&x| H::from_f32(x)).collect();
    let w = h.iter().map(|x| x.to_f32()).collect();
    (h, w)
}

fn check<H: HalfFormat + PanelValue>(rng: &mut rand::rngs::StdRng, m: usize, k: usize, n: usize)
where
    f32: KernelsFor<H>,
{
    // Values of mixed magnitudes, so that rounding matters and float16 hits its subnormals.
    let a: Vec<f32> = (0..m * k).map(|_| rng.gen_range(-2.0..2.0)).collect();
    let b: Vec<f32> = (0..k * n)
        .map(|_| rng.gen_range(-1.0f32..1.0) * 2f32.powi(rng.gen_range(-20..4)))
        .collect();
    let (bh, bw) = rounded::<H>(&b);
    let mut want = vec![0.0f32; m * n];
    gemm_reference(
        MatRef::from_slice(&a, m, k),
        MatRef::from_slice(&bw, k, n),
        &mut want,
    );
    let packed = PackedB::pack(MatRef::from_slice(&bh, k, n));
    assert_eq!(packed.rows(), k);
    // A transposed view packs to the same panels.
    let bt: Vec<H> = (0..n * k).map(|x| bh[(x % k) * n + x / k]).collect();
    let packed_t = PackedB::pack(unsafe { MatRef::from_raw(bt.as_ptr(), k, n, 1, k as isize) });
    assert!(packed.values() == packed_t.values());
    let ldc = n + 3;
    for kernel in available() {
        for (p, what) in [(&packed, "rows"), (&packed_t, "transposed")] {
            let mut c = vec![f32::from_bits(0x7fc0_1234); (m + 1) * ldc];
            gemm_packed(
                MatRef::from_slice(&a, m, k),
                p,
                &mut c,
                ldc,
                &Options::with_kernel(kernel),
            );
            for i in 0..m {
                for j in 0..n {
                    assert_eq!(
                        c[i * ldc + j].to_bits(),
                        want[i * n + j].to_bits(),
                        "{} {kernel:?} {what} {m}x{k}x{n} at ({i},{j})",
                        H::NAME
                    );
                }
                for j in n..ldc {
                    assert_eq!(c[i * ldc + j].to_bits(), 0x7fc0_1234, "wrote past the row");
                }
            }
            assert!(c[m * ldc..].iter().all(|x| x.to_bits() == 0x7fc0_1234));
        }
    }
}

fn shapes<H: HalfFormat + PanelValue>(seed: u64)
where
    f32: KernelsFor<H>,
{
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let kc = f32::KC_MAX;
    // Rows: the wide kernel's 1-3, tile edges, several row tiles; columns: partial panels, the
    // wide kernel's four panels and more; depth: one step, several depth blocks.
    for &m in &[1, 2, 3, 4, 5, 12, 13, 25] {
        for &n in &[1, 17, 31, 32, 33, 128, 130, 200] {
            for &k in &[1, 7, kc + 5] {
                check::<H>(&mut rng, m, k, n);
            }
        }
    }
}

#[test]
fn half_kernels_match_reference_on_widened_values() {
    let before = threads::num_threads();
    for t in 1..=3 {
        threads::set_num_threads(t).unwrap();
        shapes::<Bf16>(10 + t as u64);
        shapes::<F16>(20 + t as u64);
    }
    // Large enough for the parallel path.
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for t in 1..=3 {
        threads::set_num_threads(t).unwrap();
        check::<Bf16>(&mut rng, 40, 300, 520);
        check::<F16>(&mut rng, 2, 800, 1000);
    }
    threads::set_num_threads(before).unwrap();
}

#[test]
fn half_packing_round_trips_and_pads_with_zero() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    let (k, n) = (f32::KC_MAX + 9, 45);
    let bits: Vec<Bf16> = (0..k * n).map(|_| Bf16(rng.gen())).collect();
    let p = PackedB::pack(MatRef::from_slice(&bits, k, n));
    assert!(p.unpack() == bits);
    assert_eq!(p.nbytes(), k * 64 * 2);
    // The padding columns of the last panel hold the zero pattern.
    let zeros = p.values().iter().filter(|x| x.0 == 0).count();
    assert!(zeros >= k * (64 - n));
}
