use super::*;
use crate::kernels::{BPanel, CTile, PrefetchRun, TileArgs, TileAux, WideArgs};
use crate::threads;
use pack::{line_start, pack_a, KBlocks};
use rand::{Rng, SeedableRng};
use slabs::{l2_holds_one_slab, pack_by_slabs, slab_columns, slab_count};

fn gemm_with<T: GemmElement>(
    kernel: Kernel,
    a: MatRef<'_, T>,
    b: &PackedB<T>,
    c: &mut [T],
    ldc: usize,
) {
    gemm(a, Rhs::Packed(b), c, ldc, &Options::with_kernel(kernel)).unwrap()
}

fn gemm_unpacked_with<T: GemmElement>(
    kernel: Kernel,
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    c: &mut [T],
    ldc: usize,
) {
    gemm(a, Rhs::InPlace(b), c, ldc, &Options::with_kernel(kernel)).unwrap()
}

fn gemm_packed<T: GemmElement>(a: MatRef<'_, T>, b: &PackedB<T>, c: &mut [T], ldc: usize) {
    gemm(a, Rhs::Packed(b), c, ldc, &Options::default()).unwrap()
}

/// `b` packed with its panels in halves or step by step, whichever kernel is in use.
fn pack_laid_out<T: crate::formats::ValueFormat>(b: MatRef<'_, T>, halves: bool) -> PackedB<T> {
    let data = vec![T::ZERO_UNIT; PackedB::<T>::buffer_len(b.rows, b.cols)];
    let start = line_start::<T>(data.as_ptr() as usize);
    PackedB::pack_at(b, data, start, halves)
}

fn random<T: Element>(rng: &mut rand::rngs::StdRng, n: usize) -> Vec<T> {
    (0..n)
        .map(|_| T::from_f64(rng.gen_range(-1.0..1.0)))
        .collect()
}

/// One product with `kernel` against the naive loop, bit for bit. The output sits inside a
/// larger buffer (row stride n + 3, one extra row before and after) filled with a sentinel
/// that must survive everywhere outside C.
fn check_product<T: GemmElement>(
    kernel: Kernel,
    rng: &mut rand::rngs::StdRng,
    m: usize,
    k: usize,
    n: usize,
) {
    let a = random::<T>(rng, m * k);
    let b = random::<T>(rng, k * n);
    let want = reference_product(&a, &b, m, k, n);
    // The packed-A buffer (reused, never cleared) full of NaN: the rows padding the last
    // panel keep it, so a kernel that read them would leave NaN in C or past its rows.
    let poison = |_: ()| {
        T::with_a_buffer(|buf| {
            buf.clear();
            buf.resize((m.div_ceil(12) * 12 + 12) * k, T::from_f64(f64::NAN));
        })
    };
    let ldc = n + 3;
    let sentinel = T::from_f64(12345.5);
    let off = ldc;
    // Both layouts of packed panels, whichever the kernel's family packs for.
    for halves in [false, true] {
        let pb = pack_laid_out(MatRef::from_slice(&b, k, n), halves);
        let mut c = vec![sentinel; (m + 2) * ldc];
        poison(());
        gemm_with(
            kernel,
            MatRef::from_slice(&a, m, k),
            &pb,
            &mut c[off..],
            ldc,
        );
        let what = if halves {
            "packed B (halves)"
        } else {
            "packed B"
        };
        check_output(kernel, &c, off, ldc, &want, sentinel, m, k, n, what);
    }
    // B read in place, from inside a wider matrix (row stride n + 5).
    let ldb = n + 5;
    let mut wide_b = vec![T::from_f64(f64::NAN); k * ldb];
    for r in 0..k {
        wide_b[r * ldb..r * ldb + n].copy_from_slice(&b[r * n..(r + 1) * n]);
    }
    let mut c = vec![sentinel; (m + 2) * ldc];
    poison(());
    let bview = unsafe { MatRef::from_raw(wide_b.as_ptr(), k, n, ldb as isize, 1) };
    gemm_unpacked_with(
        kernel,
        MatRef::from_slice(&a, m, k),
        bview,
        &mut c[off..],
        ldc,
    );
    check_output(kernel, &c, off, ldc, &want, sentinel, m, k, n, "B in place");
}

#[allow(clippy::too_many_arguments)]
fn check_output<T: GemmElement>(
    kernel: Kernel,
    c: &[T],
    off: usize,
    ldc: usize,
    want: &[T],
    sentinel: T,
    m: usize,
    k: usize,
    n: usize,
    what: &str,
) {
    for (idx, &v) in c.iter().enumerate() {
        let (r, col) = ((idx.wrapping_sub(off)) / ldc, (idx.wrapping_sub(off)) % ldc);
        if idx >= off && r < m && col < n {
            assert!(
                v.to_f64().to_bits() == want[r * n + col].to_f64().to_bits(),
                "{} {kernel:?} {what} m={m} n={n} k={k} at ({r},{col}): {v:?} vs {:?}",
                T::NAME,
                want[r * n + col]
            );
        } else {
            assert!(
                v == sentinel,
                "{} {kernel:?} {what} m={m} n={n} k={k}: wrote outside C at {idx}",
                T::NAME
            );
        }
    }
}

/// Every kernel, every small shape around the tile sizes, K around the depth block.
fn check_all_shapes<T: GemmElement>() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let kc = T::KC_MAX;
    for kernel in available() {
        let mr = T::gemm_kernels(kernel).mr;
        for &k in &[0usize, 1, kc - 1, kc, kc + 1, 2 * kc + 3] {
            for m in 0..=2 * mr + 1 {
                for n in (0..=2 * T::NR + 1).step_by(if k > kc { 3 } else { 1 }) {
                    check_product::<T>(kernel, &mut rng, m, k, n);
                }
            }
        }
    }
}

#[test]
fn kernels_match_reference_f32() {
    check_all_shapes::<f32>();
}

#[test]
fn kernels_match_reference_f64() {
    check_all_shapes::<f64>();
}

