//! Keys and values kept for attention, packed in the layouts the matmul kernels read, and
//! grown one position at a time. The same structure serves a whole forward pass (filled for
//! all positions, then read) and generation (kept between decode steps), so both run the same
//! arithmetic.

use crate::kernels::TransposeFn;
use crate::Element;

/// Keys per attention block (eight 12-row tiles, three 32-column panels, so no tile is part
/// empty); block boundaries are absolute positions (multiples of `KB`), so a query's result
/// depends only on the positions before it, whatever the sequence length.
pub const KB: usize = 96;

/// Keys and values of one (sequence, head).
///
/// * `kt`: K transposed, in panels of `T::NR` positions. A whole panel p (its `NR` positions
///   all held, `p < len / NR`) holds `dh` rows of `NR` values (`kt[p*dh*NR + d*NR + j]` =
///   `K[p*NR + j][d]`). The last, partly filled panel (`p = len / NR`) holds its keys row by
///   row instead (`kt[p*dh*NR + j*dh + d]` = `K[p*NR + j][d]`, `j < len % NR`), and is
///   transposed in place when its last position arrives. Appending a key so writes `dh`
///   consecutive values, not one value in each of `dh` cache lines (a column of the panel),
///   and attention reads only the live keys of that panel ([`HeadKv::tail_transposed`]).
/// * `v`: V in blocks of `KB` positions; block b holds the `dh` columns in panels of `NR`:
///   `v[b*KB*dhpad + jp*KB*NR + k*NR + c]` = `V[b*KB + k][jp*NR + c]`.
#[derive(Clone)]
pub struct HeadKv<T> {
    pub dh: usize,
    pub len: usize,
    pub kt: Vec<T>,
    pub v: Vec<T>,
}

impl<T: Element> HeadKv<T> {
    pub fn new(dh: usize) -> Self {
        HeadKv {
            dh,
            len: 0,
            kt: Vec::new(),
            v: Vec::new(),
        }
    }

    pub fn dh_pad(&self) -> usize {
        self.dh.div_ceil(T::NR) * T::NR
    }

    pub fn capacity(&self) -> usize {
        self.v.len() / (self.dh_pad() * KB).max(1) * KB
    }

    /// Make room for `n` positions in all (rounded up to whole blocks).
    pub fn reserve(&mut self, n: usize) {
        let cap = n.div_ceil(KB) * KB;
        if cap > self.capacity() {
            self.kt.resize(cap * self.dh, T::ZERO);
            self.v.resize(cap * self.dh_pad(), T::ZERO);
        }
    }

    /// Forget every position (keeps the memory).
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Append one position's key and value (each `dh` values, `k[d]` read with stride 1).
    pub fn push(&mut self, k: &[T], v: &[T]) {
        let t = self.len;
        self.reserve(t + 1);
        self.put(t, &k[..self.dh], &v[..self.dh]);
        self.len = t + 1;
    }

    /// Append `count` positions at once: position `i`'s key is the `dh` values of `src` from
    /// `i * ld + k_at`, its value those from `i * ld + v_at` (rows of a fused QKV product).
    /// The same layout as `count` calls of [`HeadKv::push`], with room made once.
    pub fn push_rows(&mut self, src: &[T], ld: usize, (k_at, v_at): (usize, usize), count: usize) {
        let dh = self.dh;
        assert!(
            count == 0 || src.len() >= (count - 1) * ld + k_at.max(v_at) + dh,
            "push_rows: {count} rows of {ld} values do not fit in {} values",
            src.len()
        );
        let t0 = self.len;
        self.reserve(t0 + count);
        for (i, row) in src.chunks(ld).take(count).enumerate() {
            self.put(t0 + i, &row[k_at..k_at + dh], &row[v_at..v_at + dh]);
        }
        self.len = t0 + count;
    }

