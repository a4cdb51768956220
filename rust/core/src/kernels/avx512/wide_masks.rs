//! The lane masks of the AVX-512 wide kernels' accumulators.

/// The lane masks of a wide call's 8 accumulator vectors of a row (vector `v`: panel `v / 2`,
/// its half `v % 2` of `lanes` columns): every lane of the first `P - 1` panels, the live
/// columns of panel `P - 1` (`cols_last` of them), none beyond.
#[inline(always)]
pub(super) fn wide_masks<const P: usize>(cols_last: usize, lanes: usize) -> [u32; 8] {
    let mut masks = [0u32; 8];
    for (v, m) in masks.iter_mut().enumerate() {
        let live = match (v / 2).cmp(&(P - 1)) {
            std::cmp::Ordering::Less => lanes,
            std::cmp::Ordering::Equal => cols_last.saturating_sub((v % 2) * lanes).min(lanes),
            std::cmp::Ordering::Greater => 0,
        };
        *m = ((1u64 << live) - 1) as u32;
    }
    masks
}