#[test]
fn strided_and_transposed_inputs() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    let (m, k, n) = (37, 900, 45);
    let at = random::<f64>(&mut rng, k * m); // A stored transposed (k x m)
    let b = random::<f64>(&mut rng, k * n);
    let a = unsafe { MatRef::from_raw(at.as_ptr(), m, k, 1, m as isize) };
    let mut want = vec![0.0; m * n];
    gemm_reference(a, MatRef::from_slice(&b, k, n), &mut want);
    // B read backwards along its rows (negative column stride).
    let brev: Vec<f64> = (0..k)
        .flat_map(|r| (0..n).rev().map(move |j| (r, j)))
        .map(|(r, j)| b[r * n + j])
        .collect();
    let bview = unsafe { MatRef::from_raw(brev.as_ptr().add(n - 1), k, n, n as isize, -1) };
    let pb = PackedB::pack(bview);
    let mut c = vec![0.0; m * n];
    gemm_packed(a, &pb, &mut c, n);
    assert_eq!(c, want);
    // B stored transposed (n x k, unit row stride): packed walking along k.
    let bt: Vec<f64> = (0..n)
        .flat_map(|j| (0..k).map(move |r| (r, j)))
        .map(|(r, j)| b[r * n + j])
        .collect();
    let bview = unsafe { MatRef::from_raw(bt.as_ptr(), k, n, 1, k as isize) };
    let mut c = vec![0.0; m * n];
    gemm_packed(a, &PackedB::pack(bview), &mut c, n);
    assert_eq!(c, want);
    // B's rows stored last to first (negative row stride, unit column stride): the row path.
    let brows: Vec<f64> = (0..k)
        .rev()
        .flat_map(|r| b[r * n..(r + 1) * n].to_vec())
        .collect();
    let bview =
        unsafe { MatRef::from_raw(brows.as_ptr().add((k - 1) * n), k, n, -(n as isize), 1) };
    let mut c = vec![0.0; m * n];
    gemm_packed(a, &PackedB::pack(bview), &mut c, n);
    assert_eq!(c, want);
    assert_eq!(PackedB::pack(bview).unpack(), b);
}

#[test]
fn thread_count_does_not_change_bits() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let (m, k, n) = (200, 700, 300);
    let a = random::<f32>(&mut rng, m * k);
    let b = random::<f32>(&mut rng, k * n);
    threads::set_num_threads(1).unwrap();
    let one = matmul(&a, &b, m, k, n);
    threads::set_num_threads(3).unwrap();
    let three = matmul(&a, &b, m, k, n);
    threads::set_num_threads(2).unwrap();
    let row = matmul(&a[17 * k..18 * k], &b, 1, k, n);
    assert_eq!(one, three);
    assert_eq!(&one[17 * n..18 * n], &row[..]);
}

#[test]
fn k_blocks_are_equal_sized() {
    let kb = pack::KBlocks::new(768, 512);
    assert_eq!((kb.kc, kb.count), (384, 2));
    let kb = pack::KBlocks::new(3072, 384);
    assert_eq!((kb.kc, kb.count), (384, 8));
    let kb = pack::KBlocks::new(1, 384);
    assert_eq!((kb.kc, kb.count), (1, 1));
}