    /// Writes position `t`'s key (a row of its panel, which is transposed once whole) and
    /// value (in NR-value runs).
    #[inline(always)]
    fn put(&mut self, t: usize, k: &[T], v: &[T]) {
        let (dh, nr) = (self.dh, T::NR);
        let panel = &mut self.kt[(t / nr) * dh * nr..(t / nr + 1) * dh * nr];
        panel[(t % nr) * dh..(t % nr + 1) * dh].copy_from_slice(k);
        if t % nr == nr - 1 {
            transpose_panel(panel, nr, dh);
        }
        let vbase = (t / KB) * KB * self.dh_pad() + (t % KB) * nr;
        for (jp, run) in v.chunks(nr).enumerate() {
            let at = vbase + jp * KB * nr;
            self.v[at..at + run.len()].copy_from_slice(run);
        }
    }

    /// Positions whose keys lie in whole, transposed panels.
    #[inline(always)]
    pub fn whole(&self) -> usize {
        self.len / T::NR * T::NR
    }

    /// Forgets the positions from `len` on; a panel that was whole and no longer is goes back
    /// to rows.
    pub fn truncate(&mut self, len: usize) {
        let (dh, nr) = (self.dh, T::NR);
        if len < self.whole() && len % nr != 0 {
            let p = len / nr;
            transpose_panel(&mut self.kt[p * dh * nr..(p + 1) * dh * nr], dh, nr);
        }
        self.len = self.len.min(len);
    }

    /// The keys of the last, partly filled panel as a K^T panel: `out[d*NR + j]` =
    /// `K[whole + j][d]` for the `len - whole` live positions `j` (columns up to the next
    /// multiple of four may hold what the panel's unused rows held; no kernel result reads
    /// them). `out` is made `dh * NR` long. `transpose`: a family's way of moving rows into
    /// columns, for the depth steps it takes.
    #[inline(always)]
    pub fn tail_transposed(&self, out: &mut Vec<T>, transpose: Option<TransposeFn<T>>) {
        let (dh, nr, w) = (self.dh, T::NR, self.whole());
        if out.len() < dh * nr {
            out.resize(dh * nr, T::ZERO);
        }
        let live = self.len - w;
        // The panel's room: NR rows of dh values (room is made in whole key blocks).
        let panel = &self.kt[w * dh..(w + nr) * dh];
        let groups = live.div_ceil(4);
        debug_assert!(4 * groups <= nr);
        // SAFETY: rows 0 .. 4 * groups <= NR lie in the panel, `out` has dh steps of NR.
        let done = transpose.map_or(0, |f| unsafe {
            f(
                panel.as_ptr(),
                dh as isize,
                groups,
                dh,
                out.as_mut_ptr(),
                nr,
            )
        });
        for (j, row) in panel.chunks_exact(dh).take(live).enumerate() {
            for (d, &x) in row.iter().enumerate().skip(done) {
                out[d * nr + j] = x;
            }
        }
    }

    /// Asks the cache for the lines that appending position `len` will write (a key's `dh`
    /// values in a row, a value's NR-value runs), with the intent to write them. A hint only:
    /// nothing is read or written, and no room is made.
    pub fn prefetch_push(&self) {
        let (t, dh, nr) = (self.len, self.dh, T::NR);
        let k = self
            .kt
            .as_ptr()
            .wrapping_add((t / nr) * dh * nr + (t % nr) * dh);
        let lines = (dh * std::mem::size_of::<T>()).div_ceil(64) + 1;
        for i in 0..lines {
            crate::kernels::prefetch_write(k.cast::<u8>().wrapping_add(i * 64));
        }
        let v = self
            .v
            .as_ptr()
            .wrapping_add((t / KB) * KB * self.dh_pad() + (t % KB) * nr);
        for jp in 0..self.dh_pad() / nr {
            crate::kernels::prefetch_write(v.wrapping_add(jp * KB * nr));
        }
    }

