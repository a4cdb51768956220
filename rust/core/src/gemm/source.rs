//! The right-hand side as the loops read it: packed panels, or B's own rows.

use super::pack::{KBlocks, PackedB};
use super::view::MatRef;
use crate::formats::StorageFormat;

/// The right-hand side as the kernels read it.
pub(crate) enum BSource<'a, T: StorageFormat> {
    /// Packed into `NR`-column panels ([`PackedB`]).
    Packed(&'a PackedB<T>),
    /// Read in place (unit column stride): whole panels from B's rows, the partial last panel
    /// from `edge` (its columns packed).
    Rows {
        b: MatRef<'a, T>,
        edge: Option<PackedB<T>>,
        kb: KBlocks,
    },
}

impl<T: StorageFormat> BSource<'_, T> {
    pub(super) fn rows(&self) -> usize {
        match self {
            BSource::Packed(p) => p.rows(),
            BSource::Rows { b, .. } => b.rows,
        }
    }
    pub(super) fn cols(&self) -> usize {
        match self {
            BSource::Packed(p) => p.cols(),
            BSource::Rows { b, .. } => b.cols,
        }
    }
    pub(super) fn kb(&self) -> KBlocks {
        match self {
            BSource::Packed(p) => p.kb,
            BSource::Rows { kb, .. } => *kb,
        }
    }
    /// Panel `jp` of depth block `p`: its first value, the distance between its depth steps
    /// and its second half's offset (see the kernels' contract).
    #[inline(always)]
    pub(super) fn panel(&self, p: usize, jp: usize) -> (*const T, usize, usize) {
        match self {
            BSource::Packed(pb) => {
                let (ldb, hoff) = pb.layout(pb.kb.block(p).1);
                (pb.panel(p, jp), ldb, hoff)
            }
            BSource::Rows { b, edge, kb } => {
                let (k0, kc) = kb.block(p);
                if (jp + 1) * T::PANEL_NR <= b.cols {
                    // SAFETY: row k0, column jp * NR lies inside B.
                    let ptr = unsafe {
                        b.ptr
                            .offset(k0 as isize * b.rs + (jp * T::PANEL_NR) as isize)
                    };
                    (ptr, b.rs as usize, T::PANEL_NR / 2)
                } else {
                    let edge = edge.as_ref().expect("a partial panel is packed");
                    let (ldb, hoff) = edge.layout(kc);
                    (edge.panel(p, 0), ldb, hoff)
                }
            }
        }
    }
    /// Whether B is read in place (not from packed panels).
    #[inline(always)]
    pub(super) fn in_place(&self) -> bool {
        matches!(self, BSource::Rows { .. })
    }
    /// The distance between panels `jp` and `jp + 1` ... `jp + 3` when the four can go to the
    /// wide kernel together (each laid out as panel `jp`).
    #[inline(always)]
    pub(super) fn wide_stride(&self, p: usize, jp: usize) -> Option<usize> {
        match self {
            BSource::Packed(_) => Some(T::panel_units(self.kb().block(p).1)),
            BSource::Rows { b, .. } => ((jp + 4) * T::PANEL_NR <= b.cols).then_some(T::PANEL_NR),
        }
    }
}