/// Few rows whose every panel goes to the wide kernel read A compact or, one contiguous row,
/// in place: the same bits with A as contiguous rows, rows a longer stride apart and a
/// column-major view (the last two copied compact), with column counts that leave 1 to 3
/// panels to a thread's last call, packed B and B in place, 1 to 3 threads.
#[test]
fn few_rows_read_a_in_place_or_compact() {
    fn check<T: GemmElement>() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(23);
        let before = threads::num_threads();
        let nr = T::NR;
        for m in 1..=crate::kernels::WIDE_ROWS {
            for n in [nr - 3, 2 * nr, 5 * nr + 1, 7 * nr, 18 * nr, 30 * nr - 1] {
                for k in [1, 37, T::KC_MAX + 9] {
                    let store = random::<T>(&mut rng, m * (k + 5));
                    let b = random::<T>(&mut rng, k * n);
                    let pb = PackedB::pack(MatRef::from_slice(&b, k, n));
                    // SAFETY: each view's elements lie inside `store` (m rows of k + 5, or
                    // k columns of m).
                    let views = unsafe {
                        [
                            (
                                "rows",
                                MatRef::from_raw(store.as_ptr(), m, k, k as isize, 1),
                            ),
                            (
                                "strided rows",
                                MatRef::from_raw(store.as_ptr(), m, k, (k + 5) as isize, 1),
                            ),
                            (
                                "column-major",
                                MatRef::from_raw(store.as_ptr(), m, k, 1, m as isize),
                            ),
                        ]
                    };
                    for (what, a) in views {
                        let dense: Vec<T> = (0..m * k).map(|x| a.at(x / k, x % k)).collect();
                        let want = reference_product(&dense, &b, m, k, n);
                        for kernel in available() {
                            for t in 1..=3 {
                                threads::set_num_threads(t).unwrap();
                                for rhs in
                                    [Rhs::Packed(&pb), Rhs::InPlace(MatRef::from_slice(&b, k, n))]
                                {
                                    let ldc = n + 3;
                                    let sentinel = T::from_f64(12345.5);
                                    let mut c = vec![sentinel; (m + 2) * ldc];
                                    gemm(a, rhs, &mut c[ldc..], ldc, &Options::with_kernel(kernel))
                                        .unwrap();
                                    let what = format!("A {what}, {t} threads");
                                    check_output(
                                        kernel, &c, ldc, ldc, &want, sentinel, m, k, n, &what,
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
        threads::set_num_threads(before).unwrap();
    }
    check::<f32>();
    check::<f64>();
}

/// Few rows against many panels take the wide kernel (4 panels at a time): same bits.
#[test]
fn wide_kernel_matches_reference() {
    fn check<T: GemmElement>() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        for k in available().into_iter().filter(|&k| k != Kernel::Portable) {
            assert!(
                T::gemm_kernels(k).wide.is_some(),
                "{k:?} has no wide kernel"
            );
        }
        for kernel in available() {
            for m in 1..=4 {
                for n in [
                    3 * T::NR + 1,
                    4 * T::NR - 5,
                    4 * T::NR,
                    4 * T::NR + 1,
                    5 * T::NR - 3,
                    9 * T::NR + 7,
                ] {
                    for k in [1, T::KC_MAX, T::KC_MAX + 1, 1000] {
                        check_product::<T>(kernel, &mut rng, m, k, n);
                    }
                }
            }
        }
    }
    check::<f32>();
    check::<f64>();
}

#[test]
fn epilogue_sees_every_final_element_once() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(9);
    for &(m, k, n) in &[
        (1, 50, 200),
        (3, 700, 130),
        (5, 0, 40),
        (37, 385, 300),
        (200, 800, 97),
    ] {
        let a = random::<f32>(&mut rng, m * k);
        let b = random::<f32>(&mut rng, k * n);
        let pb = PackedB::pack(MatRef::from_slice(&b, k, n));
        let mut want = vec![0.0f32; m * n];
        gemm_packed(MatRef::from_slice(&a, m, k), &pb, &mut want, n);
        let seen: Vec<std::sync::atomic::AtomicU32> = (0..m * n)
            .map(|_| std::sync::atomic::AtomicU32::new(0))
            .collect();
        for threads in [1, 2] {
            threads::set_num_threads(threads).unwrap();
            let mut c = vec![f32::NAN; m * n];
            let epi = |mut t: Tile<'_, f32>| {
                let (i0, j0, cols) = (t.i0, t.j0, t.cols);
                for r in 0..t.rows {
                    let seg = t.row(r);
                    assert_eq!(seg.len(), cols);
                    let i = i0 + r;
                    for (j, v) in seg.iter_mut().enumerate() {
                        // Final values only: equal to the finished product here.
                        assert_eq!(v.to_bits(), want[i * n + j0 + j].to_bits());
                        seen[i * n + j0 + j].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        *v = *v * 2.0 + 1.0;
                    }
                }
            };
            let opts = Options::then(&epi);
            gemm(
                MatRef::from_slice(&a, m, k),
                Rhs::Packed(&pb),
                &mut c,
                n,
                &opts,
            )
            .unwrap();
            let after: Vec<f32> = want.iter().map(|&v| v * 2.0 + 1.0).collect();
            assert_eq!(c, after, "m={m} k={k} n={n}");
        }
        assert!(seen
            .iter()
            .all(|s| s.load(std::sync::atomic::Ordering::Relaxed) == 2));
    }
    threads::set_num_threads(2).unwrap();
}

#[test]
fn packing_a_over_a_used_buffer_writes_every_value() {
    fn check<T: GemmElement>() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let shapes = [
            (13usize, 7usize),
            (25, 300),
            (36, 389),
            (5, 1000),
            (1, 3),
            (6, 389),
            (17, 100),
            // Enough values to be packed on every thread.
            (41, 500),
        ];
        for (kernel, (m, k)) in available()
            .into_iter()
            .flat_map(|kr| shapes.into_iter().map(move |s| (kr, s)))
        {
            let kernels = T::gemm_kernels(kernel);
            let mr = kernels.mr;
            // Rows of A inside a wider matrix (row stride k + 5), as a view.
            let lda = k + 5;
            let a = random::<T>(&mut rng, m * lda);
            let view = unsafe { MatRef::from_raw(a.as_ptr(), m, k, lda as isize, 1) };
            let kb = KBlocks::new(k, 384);
            let mpad = m.div_ceil(mr) * mr;
            let mut fresh = Vec::new();
            pack_a(view, &kernels, kb, 1 << 20, &mut fresh);
            assert_eq!(fresh.len(), mpad * k);
            // Every value where the layout says, against the definition.
            for p in 0..kb.count {
                let (k0, kc) = kb.block(p);
                for ip in 0..mpad / mr {
                    let panel = &fresh[mpad * k0 + ip * mr * kc..][..mr * kc];
                    for kk in 0..kc {
                        // The live rows only: pad rows are never read by a kernel.
                        for i in 0..mr.min(m - ip * mr) {
                            let want = a[(ip * mr + i) * lda + k0 + kk];
                            assert_eq!(
                                panel[kk * mr + i].to_f64().to_bits(),
                                want.to_f64().to_bits(),
                                "{} m={m} k={k} block {p} panel {ip} ({kk}, {i})",
                                T::NAME
                            );
                        }
                    }
                }
            }
            // A buffer left over from a larger product, full of NaN: the same live values.
            let mut used = vec![T::from_f64(f64::NAN); fresh.len() + 100];
            pack_a(view, &kernels, kb, 1 << 20, &mut used);
            let live = |i: usize| {
                let p = (i / (mpad * kb.kc)).min(kb.count - 1);
                let (k0, kc) = kb.block(p);
                let ip = (i - mpad * k0) / (mr * kc);
                ip * mr + (i - mpad * k0) % (mr * kc) % mr < m
            };
            for (i, (x, y)) in fresh
                .iter()
                .zip(&used)
                .enumerate()
                .filter(|&(i, _)| live(i))
            {
                assert_eq!(
                    x.to_f64().to_bits(),
                    y.to_f64().to_bits(),
                    "m={m} k={k} at {i}"
                );
            }
        }
    }
    check::<f32>();
    check::<f64>();
}

#[test]
fn a_packed_by_the_work_items_matches_reference() {
    // M K >= A_LAZY_MIN and a row block for each of up to 3 threads: the work items pack A as
    // they go, and the items of the other column chunks find, or wait for, the panels packed.
    fn check<T: GemmElement>() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(23);
        let (m, k, n) = (400, 700, 70);
        assert!(m * k >= loops::A_LAZY_MIN && m.div_ceil(tuning::mc()) >= 3);
        let a = random::<T>(&mut rng, m * k);
        let b = random::<T>(&mut rng, k * n);
        let want = reference_product(&a, &b, m, k, n);
        let pb = PackedB::pack(MatRef::from_slice(&b, k, n));
        // The same A stored column by column, read with strides (1, m).
        let mut at = vec![T::ZERO; m * k];
        for i in 0..m {
            for j in 0..k {
                at[j * m + i] = a[i * k + j];
            }
        }
        let views = [MatRef::from_slice(&a, m, k), unsafe {
            MatRef::from_raw(at.as_ptr(), m, k, 1, m as isize)
        }];
        for (v, av) in views.into_iter().enumerate() {
            check_every_kernel_on_1_and_3_threads(
                m,
                n,
                &want,
                |c, ldc, opts| {
                    // The packed-A buffer full of NaN: a panel read before it is packed shows.
                    T::with_a_buffer(|buf| buf.fill(T::from_f64(f64::NAN)));
                    gemm(av, Rhs::Packed(&pb), c, ldc, opts).unwrap()
                },
                || format!("A view {v}"),
            );
        }
    }
    check::<f32>();
    check::<f64>();
}

#[test]
fn packing_b_into_a_used_buffer_matches_fresh_packing() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(21);
    for (k, n) in [(900usize, 45usize), (300, 64), (1, 1), (385, 33)] {
        let b = random::<f32>(&mut rng, k * n);
        let view = MatRef::from_slice(&b, k, n);
        let fresh = PackedB::pack(view);
        let used = vec![f32::NAN; PackedB::<f32>::buffer_len(k, n)];
        let reused = PackedB::pack_into(view, used);
        let (x, y) = (fresh.values(), reused.values());
        assert_eq!(x.len(), PackedB::<f32>::packed_len(k, n));
        assert!(
            x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits()),
            "k={k} n={n}"
        );
    }
}

