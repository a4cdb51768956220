//! Products against B in a storage format: every family's kernels, bit for bit against the
//! reference loop run on the widened values; packing round trips; and a block format (the
//! shape of `q8_0`: a scale per block of depth steps and column), packed by a packer of its own
//! and run by the portable kernels through the loops, which the format abstraction must admit.

use super::*;
use crate::formats::{BPanel, Bf16, Float16Format, StorageFormat, WidensTo, F16};
use crate::kernels::{HasKernels, KernelsFor};
use crate::threads;
use rand::{Rng, SeedableRng};

/// B rounded to `H`, and its widened values.
fn rounded<H: Float16Format>(b: &[f32]) -> (Vec<H>, Vec<f32>) {
    let h: Vec<H> = b.iter().map(|&x| H::from_f32(x)).collect();
    let w = h.iter().map(|x| x.to_f32()).collect();
    (h, w)
}

/// `c` (rows `ldc` apart, NaN-filled past the product) against the reference `want` (m x n).
fn assert_product(c: &[f32], want: &[f32], m: usize, n: usize, ldc: usize, what: &str) {
    for i in 0..m {
        for j in 0..n {
            assert_eq!(
                c[i * ldc + j].to_bits(),
                want[i * n + j].to_bits(),
                "{what} {m}x{n} at ({i},{j})"
            );
        }
        for j in n..ldc {
            assert_eq!(c[i * ldc + j].to_bits(), 0x7fc0_1234, "wrote past the row");
        }
    }
    assert!(c[m * ldc..].iter().all(|x| x.to_bits() == 0x7fc0_1234));
}

fn check<H: Float16Format>(rng: &mut rand::rngs::StdRng, m: usize, k: usize, n: usize)
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
    // Unpacked and widened: the widened B.
    let unpacked: Vec<f32> = packed.unpack_widened();
    assert!(unpacked
        .iter()
        .zip(&bw)
        .all(|(x, y)| x.to_bits() == y.to_bits()));
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
            let what = format!("{} {kernel:?} {what} k={k}", H::FORMAT_NAME);
            assert_product(&c, &want, m, n, ldc, &what);
        }
    }
}

