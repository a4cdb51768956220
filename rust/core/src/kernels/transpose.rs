//! The loop every family's [`super::TransposeFn`] runs: groups of four rows, a family's block
//! of depth steps at a time.

/// Runs `block(rows, kk, dst)` for every group of four rows (`rows`: the group's first row,
/// `dst`: its first column) and every `step` depth steps up to the last whole `step` of `kc`;
/// returns the depth steps done.
///
/// # Safety
/// As for [`super::TransposeFn`], with `block` moving steps `kk .. kk + step` of a group.
#[inline(always)]
pub(super) unsafe fn four_row_groups<T>(
    (src, rs): (*const T, isize),
    groups: usize,
    kc: usize,
    dst: *mut T,
    step: usize,
    mut block: impl FnMut(*const T, usize, *mut T),
) -> usize {
    let steps = kc / step * step;
    for g in 0..groups {
        for kk in (0..steps).step_by(step) {
            block(src.offset(4 * g as isize * rs), kk, dst.add(4 * g));
        }
    }
    steps
}