#[test]
fn packed_panels_start_on_a_cache_line() {
    // Wherever a buffer lies, its panels start on a 64-byte boundary. Where the allocator
    // places a buffer is its own business (on one machine every one of these was aligned
    // already), so the offsets are checked two ways: `line_start` for every address a value
    // can have in a line, and packing at every start a buffer can need; then buffers from the
    // allocator, wherever they fall.
    fn check<T: StorageFormat + Element>() {
        let size = std::mem::size_of::<T>();
        for base in [0usize, 64, 4096 * 9] {
            for addr in (base..base + PACKED_ALIGN).step_by(size) {
                let s = line_start::<T>(addr);
                assert!(s * size < PACKED_ALIGN, "{}", T::NAME);
                assert_eq!((addr + s * size) % PACKED_ALIGN, 0, "{}", T::NAME);
            }
        }
        for (k, n) in [
            (crate::gemm::tuning::kc_max::<T>() + 5, 3),
            (7, 2 * T::PANEL_NR + 3),
        ] {
            let b: Vec<T> = (0..k * n).map(|i| T::from_f64((i % 97) as f64)).collect();
            let view = MatRef::from_slice(&b, k, n);
            for halves in [false, true] {
                let fresh = pack_laid_out(view, halves);
                for start in 0..PACKED_ALIGN / size {
                    let buf = vec![T::from_f64(-1.0); PackedB::<T>::buffer_len(k, n)];
                    let addr = buf.as_ptr() as usize;
                    let pb = PackedB::pack_at(view, buf, start, halves);
                    assert_eq!(pb.panel(0, 0) as usize, addr + start * size, "{}", T::NAME);
                    assert!(pb.values().iter().zip(fresh.values()).all(|(x, y)| x == y));
                    assert!(pb.unpack().iter().zip(&b).all(|(x, y)| x == y));
                }
            }
            let mut spacers = Vec::new();
            for tries in 0..200 {
                spacers.push(vec![0u8; 8 * (tries % 13) + 1]);
                let buf = vec![T::ZERO; PackedB::<T>::buffer_len(k, n)];
                let pb = PackedB::pack_into(view, buf);
                for p in 0..pb.kb.count {
                    for jp in 0..n.div_ceil(T::PANEL_NR) {
                        assert_eq!(pb.panel(p, jp) as usize % PACKED_ALIGN, 0, "{}", T::NAME);
                    }
                }
                assert!(pb.unpack().iter().zip(&b).all(|(x, y)| x == y));
            }
        }
    }
    check::<f32>();
    check::<f64>();
}

/// Panels are packed in halves for a family that asks for them (AVX2) and float32 / float64
/// values, step by step otherwise; the two layouts differ (a test of the halves that could
/// fail) and both unpack to B.
#[test]
fn packed_layout_follows_the_kernel_family() {
    fn check<T: StorageFormat + Element>(halves_for_avx2: bool) {
        let (k, n) = (crate::gemm::tuning::kc_max::<T>() + 7, 2 * T::PANEL_NR + 5);
        let b: Vec<T> = (0..k * n).map(|i| T::from_f64((i % 89) as f64)).collect();
        let view = MatRef::from_slice(&b, k, n);
        for kernel in Kernel::ALL {
            let pb = PackedB::try_pack_for(view, kernel).unwrap();
            let want = halves_for_avx2 && kernel == Kernel::Avx2 && kernel.built();
            assert_eq!(pb.halves(), want, "{} {kernel:?}", T::NAME);
            assert!(pb.unpack().iter().zip(&b).all(|(x, y)| x == y));
        }
        let (whole, halves) = (pack_laid_out(view, false), pack_laid_out(view, true));
        assert_eq!(halves.halves(), halves_for_avx2);
        assert_eq!(
            whole.values() != halves.values(),
            halves_for_avx2,
            "{}",
            T::NAME
        );
        assert!(halves.unpack().iter().zip(&b).all(|(x, y)| x == y));
    }
    check::<f32>(true);
    check::<f64>(true);
    // 16-bit panels stay step by step, even for AVX2 (a step is one cache line).
    let h = vec![crate::formats::Bf16(0x3f80); 300 * 70];
    let pb = PackedB::try_pack_for(MatRef::from_slice(&h, 300, 70), Kernel::Avx2).unwrap();
    assert!(!pb.halves());
}

#[test]
fn stream_kernel_matches_reference() {
    // One to eight rows against a B read in place that is wide enough for the stream kernel
    // (whole rows, one column range per thread): every row count, depths around the kernel's
    // eight-step passes, widths with and without a partial last vector, one and two threads; B
    // inside a wider NaN-padded matrix, A inside a wider matrix or transposed.
    fn check<T: GemmElement>() {
        let kernels: Vec<Kernel> = available()
            .into_iter()
            .filter(|&k| T::gemm_kernels(k).stream.is_some())
            .collect();
        for k in available().into_iter().filter(|&k| k != Kernel::Portable) {
            assert!(kernels.contains(&k), "{k:?} has no stream kernel");
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(31);
        let before = threads::num_threads();
        for (k, n) in [
            (0usize, 600usize),
            (1, 1031),
            (3, 512),
            (4, 1030),
            (5, 1111),
            (383, 1040),
            (768, 2304),
        ] {
            for m in 1..=crate::kernels::STREAM_ROWS {
                let ldb = n + 7;
                let mut bw = vec![T::from_f64(f64::NAN); k * ldb];
                let b = random::<T>(&mut rng, k * n);
                for r in 0..k {
                    bw[r * ldb..r * ldb + n].copy_from_slice(&b[r * n..(r + 1) * n]);
                }
                let lda = k + 3;
                let aw = random::<T>(&mut rng, m * lda);
                let a: Vec<T> = (0..m * k).map(|x| aw[(x / k) * lda + x % k]).collect();
                let at: Vec<T> = (0..k * m).map(|x| a[(x % m) * k + x / m]).collect();
                let want = reference_product(&a, &b, m, k, n);
                let bview = unsafe { MatRef::from_raw(bw.as_ptr(), k, n, ldb as isize, 1) };
                let views = [
                    unsafe { MatRef::from_raw(aw.as_ptr(), m, k, lda as isize, 1) },
                    unsafe { MatRef::from_raw(at.as_ptr(), m, k, 1, m as isize) },
                ];
                for t in [1usize, 2] {
                    threads::set_num_threads(t).unwrap();
                    for (av, &kernel) in views
                        .iter()
                        .flat_map(|v| kernels.iter().map(move |k| (*v, k)))
                    {
                        let ldc = n + 2;
                        let sentinel = T::from_f64(777.25);
                        let mut c = vec![sentinel; (m + 1) * ldc];
                        gemm_unpacked_with(kernel, av, bview, &mut c, ldc);
                        for (idx, v) in c.iter().enumerate() {
                            let (r, col) = (idx / ldc, idx % ldc);
                            let expect = if r < m && col < n {
                                want[r * n + col]
                            } else {
                                sentinel
                            };
                            assert_eq!(
                                v.to_f64().to_bits(),
                                expect.to_f64().to_bits(),
                                "{} {} m={m} k={k} n={n} threads={t} at ({r}, {col})",
                                kernel.name(),
                                T::NAME
                            );
                        }
                    }
                }
            }
        }
        threads::set_num_threads(before).unwrap();
    }
    check::<f32>();
    check::<f64>();
}

#[test]
fn column_chunks_of_a_large_b_match_reference() {
    // Chunks of 64 KiB (8 panels here) and a B of 750 KiB: more than four chunks and more
    // than one row block, so the chunked, chunk-major work order runs.
    let (m, k, n) = (200usize, 64usize, 3000usize);
    tuning::B_CHUNK_FOR_TESTS.store(64 << 10, std::sync::atomic::Ordering::Relaxed);
    let mut rng = rand::rngs::StdRng::seed_from_u64(12);
    let a = random::<f32>(&mut rng, m * k);
    let b = random::<f32>(&mut rng, k * n);
    let want = reference_product(&a, &b, m, k, n);
    let pb = PackedB::pack(MatRef::from_slice(&b, k, n));
    for threads in [1, 2, 3] {
        crate::threads::set_num_threads(threads).unwrap();
        let mut c = vec![f32::NAN; m * n];
        gemm_packed(MatRef::from_slice(&a, m, k), &pb, &mut c, n);
        assert!(
            c.iter().zip(&want).all(|(x, y)| x.to_bits() == y.to_bits()),
            "{threads} threads"
        );
    }
    crate::threads::set_num_threads(1).unwrap();
    tuning::B_CHUNK_FOR_TESTS.store(0, std::sync::atomic::Ordering::Relaxed);
}

/// C for a kernel called directly: `rows` rows of `cols` starting values `c0`, `ldc` apart,
/// with a row of `sentinel` before and after and `sentinel` past column `cols`; the kernel
/// gets the buffer from its second row on.
pub(super) fn c_between_sentinels<T: Element>(
    c0: &[T],
    rows: usize,
    cols: usize,
    ldc: usize,
    sentinel: T,
) -> Vec<T> {
    let mut c = vec![sentinel; (rows + 2) * ldc];
    for i in 0..rows {
        c[(i + 1) * ldc..(i + 1) * ldc + cols].copy_from_slice(&c0[i * cols..(i + 1) * cols]);
    }
    c
}

/// The contract's chain for a kernel called directly: packed A (`mr` values per depth step),
/// `kc` steps, C starting from `c0` (or zero).
pub(super) struct Chain<'a, T> {
    pub(super) a: &'a [T],
    pub(super) mr: usize,
    pub(super) kc: usize,
    pub(super) c0: Option<&'a [T]>,
    pub(super) sentinel: T,
}

