//! How the AVX2 wide kernels take a call's vectors: the `4 P` vectors a row of the `P` panels
//! side by side (vector `v` is columns `v L .. v L + L` of the panels, `L` lanes), in groups of
//! consecutive vectors, each group one pass over the depth block with its accumulators in
//! registers (16 ymm registers: 12 accumulators beside the broadcast A values and B).

/// Vectors of a group of at most `g` vectors from vector `v0`, of a call of `panels` panels
/// (none past the panels' `4 panels` vectors).
#[inline(always)]
pub(super) fn vectors(v0: usize, g: usize, panels: usize) -> usize {
    (4 * panels).min(v0 + g).saturating_sub(v0)
}

/// The live columns of vector `v` of a call of `panels` panels of `lanes`-column vectors:
/// whole vectors in the first `panels - 1` panels, the last panel's `cols_last` columns after
/// that (0 for a vector wholly past them).
#[inline(always)]
pub(super) fn live_columns(v: usize, panels: usize, cols_last: usize, lanes: usize) -> usize {
    if v < 4 * (panels - 1) {
        lanes
    } else {
        cols_last
            .saturating_sub((v - 4 * (panels - 1)) * lanes)
            .min(lanes)
    }
}

/// `$group::<R, G, V0, P>($w)` over every vector of the wide call `$w` (rows `R` 1 to 3,
/// panels `P` 1 to 4): in groups of as many as 12 accumulators hold (1 row: 8 vectors, 2 rows:
/// 6, 3 rows: 4), or with `$by_panel` a panel (4 vectors) a group.
macro_rules! wide_groups {
    ($w:expr, $group:ident, $by_panel:expr) => {
        $crate::kernels::contract::by_rows!($w.rows, [1, 2, 3], R => {
            $crate::kernels::contract::by_panels!($w.panels, P => match (R, $by_panel) {
                (1, false) => {
                    $group::<R, 8, 0, P>($w);
                    if P > 2 {
                        $group::<R, 8, 8, P>($w);
                    }
                }
                (2, false) => {
                    $group::<R, 6, 0, P>($w);
                    if P > 1 {
                        $group::<R, 6, 6, P>($w);
                    }
                    if P > 3 {
                        $group::<R, 4, 12, P>($w);
                    }
                }
                _ => {
                    $group::<R, 4, 0, P>($w);
                    if P > 1 {
                        $group::<R, 4, 4, P>($w);
                    }
                    if P > 2 {
                        $group::<R, 4, 8, P>($w);
                    }
                    if P > 3 {
                        $group::<R, 4, 12, P>($w);
                    }
                }
            })
        })
    };
}
pub(super) use wide_groups;
