//! Packing a block format's matrix (see [`crate::formats::block`]): from a file's blocks into
//! the panels the kernels read, and back.

use super::pack::{line_start, KBlocks};
use super::PackedB;
use crate::error::Result;
use crate::formats::block::{bytes_of, file_bytes, BlockFormat, QK, SCALE_BYTES};
use crate::threads;

/// Packs a (K x N) matrix of `W` from its file blocks (`blocks`: N runs of `ceil(K / 32)`
/// blocks, see the module documentation), every block moved as it is: the panels hold the same
/// scales and integers. `Error::Value` when `blocks` has the wrong length, `Error::Memory`
/// when the panels cannot be allocated.
pub fn pack<W: BlockFormat>(blocks: &[u8], k: usize, n: usize) -> Result<PackedB<W>> {
    if Some(blocks.len()) != file_bytes::<W>(k, n) {
        return crate::value_error!(
            "{} blocks of a ({k}, {n}) matrix: expected {} blocks of {} bytes ({} bytes), got {} bytes",
            W::FORMAT_NAME,
            n.saturating_mul(k.div_ceil(QK)),
            W::FILE_BLOCK_BYTES,
            file_bytes::<W>(k, n).map_or("too many".to_string(), |b| b.to_string()),
            blocks.len()
        );
    }
    let len = PackedB::<W>::buffer_len(k, n);
    let mut data = crate::memory::try_zeroed_units::<W>(len, "packing a matrix")?;
    let start = line_start::<W>(data.as_ptr() as usize);
    let kb = KBlocks::for_format::<W>(k);
    let panels = n.div_ceil(W::PANEL_NR);
    let nb = k.div_ceil(QK);
    let row_bytes = nb * W::FILE_BLOCK_BYTES;
    let ptr = threads::SendPtr(data.as_mut_ptr().wrapping_add(start) as *mut u8);
    let pack_panel = |jp: usize| {
        for p in 0..kb.count {
            let (k0, kc) = kb.block(p);
            let panel = panels * W::panel_units(k0) + jp * W::panel_units(kc);
            for bi in 0..kc.div_ceil(QK) {
                // SAFETY: block bi of panel (p, jp) is PANEL_BLOCK_UNITS bytes of the buffer
                // that only this task writes.
                let dst = unsafe {
                    std::slice::from_raw_parts_mut(
                        ptr.get().add(panel + bi * W::PANEL_BLOCK_UNITS),
                        W::PANEL_BLOCK_UNITS,
                    )
                };
                let gb = k0 / QK + bi;
                for j in 0..W::PANEL_NR.min(n - jp * W::PANEL_NR) {
                    let col = jp * W::PANEL_NR + j;
                    let src = &blocks[col * row_bytes + gb * W::FILE_BLOCK_BYTES..]
                        [..W::FILE_BLOCK_BYTES];
                    dst[2 * j..2 * j + 2].copy_from_slice(&src[..2]);
                    for s in 0..QK {
                        let step = &mut dst[SCALE_BYTES + s * W::STEP_BYTES..][..W::STEP_BYTES];
                        W::set_q(step, j, W::q_at(&src[2..], s));
                    }
                }
            }
        }
    };
    if k * n >= 1 << 16 {
        threads::parallel_for(panels, pack_panel);
    } else {
        (0..panels).for_each(pack_panel);
    }
    Ok(PackedB::from_packed_units(data, start, k, n))
}

/// The file blocks of a packed matrix of `W` (N runs of `ceil(K / 32)` blocks): the inverse of
/// [`pack`], byte for byte.
pub fn unpack<W: BlockFormat>(p: &PackedB<W>) -> Vec<u8> {
    let (k, n) = (p.rows(), p.cols());
    let nb = k.div_ceil(QK);
    let row_bytes = nb * W::FILE_BLOCK_BYTES;
    let mut out = vec![0u8; n * row_bytes];
    let units = bytes_of(p.values());
    let kb = p.kb;
    let panels = n.div_ceil(W::PANEL_NR);
    for pb in 0..kb.count {
        let (k0, kc) = kb.block(pb);
        for jp in 0..panels {
            let panel = panels * W::panel_units(k0) + jp * W::panel_units(kc);
            for bi in 0..kc.div_ceil(QK) {
                let src = &units[panel + bi * W::PANEL_BLOCK_UNITS..][..W::PANEL_BLOCK_UNITS];
                let gb = k0 / QK + bi;
                for j in 0..W::PANEL_NR.min(n - jp * W::PANEL_NR) {
                    let col = jp * W::PANEL_NR + j;
                    let dst = &mut out[col * row_bytes + gb * W::FILE_BLOCK_BYTES..]
                        [..W::FILE_BLOCK_BYTES];
                    dst[..2].copy_from_slice(&src[2 * j..2 * j + 2]);
                    for s in 0..QK {
                        let step = &src[SCALE_BYTES + s * W::STEP_BYTES..][..W::STEP_BYTES];
                        W::set_q(&mut dst[2..], s, W::q_at(step, j));
                    }
                }
            }
        }
    }
    out
}