impl<T: Element> Chain<'_, T> {
    /// Every value of `c` (made by [`c_between_sentinels`]) against the chain with B's value
    /// at (step, column) from `b_at`, bit for bit; the sentinels unchanged.
    pub(super) fn check(
        &self,
        c: &[T],
        rows: usize,
        cols: usize,
        ldc: usize,
        b_at: impl Fn(usize, usize) -> T,
        what: impl Fn() -> String,
    ) {
        for (idx, v) in c.iter().enumerate() {
            let (r, j) = (idx / ldc, idx % ldc);
            let want = if r >= 1 && r <= rows && j < cols {
                let i = r - 1;
                let mut acc = self.c0.map_or(T::ZERO, |c0| c0[i * cols + j]);
                for kk in 0..self.kc {
                    acc = self.a[kk * self.mr + i].mul_add(b_at(kk, j), acc);
                }
                acc
            } else {
                self.sentinel
            };
            assert_eq!(
                v.to_f64().to_bits(),
                want.to_f64().to_bits(),
                "{} at ({r}, {j})",
                what()
            );
        }
    }
}

/// What a tile kernel is asked to do beside its tile in a call of the test below: nothing,
/// copying the panel it reads, or prefetching.
#[derive(Clone, Copy, PartialEq)]
enum Entry {
    Tile,
    Copy,
    Prefetch,
}