    /// Pointer to the K^T panel that starts at position `pos` (a multiple of NR, before
    /// [`HeadKv::whole`]).
    #[inline(always)]
    pub fn kt_panel(&self, pos: usize) -> *const T {
        debug_assert!(pos % T::NR == 0 && pos < self.whole());
        unsafe { self.kt.as_ptr().add((pos / T::NR) * self.dh * T::NR) }
    }

    /// Pointer to V panel `jp` (columns jp*NR..) of key block `b`.
    #[inline(always)]
    pub fn v_panel(&self, b: usize, jp: usize) -> *const T {
        unsafe {
            self.v
                .as_ptr()
                .add(b * KB * self.dh_pad() + jp * KB * T::NR)
        }
    }

    pub fn nbytes(&self) -> usize {
        (self.kt.len() + self.v.len()) * std::mem::size_of::<T>()
    }
}

/// Transposes in place the `rows x cols` matrix `panel` holds row by row (it then holds the
/// `cols x rows` transpose row by row).
fn transpose_panel<T: Copy>(panel: &mut [T], rows: usize, cols: usize) {
    let rowwise = panel.to_vec();
    for (r, row) in rowwise.chunks_exact(cols).enumerate() {
        for (c, &x) in row.iter().enumerate() {
            panel[c * rows + r] = x;
        }
    }
}

/// Every layer's keys and values for a batch of sequences: `layers[l][b * n_heads + h]`.
#[derive(Clone)]
pub struct KvCache<T> {
    pub batch: usize,
    pub n_heads: usize,
    pub layers: Vec<Vec<HeadKv<T>>>,
}

impl<T: Element> KvCache<T> {
    pub fn new(n_layers: usize, batch: usize, n_heads: usize, dh: usize) -> Self {
        KvCache {
            batch,
            n_heads,
            layers: (0..n_layers)
                .map(|_| vec![HeadKv::new(dh); batch * n_heads])
                .collect(),
        }
    }

