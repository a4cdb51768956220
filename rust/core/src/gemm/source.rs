//! The right-hand side as the loops read it: packed panels, or B's own rows.

use super::pack::{KBlocks, PackedB};
use super::view::MatRef;
use crate::formats::{BPanel, StorageFormat};

/// The right-hand side as the kernels read it.
pub(crate) enum BSource<'a, T> {
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
    /// Panel `jp` of depth block `p` as the kernels read it.
    #[inline(always)]
    pub(super) fn panel(&self, p: usize, jp: usize) -> BPanel<T> {
        match self {
            BSource::Packed(pb) => pb.b_panel(p, jp),
            BSource::Rows { b, edge, kb } => {
                if (jp + 1) * T::PANEL_NR <= b.cols {
                    let k0 = kb.block(p).0;
                    // SAFETY: row k0, column jp * NR lies inside B.
                    let ptr = unsafe {
                        b.ptr
                            .offset(k0 as isize * b.rs + (jp * T::PANEL_NR) as isize)
                    };
                    BPanel {
                        ptr,
                        ldb: b.rs as usize,
                        hoff: T::PANEL_NR / 2,
                    }
                } else {
                    let edge = edge.as_ref().expect("a partial panel is packed");
                    edge.b_panel(p, 0)
                }
            }
        }
    }
    /// Whether B is read in place (not from packed panels).
    #[inline(always)]
    pub(super) fn in_place(&self) -> bool {
        matches!(self, BSource::Rows { .. })
    }
    /// The distance between panels `jp` and `jp + 1` ... `jp + panels - 1` when they can go
    /// to the wide kernel together (each laid out as panel `jp`).
    #[inline(always)]
    pub(super) fn wide_stride(&self, p: usize, jp: usize, panels: usize) -> Option<usize> {
        match self {
            BSource::Packed(_) => Some(T::panel_units(self.kb().block(p).1)),
            BSource::Rows { b, .. } => {
                ((jp + panels) * T::PANEL_NR <= b.cols).then_some(T::PANEL_NR)
            }
        }
    }
    /// Whether every panel of the `n` columns can go to the wide kernel (packed panels, or
    /// B's rows in place with no partial last panel, which is packed apart).
    pub(super) fn all_wide(&self, n: usize) -> bool {
        match self {
            BSource::Packed(_) => true,
            BSource::Rows { .. } => n % T::PANEL_NR == 0,
        }
    }
}