/// Each micro-kernel called directly, against the contract's chain: every live row count,
/// every column count of a panel, depths 0-9 and 17 (every remainder of an unrolled depth
/// loop), from zero and continuing from C. Pad rows of A and B's columns past `cols` are NaN,
/// and C sits in a sentinel-filled buffer: reading the one or writing outside the other shows.
/// A copying tile kernel's copy holds the panel's every value bit for bit, and nothing past it.
/// A prefetching one prefetches 0 to 3 kc + 2 lines (more than one a step too) from a buffer
/// of its own.
#[test]
fn micro_kernels_called_directly_match_the_chain() {
    fn check<T: GemmElement>() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(41);
        let nan = T::from_f64(f64::NAN);
        let sentinel = T::from_f64(-3.5);
        let nr = T::NR;
        for kernel in available() {
            let spec = T::gemm_kernels(kernel);
            let mr = spec.mr;
            // The tile kernel alone, copying and prefetching, where the family's does those.
            let entries = [Some(Entry::Tile)]
                .into_iter()
                .chain([spec.tile_copies.then_some(Entry::Copy)])
                .chain([spec.tile_prefetches.then_some(Entry::Prefetch)])
                .flatten();
            let ahead = random::<T>(&mut rng, 64 * (3 * 17 + 2));
            for entry in entries {
                for kc in (0..=9).chain([17]) {
                    // B: kc steps of NR values, read in place (ldb > NR), copied in row order
                    // (ldb == NR) and packed in two halves (ldb == NR / 2, the second half
                    // kc steps on): value (kk, j) at `at(kk, j)`.
                    let h = nr / 2;
                    for (ldb, hoff) in [(nr, h), (4 * nr + 5, h), (h, kc * h)] {
                        let at = |kk: usize, j: usize| (j / h) * hoff + kk * ldb + j % h;
                        let mut b = random::<T>(&mut rng, hoff + kc * ldb + 4 * nr);
                        let a_full = random::<T>(&mut rng, kc * mr);
                        for rows in 1..=mr {
                            let mut a = a_full.clone();
                            for kk in 0..kc {
                                a[kk * mr + rows..(kk + 1) * mr].fill(nan);
                            }
                            for cols in 1..=nr {
                                for kk in 0..kc {
                                    for j in cols..nr {
                                        b[at(kk, j)] = nan;
                                    }
                                }
                                for accumulate in [false, true] {
                                    let ldc = nr + 3;
                                    let c0 = random::<T>(&mut rng, rows * cols);
                                    let mut c = c_between_sentinels(&c0, rows, cols, ldc, sentinel);
                                    // The copy's room, and one sentinel past it.
                                    let mut copy = vec![sentinel; kc * nr + 1];
                                    let cp = unsafe { c.as_mut_ptr().add(ldc) };
                                    let (ap, bp) = (a.as_ptr(), b.as_ptr());
                                    let args = TileArgs {
                                        rows,
                                        cols,
                                        kc,
                                        a: ap,
                                        b: BPanel { ptr: bp, ldb, hoff },
                                        c: CTile { ptr: cp, ldc },
                                        accumulate,
                                    };
                                    let aux = TileAux {
                                        copy_to: (entry == Entry::Copy)
                                            .then_some(copy.as_mut_ptr()),
                                        prefetch: (entry == Entry::Prefetch).then_some(
                                            PrefetchRun {
                                                ptr: ahead.as_ptr().cast(),
                                                lines: (rows * 5 + cols) % (3 * kc + 3),
                                            },
                                        ),
                                    };
                                    unsafe { (spec.tile)(&args, &aux) };
                                    if entry == Entry::Copy {
                                        // Every value of the panel, NaN columns too, bit for bit.
                                        for kk in 0..kc {
                                            for j in 0..nr {
                                                assert_eq!(
                                                    copy[kk * nr + j].to_f64().to_bits(),
                                                    b[at(kk, j)].to_f64().to_bits(),
                                                    "{} {kernel:?} copy rows={rows} cols={cols} \
                                                     kc={kc} ldb={ldb} at ({kk}, {j})",
                                                    T::NAME
                                                );
                                            }
                                        }
                                        assert!(copy[kc * nr] == sentinel, "copied past the panel");
                                    }
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
                                        |kk, j| b[at(kk, j)],
                                        || {
                                            format!(
                                                "{} {kernel:?} rows={rows} cols={cols} kc={kc} \
                                             ldb={ldb} acc={accumulate}",
                                                T::NAME
                                            )
                                        },
                                    );
                                }
                                // Restore the columns for the next width.
                                for kk in 0..kc {
                                    for j in cols..nr {
                                        b[at(kk, j)] = T::from_f64(0.25);
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
                // 1 to 4 panels: one after the other in row order (bstride = kc * NR, ldb =
                // NR) or in two halves (ldb = NR / 2, the second half kc steps on), or side by
                // side in the rows of a wider B (bstride = NR, ldb = 4 NR + 5); B ends with
                // the last panel's last value (a read past it is one past the allocation).
                let h = nr / 2;
                for (ldb, hoff, bstride) in
                    [(nr, h, kc * nr), (h, kc * h, kc * nr), (4 * nr + 5, h, nr)]
                {
                    let at = |kk: usize, j: usize| (j / h) * hoff + kk * ldb + j % h;
                    let len = (panels - 1) * bstride + at(kc.max(1) - 1, nr - 1) + 1;
                    let b = random::<T>(&mut rng, len);
                    for rows in 1..=crate::kernels::WIDE_ROWS {
                        // A packed in MR-row panels (the rows past `rows` NaN: never read), and
                        // compact (`rows` values a step) where the family's kernel takes it.
                        let steps: &[usize] = if spec.wide_compact_a {
                            &[mr, rows]
                        } else {
                            &[mr]
                        };
                        for (&a_step, cols_last) in
                            steps.iter().flat_map(|s| (1..=nr).map(move |c| (s, c)))
                        {
                            let mut a = random::<T>(&mut rng, kc * a_step);
                            for kk in 0..kc {
                                a[kk * a_step + rows..(kk + 1) * a_step].fill(nan);
                            }
                            let cols = (panels - 1) * nr + cols_last;
                            let bat = |kk: usize, j: usize| b[(j / nr) * bstride + at(kk, j % nr)];
                            for accumulate in [false, true] {
                                let ldc = 4 * nr + 2;
                                let c0 = random::<T>(&mut rng, rows * cols);
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
                                        "{} {kernel:?} wide rows={rows} panels={panels} \
                                         cols_last={cols_last} kc={kc} ldb={ldb} \
                                         a_step={a_step} acc={accumulate}",
                                        T::NAME
                                    )
                                });
                            }
                        }
                    }
                }
            }
        }
    }
    check::<f32>();
    check::<f64>();
}

/// On aarch64 the NEON kernels exist and join every sweep above.
#[cfg(target_arch = "aarch64")]
#[test]
fn neon_is_available_on_aarch64() {
    assert!(available().contains(&Kernel::Neon), "{:?}", available());
    assert_eq!(detect(), Kernel::Neon);
    assert_eq!(Kernel::from_name("neon"), Some(Kernel::Neon));
}

/// Slab counts and widths: whole panels, at least a column group, widths within one panel of
/// each other, a count the threads share evenly, and one piece for few rows, a B of one slab, a
/// deep B whose group-wide slab is too large, or float64 from `ONE_PIECE_MIN_ROWS_F64` rows with
/// a family whose tile reads a panel in several passes on an L2 of at most one slab
/// (`several`).
#[test]
fn slab_widths() {
    /// The slabs of `count` over `n` columns: consecutive, covering 0..n, whole panels (but
    /// the last), at least `min_panels` panels each, all within one panel of each other.
    fn check_slabs(count: usize, n: usize, nr: usize, min_panels: usize) {
        let mut next = 0;
        let (mut narrowest, mut widest) = (usize::MAX, 0);
        for s in 0..count {
            let (j0, j1) = slab_columns(s, count, n, nr);
            assert_eq!(j0, next, "slab {s} of {count} over {n}");
            assert!(
                j1 > j0 && (j1.is_multiple_of(nr) || j1 == n),
                "slab {s}: {j0}..{j1}"
            );
            let panels = (j1 - j0).div_ceil(nr);
            narrowest = narrowest.min(panels);
            widest = widest.max(panels);
            next = j1;
        }
        assert_eq!(next, n, "{count} slabs over {n}");
        assert!(
            narrowest >= min_panels,
            "{count} slabs over {n}: {narrowest} panels"
        );
        assert!(
            widest - narrowest <= 1,
            "{count} slabs over {n}: {narrowest}..{widest}"
        );
    }
    let group = tuning::nc_panels();
    for several in [false, true] {
        for t in [1usize, 2, 3] {
            // 768 x 2304 float32 (7 MiB packed): 7, 8 or 9 slabs.
            let count = slab_count::<f32>(256, 768, 2304, t, several);
            assert!(count > 1 && count.is_multiple_of(t), "{t}: {count}");
            check_slabs(count, 2304, f32::NR, group);
            assert_eq!(
                slab_count::<f32>(12, 768, 2304, t, several),
                1,
                "a tile quantum of rows"
            );
            assert_eq!(slab_count::<f32>(256, 64, 2304, t, several), 1, "one slab");
            assert_eq!(
                slab_count::<f32>(256, 50257, 768, t, several),
                1,
                "a deep B"
            );
            // Many rows: slabs for float32, and for float64 unless the tile takes several
            // passes. 768 x 2304 float64 (14 MiB packed, 144 panels): 14 or 15 slabs, which
            // no one width in whole panels divides.
            assert!(slab_count::<f32>(4096, 768, 2304, t, several) > 1);
            let below = ONE_PIECE_MIN_ROWS_F64 - 1;
            let count = slab_count::<f64>(below, 768, 2304, t, several);
            assert!(count > 1 && count.is_multiple_of(t), "{t}: {count}");
            check_slabs(count, 2304, f64::NR, group);
            for m in [ONE_PIECE_MIN_ROWS_F64, 4096] {
                let count = slab_count::<f64>(m, 768, 2304, t, several);
                assert_eq!(count == 1, several, "{m} rows, {t} threads: {count}");
            }
        }
    }
    // 3072 x 768: three group-wide slabs, not shared evenly by two threads.
    assert_eq!(slab_count::<f32>(256, 3072, 768, 1, false), 3);
    assert_eq!(slab_count::<f32>(256, 3072, 768, 2, false), 1);
    // Any count of at most one slab a panel: even widths, a partial last panel included.
    for n in [1usize, 31, 32, 33, 2304, 2305, 50257] {
        for count in [1usize, 2, 3, 7, 14] {
            if count <= n.div_ceil(32) {
                check_slabs(count, n, 32, 1);
            }
        }
    }
}

/// The one-piece rule for float64 follows the L2's size: one piece on an L2 of less than two
/// slabs (1 MiB) or of unknown size, slabs on one of two slabs or more (2 MiB); and sysfs's
/// cache sizes are read as it writes them.
#[test]
fn one_piece_rule_follows_the_l2_size() {
    let slab = tuning::slab_bytes();
    assert!(l2_holds_one_slab(None));
    assert!(l2_holds_one_slab(Some(slab)));
    assert!(l2_holds_one_slab(Some(2 * slab - 1)));
    assert!(!l2_holds_one_slab(Some(2 * slab)));
    assert!(!l2_holds_one_slab(Some(4 * slab)));
    assert_eq!(tuning::parse_cache_size("2048K\n"), Some(2 << 20));
    assert_eq!(tuning::parse_cache_size("1M"), Some(1 << 20));
    assert_eq!(tuning::parse_cache_size("32768"), Some(32768));
    for bad in ["", "K", "0K", "-1K", "2G", "1.5M", "x"] {
        assert_eq!(tuning::parse_cache_size(bad), None, "{bad:?}");
    }
    if let Some(l2) = tuning::l2_bytes() {
        assert!((64 << 10..=64 << 20).contains(&l2), "an L2 of {l2} bytes");
    }
}

/// The naive product of `a` (m x k) and `b` (k x n), row-major.
fn reference_product<T: GemmElement>(a: &[T], b: &[T], m: usize, k: usize, n: usize) -> Vec<T> {
    let mut want = vec![T::ZERO; m * n];
    gemm_reference(
        MatRef::from_slice(a, m, k),
        MatRef::from_slice(b, k, n),
        &mut want,
    );
    want
}

/// Where AVX2 runs, asserts that its float32 and float64 kernels have the optional entry
/// `$entry` (so that a test of the path it takes is not vacuous there).
macro_rules! assert_avx2_has {
    ($entry:ident) => {
        #[cfg(target_arch = "x86_64")]
        if Kernel::Avx2.supported() {
            use crate::kernels::HasKernels;
            assert!(f32::gemm_kernels(Kernel::Avx2).$entry);
            assert!(f64::gemm_kernels(Kernel::Avx2).$entry);
        }
    };
}

/// A random (m x k) A times a random (k x n) B packed once: the reference's bits for every
/// kernel on 1 and 3 threads, the epilogue included ([`check_every_kernel_on_1_and_3_threads`]).
fn check_packed_product<T: GemmElement>(
    rng: &mut rand::rngs::StdRng,
    m: usize,
    k: usize,
    n: usize,
) {
    let a = random::<T>(rng, m * k);
    let b = random::<T>(rng, k * n);
    let want = reference_product(&a, &b, m, k, n);
    let av = MatRef::from_slice(&a, m, k);
    for halves in [false, true] {
        let pb = pack_laid_out(MatRef::from_slice(&b, k, n), halves);
        check_every_kernel_on_1_and_3_threads(
            m,
            n,
            &want,
            |c, ldc, opts| gemm(av, Rhs::Packed(&pb), c, ldc, opts).unwrap(),
            || format!("m={m} k={k} n={n} halves={halves}"),
        );
    }
}

/// [`check_with_epilogue`] for `product` with every kernel, on 1 and on 3 threads (the thread
/// count is restored after).
fn check_every_kernel_on_1_and_3_threads<T: GemmElement>(
    m: usize,
    n: usize,
    want: &[T],
    product: impl Fn(&mut [T], usize, &Options<'_, T>),
    what: impl Fn() -> String,
) {
    let before = threads::num_threads();
    for kernel in available() {
        for nthreads in [1, 3] {
            threads::set_num_threads(nthreads).unwrap();
            check_with_epilogue(m, n, want, &product, kernel, || {
                format!("{} threads={nthreads}", what())
            });
        }
    }
    threads::set_num_threads(before).unwrap();
}

/// Runs `product` (C = A B into `c`, row stride `ldc`, with `opts`) with `kernel` and an
/// epilogue that checks every element it is handed against `want` at its own (global)
/// position; then checks C bit for bit, the padding past its `n` columns untouched, and that
/// the epilogue saw each element exactly once.
fn check_with_epilogue<T: GemmElement>(
    m: usize,
    n: usize,
    want: &[T],
    product: impl FnOnce(&mut [T], usize, &Options<'_, T>),
    kernel: Kernel,
    what: impl Fn() -> String,
) {
    let ldc = n + 3;
    let pad = T::from_f64(9.5);
    let mut c = vec![pad; m * ldc];
    let seen = std::sync::Mutex::new(vec![0u8; m * n]);
    let mark = |mut t: Tile<'_, T>| {
        let mut s = seen.lock().unwrap();
        for r in 0..t.rows {
            let row = t.row(r).to_vec();
            for (j, v) in row.iter().enumerate() {
                let idx = (t.i0 + r) * n + t.j0 + j;
                s[idx] += 1;
                assert_eq!(v.to_f64().to_bits(), want[idx].to_f64().to_bits());
            }
        }
    };
    let opts = Options {
        kernel,
        epilogue: Some(&mark),
    };
    product(&mut c, ldc, &opts);
    for i in 0..m {
        for j in 0..ldc {
            let w = if j < n { want[i * n + j] } else { pad };
            assert_eq!(
                c[i * ldc + j].to_f64().to_bits(),
                w.to_f64().to_bits(),
                "{} {} {} at ({i}, {j})",
                kernel.name(),
                T::NAME,
                what()
            );
        }
    }
    assert!(
        seen.into_inner().unwrap().iter().all(|&x| x == 1),
        "each element once: {}",
        what()
    );
}

/// B read in place, where a family with a copying tile kernel (AVX2) has the first row tile
/// copy each panel and the others read the copy: rows a multiple of 2 KiB apart (sharing L1
/// sets) and an odd number of values apart, the reference's bits for every kernel on 1 and 3
/// threads, row blocks of one tile to several, a partial last panel and column groups past the
/// first, one and several depth blocks, and the epilogue seeing every element once.
#[test]
fn in_place_b_copied_by_the_first_row_tile_matches_reference() {
    // Not a vacuous test where AVX2 runs: its kernels take the copying path here.
    assert_avx2_has!(tile_copies);
    fn check<T: GemmElement>() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(91);
        let nr = T::NR;
        for ldb in [
            2048 / std::mem::size_of::<T>(),
            4096 / std::mem::size_of::<T>(),
            9 * nr + 5 + 2,
        ] {
            for (m, k, n) in [
                (7usize, 5usize, nr - 1),
                (25, T::KC_MAX + 7, 9 * nr + 5),
                (64, 40, 9 * nr + 5),
                (13, T::KC_MAX + 7, 2 * nr),
                // Two row blocks (each one's first tile copies), as far as a copying family
                // reads a plain B in place.
                (200, 40, 9 * nr + 5),
            ] {
                let a = random::<T>(&mut rng, m * k);
                let b = random::<T>(&mut rng, k * n);
                let want = reference_product(&a, &b, m, k, n);
                // B's rows ldb apart, NaN between them.
                let mut wide_b = vec![T::from_f64(f64::NAN); k * ldb];
                for r in 0..k {
                    wide_b[r * ldb..r * ldb + n].copy_from_slice(&b[r * n..(r + 1) * n]);
                }
                let bview = unsafe { MatRef::from_raw(wide_b.as_ptr(), k, n, ldb as isize, 1) };
                let av = MatRef::from_slice(&a, m, k);
                check_every_kernel_on_1_and_3_threads(
                    m,
                    n,
                    &want,
                    |c, ldc, opts| gemm(av, Rhs::InPlace(bview), c, ldc, opts).unwrap(),
                    || format!("ldb={ldb} m={m} k={k} n={n}"),
                );
            }
        }
    }
    check::<f32>();
    check::<f64>();
}

/// A plain B is read in place up to the family's bound of rows ([`IN_PLACE_MAX_ROWS_COPYING`]
/// with a copying tile kernel, else [`IN_PLACE_MAX_ROWS`]) when its rows are contiguous, and
/// packed in the call past the bound or for any other layout.
#[test]
fn plain_b_read_in_place_up_to_the_family_bound() {
    assert_avx2_has!(tile_copies);
    const { assert!(IN_PLACE_MAX_ROWS < IN_PLACE_MAX_ROWS_COPYING) };
    fn check<T: GemmElement>() {
        let b = vec![T::ZERO; 6 * 10];
        let rows = MatRef::from_slice(&b, 6, 10);
        let columns = unsafe { MatRef::from_raw(b.as_ptr(), 6, 10, 1, 6) };
        for kernel in available() {
            let bound = if T::gemm_kernels(kernel).tile_copies {
                IN_PLACE_MAX_ROWS_COPYING
            } else {
                IN_PLACE_MAX_ROWS
            };
            for m in [1, IN_PLACE_MAX_ROWS, bound] {
                assert!(
                    matches!(Rhs::plain(rows, m, kernel), Rhs::InPlace(_)),
                    "{kernel:?} {m}"
                );
                assert!(matches!(Rhs::plain(columns, m, kernel), Rhs::PackHere(_)));
            }
            assert!(matches!(
                Rhs::plain(rows, bound + 1, kernel),
                Rhs::PackHere(_)
            ));
        }
    }
    check::<f32>();
    check::<f64>();
}

/// Row blocks of at most `FEW_ROWS_CHUNKED` rows against packed panels, which a family with a
/// prefetching tile kernel (AVX2, AVX-512) takes in depth chunks of `FEW_ROWS_CHUNK` steps: the reference's bits
/// for every kernel on 1 and 3 threads, 1 to 37 rows (one tile to four, the first past the
/// chunked ones), depths around the chunk and the depth block (a short last chunk, several
/// blocks), a partial last panel and column groups past the first, and the epilogue seeing
/// every element once.
#[test]
fn few_rows_in_depth_chunks_match_reference() {
    // Not a vacuous test where AVX2 runs: its kernels take the chunked path here (and so do
    // the AVX-512 ones).
    assert_avx2_has!(tile_prefetches);
    fn check<T: GemmElement>() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(93);
        let (ch, kc, nr) = (loops::FEW_ROWS_CHUNK, T::KC_MAX, T::NR);
        for k in [ch - 1, ch + 1, 2 * ch + 5, kc, 2 * kc + ch + 3] {
            for m in [1usize, 4, 6, 7, 8, 12, 13, 24, 31, 36, 37] {
                let n = if m.is_multiple_of(2) {
                    9 * nr + 5
                } else {
                    2 * nr - 3
                };
                check_packed_product::<T>(&mut rng, m, k, n);
            }
        }
    }
    check::<f32>();
    check::<f64>();
}