    /// Positions held (the same for every sequence of the batch).
    pub fn len(&self) -> usize {
        self.layers
            .first()
            .and_then(|l| l.first())
            .map_or(0, |h| h.len)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn clear(&mut self) {
        self.truncate(0);
    }

    /// Forget the positions from `len` on (an interrupted step leaves the cache as it was).
    pub fn truncate(&mut self, len: usize) {
        for h in self.layers.iter_mut().flatten() {
            h.truncate(len);
        }
    }

    pub fn nbytes(&self) -> usize {
        self.layers.iter().flatten().map(|h| h.nbytes()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pushing_rows_at_once_matches_pushing_one_by_one() {
        // Runs that start inside a panel and a block, cross panel and block boundaries, and a
        // head width that is not a whole number of panels; the rows lie inside wider rows.
        fn check<T: Element>() {
            for dh in [64usize, 40, 1] {
                let ld = 3 * dh + 5;
                for (before, count) in [(0usize, 150usize), (90, 7), (31, 200), (5, 0)] {
                    let n = before + count;
                    let src: Vec<T> = (0..n * ld).map(|i| T::from_f64(i as f64 - 0.5)).collect();
                    let (k_at, v_at) = (dh + 2, 2 * dh + 3);
                    let row = |t: usize| &src[t * ld..(t + 1) * ld];
                    let (mut one, mut many) = (HeadKv::<T>::new(dh), HeadKv::<T>::new(dh));
                    for t in 0..n {
                        one.push(&row(t)[k_at..k_at + dh], &row(t)[v_at..v_at + dh]);
                    }
                    for t in 0..before {
                        many.push(&row(t)[k_at..k_at + dh], &row(t)[v_at..v_at + dh]);
                    }
                    many.push_rows(&src[before * ld..], ld, (k_at, v_at), count);
                    assert_eq!((one.len, many.len), (n, n));
                    let bits = |x: &[T]| x.iter().map(|v| v.to_f64().to_bits()).collect::<Vec<_>>();
                    assert_eq!(
                        bits(&one.kt),
                        bits(&many.kt),
                        "{} dh={dh} {before}+{count}",
                        T::NAME
                    );
                    assert_eq!(
                        bits(&one.v),
                        bits(&many.v),
                        "{} dh={dh} {before}+{count}",
                        T::NAME
                    );
                    // And the layout is the documented one: whole panels transposed, the
                    // last one's keys in rows.
                    let (nr, whole) = (T::NR, one.whole());
                    for t in 0..n {
                        for d in 0..dh {
                            let at = if t < whole {
                                (t / nr) * dh * nr + d * nr + t % nr
                            } else {
                                (t / nr) * dh * nr + (t % nr) * dh + d
                            };
                            let k = one.kt[at];
                            assert_eq!(k.to_f64(), row(t)[k_at + d].to_f64());
                            let (b, kk) = (t / KB, t % KB);
                            let v = one.v[b * KB * one.dh_pad()
                                + (d / T::NR) * KB * T::NR
                                + kk * T::NR
                                + d % T::NR];
                            assert_eq!(v.to_f64(), row(t)[v_at + d].to_f64());
                        }
                    }
                }
            }
        }
        check::<f32>();
        check::<f64>();
    }

    /// Keys `0 .. n` (key t's value d is `t * 1000 + d`) in a head of width `dh`.
    fn filled<T: Element>(dh: usize, n: usize) -> HeadKv<T> {
        let mut h = HeadKv::<T>::new(dh);
        for t in 0..n {
            let k: Vec<T> = (0..dh)
                .map(|d| T::from_f64((t * 1000 + d) as f64))
                .collect();
            h.push(&k, &k);
        }
        h
    }

    #[test]
    fn the_last_panel_reads_back_transposed_and_truncating_keeps_every_key() {
        fn check<T: crate::kernels::HasKernels>() {
            let nr = T::NR;
            for dh in [64usize, 40, 1] {
                for n in [1, nr - 1, nr, nr + 1, 3 * nr + 5, KB + 7] {
                    let h = filled::<T>(dh, n);
                    assert_eq!(h.whole(), n / nr * nr);
                    // One value at a time, and through every family's transposition.
                    let packers = crate::kernels::available()
                        .into_iter()
                        .map(|k| (k.name(), T::transposer(k)));
                    for (name, pack) in [("none", None)].into_iter().chain(packers) {
                        let mut out = vec![T::from_f64(f64::NAN); 3];
                        h.tail_transposed(&mut out, pack);
                        assert_eq!(out.len(), dh * nr);
                        for j in 0..n - h.whole() {
                            for d in 0..dh {
                                let want = ((h.whole() + j) * 1000 + d) as f64;
                                let got = out[d * nr + j].to_f64();
                                assert_eq!(got, want, "{} {name} n={n} dh={dh}", T::NAME);
                            }
                        }
                    }
                    // Truncated anywhere, then filled again with other keys: the cache holds
                    // what a cache filled that way from the start would.
                    for len in [0, 1, nr - 1, nr, nr + 3, n.saturating_sub(1), n] {
                        let len = len.min(n);
                        let mut cut = h.clone();
                        cut.truncate(len);
                        assert_eq!(cut.len, len);
                        let mut fresh = filled::<T>(dh, len);
                        for t in len..n + 2 {
                            let k: Vec<T> = (0..dh)
                                .map(|d| T::from_f64(-((t * 7 + d) as f64)))
                                .collect();
                            cut.push(&k, &k);
                            fresh.push(&k, &k);
                        }
                        let used = |x: &HeadKv<T>| {
                            x.kt[..x.len * dh]
                                .iter()
                                .map(|v| v.to_f64().to_bits())
                                .collect::<Vec<_>>()
                        };
                        assert_eq!(
                            used(&cut),
                            used(&fresh),
                            "{} n={n} len={len} dh={dh}",
                            T::NAME
                        );
                    }
                }
            }
        }
        check::<f32>();
        check::<f64>();
    }
}