fn shapes<H: Float16Format>(seed: u64)
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
fn stored_format_kernels_match_reference_on_widened_values() {
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

/// Each family's kernels against 16-bit B called directly, against the contract's chain on the
/// widened values: every row count of the tile, every column count of a panel, depths 0-9 and
/// 17 (every remainder of an unrolled depth loop), from zero and continuing from C, in each
/// panel layout a kernel may be handed (step by step, the rows of a wider B, two halves); with
/// and without a prefetch run where the family's tile takes one; the wide kernel likewise
/// against one to four panels, with A packed and, where the family takes it, compact. A's pad rows and B's columns past `cols` are NaN and C sits between
/// sentinels, so a read or a write outside the tile shows. (The products above reach these
/// kernels with panels packed step by step only.)
#[test]
fn value_format_kernels_called_directly_match_the_chain() {
    use super::tests::{c_between_sentinels, Chain};
    use crate::kernels::{CTile, PrefetchRun, TileArgs, TileAux, WideArgs, WIDE_ROWS};

    fn check<H: Float16Format>(seed: u64)
    where
        f32: KernelsFor<H>,
    {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        // Mixed magnitudes (float16's subnormals among them), so that every bit matters.
        let mut values = |n: usize| -> Vec<H> {
            (0..n)
                .map(|_| {
                    H::from_f32(rng.gen_range(-1.0f32..1.0) * 2f32.powi(rng.gen_range(-20..4)))
                })
                .collect()
        };
        let mut rng_a = rand::rngs::StdRng::seed_from_u64(seed + 1);
        let mut random_a =
            |n: usize| -> Vec<f32> { (0..n).map(|_| rng_a.gen_range(-2.0f32..2.0)).collect() };
        let (nan, pad, sentinel) = (H::from_f32(f32::NAN), H::from_f32(0.25), -3.5f32);
        let nr = H::PANEL_NR;
        let h = nr / 2;
        let ahead = vec![0u8; 64 * (3 * 17 + 2)];
        for kernel in available() {
            let spec = <f32 as KernelsFor<H>>::kernels_for(kernel);
            let mr = spec.mr;
            let name = H::FORMAT_NAME;
            for prefetch in [false, true] {
                if prefetch && !spec.tile_prefetches {
                    continue;
                }
                for kc in (0..=9).chain([17]) {
                    for (ldb, hoff) in [(nr, h), (4 * nr + 5, h), (h, kc * h)] {
                        let at = |kk: usize, j: usize| (j / h) * hoff + kk * ldb + j % h;
                        let mut b = values(hoff + kc * ldb + 4 * nr);
                        let a_full = random_a(kc * mr);
                        for rows in 1..=mr {
                            let mut a = a_full.clone();
                            for kk in 0..kc {
                                a[kk * mr + rows..(kk + 1) * mr].fill(f32::NAN);
                            }
                            for cols in 1..=nr {
                                for kk in 0..kc {
                                    for j in cols..nr {
                                        b[at(kk, j)] = nan;
                                    }
                                }
                                for accumulate in [false, true] {
                                    let ldc = nr + 3;
                                    let c0 = random_a(rows * cols);
                                    let mut c = c_between_sentinels(&c0, rows, cols, ldc, sentinel);
                                    let args = TileArgs {
                                        rows,
                                        cols,
                                        kc,
                                        a: a.as_ptr(),
                                        b: BPanel {
                                            ptr: b.as_ptr(),
                                            ldb,
                                            hoff,
                                        },
                                        c: CTile {
                                            ptr: unsafe { c.as_mut_ptr().add(ldc) },
                                            ldc,
                                        },
                                        accumulate,
                                    };
                                    let aux = TileAux {
                                        copy_to: None,
                                        prefetch: prefetch.then_some(PrefetchRun {
                                            ptr: ahead.as_ptr(),
                                            lines: (rows * 5 + cols) % (3 * kc + 3),
                                        }),
                                    };
                                    unsafe { (spec.tile)(&args, &aux) };
                                    let chain = Chain {
                                        a: &a,
                                        mr,
                                        kc,
                                        c0: accumulate.then_some(&c0[..]),
                                        sentinel,
                                    };
                                    chain.check(
                                        &c,
                                        rows,
                                        cols,
                                        ldc,
                                        |kk, j| b[at(kk, j)].to_f32(),
                                        || {
                                            format!(
                                                "{name} {kernel:?} rows={rows} cols={cols} \
                                                 kc={kc} ldb={ldb} hoff={hoff} \
                                                 acc={accumulate} prefetch={prefetch}"
                                            )
                                        },
                                    );
                                }
                                // The columns back to values for the next width.
                                for kk in 0..kc {
                                    for j in cols..nr {
                                        b[at(kk, j)] = pad;
                                    }
                                }
                            }
                        }
                    }
                }
            }
            let Some(wide) = spec.wide else { continue };
            for (kc, panels) in (0..=9)
                .chain([17])
                .flat_map(|kc| (1..=4).map(move |p| (kc, p)))
            {
                // 1 to 4 panels one after the other, step by step or in halves, or side by
                // side in the rows of a wider B; B ends with the last panel's last value.
                for (ldb, hoff, bstride) in
                    [(nr, h, kc * nr), (h, kc * h, kc * nr), (4 * nr + 5, h, nr)]
                {
                    let at = |kk: usize, j: usize| (j / h) * hoff + kk * ldb + j % h;
                    let b = values((panels - 1) * bstride + at(kc.max(1) - 1, nr - 1) + 1);
                    let bat = |kk: usize, j: usize| b[(j / nr) * bstride + at(kk, j % nr)].to_f32();
                    for rows in 1..=WIDE_ROWS {
                        // A packed (the rows past `rows` NaN: never read), and compact where
                        // the family's kernel takes it.
                        let steps: &[usize] = if spec.wide_compact_a {
                            &[mr, rows]
                        } else {
                            &[mr]
                        };
                        for (&a_step, cols_last) in
                            steps.iter().flat_map(|s| (1..=nr).map(move |c| (s, c)))
                        {
                            let mut a = random_a(kc * a_step);
                            for kk in 0..kc {
                                a[kk * a_step + rows..(kk + 1) * a_step].fill(f32::NAN);
                            }
                            let cols = (panels - 1) * nr + cols_last;
                            for accumulate in [false, true] {
                                let ldc = 4 * nr + 2;
                                let c0 = random_a(rows * cols);
                                let mut c = c_between_sentinels(&c0, rows, cols, ldc, sentinel);
                                let args = WideArgs {
                                    rows,
                                    panels,
                                    cols_last,
                                    kc,
                                    a: a.as_ptr(),
                                    a_step,
                                    b: BPanel {
                                        ptr: b.as_ptr(),
                                        ldb,
                                        hoff,
                                    },
                                    bstride,
                                    c: CTile {
                                        ptr: unsafe { c.as_mut_ptr().add(ldc) },
                                        ldc,
                                    },
                                    accumulate,
                                };
                                unsafe { wide(&args) };
                                let chain = Chain {
                                    a: &a,
                                    mr: a_step,
                                    kc,
                                    c0: accumulate.then_some(&c0[..]),
                                    sentinel,
                                };
                                chain.check(&c, rows, cols, ldc, bat, || {
                                    format!(
                                        "{name} {kernel:?} wide rows={rows} panels={panels} \
                                         cols_last={cols_last} kc={kc} ldb={ldb} \
                                         a_step={a_step} acc={accumulate}"
                                    )
                                });
                            }
                        }
                    }
                }
            }
        }
    }
    check::<Bf16>(61);
    check::<F16>(63);
}

#[test]
fn packing_16_bit_values_round_trips_and_pads_with_zero() {
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

/// Depth blocks for a format of blocks: whole blocks (the last block of K excepted), at most
/// the largest depth block rounded up to whole blocks, covering K in order; with blocks of one
/// step, the plain equal blocks.
#[test]
fn depth_blocks_are_whole_format_blocks() {
    for k in (0..300).chain([767, 768, 769, 3072, 3100]) {
        assert_eq!(KBlocks::aligned(k, 384, 1), KBlocks::new(k, 384));
        for (kc_max, align) in [(384, 32), (100, 32), (24, 8), (5, 8), (64, 64)] {
            let kb = KBlocks::aligned(k, kc_max, align);
            let mut next = 0;
            for p in 0..kb.count {
                let (k0, kc) = kb.block(p);
                assert_eq!(k0, next, "k={k} kc_max={kc_max} align={align}");
                assert!(kc > 0 && kc <= kc_max.div_ceil(align) * align);
                assert!(kc % align == 0 || k0 + kc == k, "k={k} p={p} kc={kc}");
                next = k0 + kc;
            }
            assert_eq!(next, k, "k={k} kc_max={kc_max} align={align}");
        }
    }
}

/// A block format for tests, the shape of `q8_0` in small: blocks of [`BLOCK`] depth steps,
/// each holding, per panel, the [`MOCK_NR`] columns' float16 scales and then the block's steps
/// of small integers `q` (a step `MOCK_NR` units); a weight is `scale * q`.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Blocks(u16);

const BLOCK: usize = 8;
const MOCK_NR: usize = 32;

// SAFETY: any 16 bits are a unit; the panels' layout is `PANEL_BLOCK_UNITS` a block.
unsafe impl StorageFormat for Blocks {
    const FORMAT_NAME: &'static str = "test-blocks";
    const BLOCK_K: usize = BLOCK;
    const PANEL_NR: usize = MOCK_NR;
    const PANEL_BLOCK_UNITS: usize = MOCK_NR + BLOCK * MOCK_NR;
    const HALVES: bool = false;
    const ZERO_UNIT: Self = Blocks(0);
    const PANEL_KC_MAX: usize = 24;
}

impl WidensTo<f32> for Blocks {
    unsafe fn widen_step(b: &BPanel<Self>, kk: usize, out: &mut [f32]) {
        let block = b.ptr.add(kk / BLOCK * b.ldb);
        for (j, v) in out.iter_mut().enumerate() {
            let scale = F16((*block.add(j)).0).to_f32();
            let q = (*block.add(MOCK_NR + kk % BLOCK * MOCK_NR + j)).0 as i16;
            *v = scale * q as f32;
        }
    }
}

impl KernelsFor<Blocks> for f32 {
    fn kernels_for(_: Kernel) -> crate::kernels::GemmKernels<f32, Blocks> {
        f32::portable_kernels()
    }
}

/// B (k x n) in [`Blocks`]: its scales (one per block of K and column) and integers, packed
/// by the format's layout; and its widened values.
fn pack_blocks(rng: &mut rand::rngs::StdRng, k: usize, n: usize) -> (PackedB<Blocks>, Vec<f32>) {
    let nblocks = k.div_ceil(BLOCK);
    let scales: Vec<F16> = (0..nblocks * n)
        .map(|_| F16::from_f32(rng.gen_range(-1.0f32..1.0) * 2f32.powi(rng.gen_range(-12..3))))
        .collect();
    let q: Vec<i16> = (0..k * n).map(|_| rng.gen_range(-8..8)).collect();
    let widened: Vec<f32> = (0..k * n)
        .map(|x| scales[(x / n) / BLOCK * n + x % n].to_f32() * q[x] as f32)
        .collect();
    let len = PackedB::<Blocks>::packed_len(k, n);
    let mut data = vec![Blocks::ZERO_UNIT; len];
    let kb = KBlocks::for_format::<Blocks>(k);
    let panels = n.div_ceil(MOCK_NR);
    for p in 0..kb.count {
        let (k0, kc) = kb.block(p);
        for jp in 0..panels {
            let panel = panels * Blocks::panel_units(k0) + jp * Blocks::panel_units(kc);
            for kk in 0..kc {
                let block = panel + kk / BLOCK * Blocks::PANEL_BLOCK_UNITS;
                for j in 0..MOCK_NR.min(n - jp * MOCK_NR) {
                    let (row, col) = (k0 + kk, jp * MOCK_NR + j);
                    data[block + j] = Blocks(scales[row / BLOCK * n + col].0);
                    data[block + MOCK_NR + kk % BLOCK * MOCK_NR + j] =
                        Blocks(q[row * n + col] as u16);
                }
            }
        }
    }
    (PackedB::from_packed_units(data, 0, k, n), widened)
}

/// The block format runs through the loops (depth blocks of whole format blocks, panels at the
/// format's offsets, its own widening) on every kernel and thread count, and gives the bits of
/// the reference product with its widened values; unpacking widens the same way.
#[test]
fn a_block_format_runs_through_the_loops() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(48);
    let before = threads::num_threads();
    for &k in &[1, 8, 23, 40, 70] {
        for &n in &[1, 33, 100] {
            let (packed, bw) = pack_blocks(&mut rng, k, n);
            assert_eq!(packed.kb.kc % BLOCK, 0);
            let unpacked: Vec<f32> = packed.unpack_widened();
            assert!(unpacked
                .iter()
                .zip(&bw)
                .all(|(x, y)| x.to_bits() == y.to_bits()));
            for &m in &[1, 5, 13, 40] {
                let a: Vec<f32> = (0..m * k).map(|_| rng.gen_range(-2.0..2.0)).collect();
                let mut want = vec![0.0f32; m * n];
                let av = MatRef::from_slice(&a, m, k);
                gemm_reference(av, MatRef::from_slice(&bw, k, n), &mut want);
                let ldc = n + 2;
                for kernel in available() {
                    for t in [1, 3] {
                        threads::set_num_threads(t).unwrap();
                        let mut c = vec![f32::from_bits(0x7fc0_1234); (m + 1) * ldc];
                        gemm_packed(av, &packed, &mut c, ldc, &Options::with_kernel(kernel));
                        let what = format!("blocks {kernel:?} {t} threads k={k}");
                        assert_product(&c, &want, m, n, ldc, &what);
                    }
                }
            }
        }
    }
    threads::set_num_threads(before).unwrap();
}

/// B (k x n) in block format `W`: quantized from values of mixed magnitudes along K, packed
/// from its file blocks; and its dequantized values, from the file blocks by the format's
/// definition (independently of the panels).
fn block_b<W: crate::formats::BlockFormat>(
    rng: &mut rand::rngs::StdRng,
    k: usize,
    n: usize,
) -> (PackedB<W>, Vec<f32>) {
    use crate::formats::block::{quantize, widen_row, QK};
    let b: Vec<f32> = (0..k * n)
        .map(|_| rng.gen_range(-1.0f32..1.0) * 2f32.powi(rng.gen_range(-12..3)))
        .collect();
    let blocks = quantize::<W, f32>(MatRef::from_slice(&b, k, n)).unwrap();
    let run = k.div_ceil(QK) * W::FILE_BLOCK_BYTES;
    let mut want = vec![0f32; k * n];
    let mut col = vec![0f32; k];
    for j in 0..n {
        widen_row::<W, f32>(&blocks[j * run..(j + 1) * run], &mut col);
        for i in 0..k {
            want[i * n + j] = col[i];
        }
    }
    let packed = super::pack_blocks::pack::<W>(&blocks, k, n).unwrap();
    // Packing moves the blocks: unpacking gives them back, byte for byte.
    assert!(super::pack_blocks::unpack(&packed) == blocks, "k={k} n={n}");
    (packed, want)
}

/// Every family's kernels against B in each block format give the bits of the reference
/// product with the dequantized B: row counts 1 to 13 and more (tile edges, the wide kernel's
/// 1-3, several row tiles, the chunked few-rows path), partial panels and the wide kernel's
/// four, depth of one step, short last blocks, several depth blocks; 1 to 3 threads.
#[test]
fn block_format_kernels_match_reference_on_dequantized_values() {
    fn shapes<W: crate::formats::BlockFormat>(seed: u64)
    where
        f32: KernelsFor<W>,
    {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let kc = f32::KC_MAX;
        for &k in &[1, 7, 32, 33, 69, kc, kc + 5, 2 * kc + 40] {
            for &n in &[1, 17, 32, 33, 128, 130, 200] {
                let (packed, bw) = block_b::<W>(&mut rng, k, n);
                assert!(packed.unpack_widened::<f32>() == bw);
                for &m in &[1, 2, 3, 4, 5, 8, 11, 12, 13, 25, 40] {
                    let a: Vec<f32> = (0..m * k).map(|_| rng.gen_range(-2.0..2.0)).collect();
                    let av = MatRef::from_slice(&a, m, k);
                    let mut want = vec![0.0f32; m * n];
                    gemm_reference(av, MatRef::from_slice(&bw, k, n), &mut want);
                    let ldc = n + 3;
                    for kernel in available() {
                        let mut c = vec![f32::from_bits(0x7fc0_1234); (m + 1) * ldc];
                        gemm_packed(av, &packed, &mut c, ldc, &Options::with_kernel(kernel));
                        let what = format!("{} {kernel:?} k={k}", W::FORMAT_NAME);
                        assert_product(&c, &want, m, n, ldc, &what);
                    }
                }
            }
        }
    }
    let before = threads::num_threads();
    for t in 1..=3 {
        threads::set_num_threads(t).unwrap();
        shapes::<crate::formats::Q8_0>(30 + t as u64);
        shapes::<crate::formats::Q4_0>(40 + t as u64);
    }
    // Large enough for the parallel path and the few-rows chunks (two thread counts).
    fn large<W: crate::formats::BlockFormat>(
        rng: &mut rand::rngs::StdRng,
        m: usize,
        k: usize,
        n: usize,
    ) where
        f32: KernelsFor<W>,
    {
        let (packed, bw) = block_b::<W>(rng, k, n);
        let a: Vec<f32> = (0..m * k).map(|_| rng.gen_range(-2.0..2.0)).collect();
        let av = MatRef::from_slice(&a, m, k);
        let mut want = vec![0.0f32; m * n];
        gemm_reference(av, MatRef::from_slice(&bw, k, n), &mut want);
        for kernel in available() {
            let mut c = vec![f32::from_bits(0x7fc0_1234); (m + 1) * n];
            gemm_packed(av, &packed, &mut c, n, &Options::with_kernel(kernel));
            let what = format!("{} {kernel:?} {m}x{k}x{n}", W::FORMAT_NAME);
            assert_product(&c, &want, m, n, n, &what);
        }
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(9);
    for t in [1, 2] {
        threads::set_num_threads(t).unwrap();
        for (m, k, n) in [(8, 768, 520), (1, 1000, 700), (40, 300, 264), (100, 96, 64)] {
            large::<crate::formats::Q8_0>(&mut rng, m, k, n);
            large::<crate::formats::Q4_0>(&mut rng, m, k, n);
        }
    }
    threads::set_num_threads(before).unwrap();
}