/// Row blocks of more than the chunked rows against packed panels, where the row tiles of each
/// column group and depth block prefetch the next one (AVX2): the reference's bits for every
/// kernel on 1 and 3 threads, one and two row blocks, a short last row tile, several depth
/// blocks, column groups past the first and a partial last panel, and the epilogue seeing
/// every element once.
#[test]
fn row_tiles_prefetching_the_next_group_match_reference() {
    // Not a vacuous test where AVX2 runs: its kernels take the prefetching path here.
    assert_avx2_has!(tile_prefetches);
    fn check<T: GemmElement>() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(57);
        let (kc, nr) = (T::KC_MAX, T::NR);
        for (m, k, n) in [
            (37, 2 * kc + 3, 9 * nr + 5),
            (64, kc + 1, 17 * nr - 2),
            (100, 3 * kc - 1, 10 * nr),
            (2 * MC + 11, kc + 7, 9 * nr + 1),
        ] {
            check_packed_product::<T>(&mut rng, m, k, n);
        }
    }
    check::<f32>();
    check::<f64>();
}

/// A plain B packed for the product in slabs of columns (the `Rhs::PackHere` path): the
/// reference's bits for every kernel on 1 to 3 threads, slabs of one panel, of about four and
/// two slabs (widths one panel apart, a last panel of fewer columns), a depth of several blocks,
/// and the epilogue seeing every element once at its own column.
#[test]
fn slabs_of_a_b_packed_here_match_reference() {
    fn check<T: GemmElement>() {
        let before = threads::num_threads();
        let mut rng = rand::rngs::StdRng::seed_from_u64(77);
        let nr = T::NR;
        let k = 700;
        for (m, n) in [
            (13usize, 4 * nr * 2 + 5),
            (40, 4 * nr * 3),
            (25, 4 * nr + 1),
        ] {
            let a = random::<T>(&mut rng, m * k);
            let b = random::<T>(&mut rng, k * n);
            let want = reference_product(&a, &b, m, k, n);
            let panels = n.div_ceil(nr);
            for (kernel, slabs, nthreads) in available()
                .into_iter()
                .flat_map(|kn| [(kn, panels), (kn, panels.div_ceil(4)), (kn, 2)])
                .flat_map(|(kn, sl)| [1usize, 2, 3].map(|t| (kn, sl, t)))
            {
                threads::set_num_threads(nthreads).unwrap();
                let (av, bv) = (MatRef::from_slice(&a, m, k), MatRef::from_slice(&b, k, n));
                check_with_epilogue(
                    m,
                    n,
                    &want,
                    |c, ldc, opts| pack_by_slabs(av, bv, slabs, c, ldc, opts),
                    kernel,
                    || format!("m={m} n={n} slabs={slabs} threads={nthreads}"),
                );
            }
        }
        threads::set_num_threads(before).unwrap();
    }
    check::<f32>();
    check::<f64>();
}
