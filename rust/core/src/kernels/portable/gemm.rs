//! The portable micro-kernel: plain Rust loops over a runtime tile.
use crate::kernels::b_at;
use crate::Element;

pub const MR: usize = 4;

/// # Safety
/// `a` holds `kc * MR` values, `b` holds `kc` steps of `cols` readable values (laid out as
/// `ldb` and `hoff` say: see the kernels' contract),
/// and C has `rows` rows of `cols` writable values `ldc` apart.
pub unsafe fn kernel<T: Element>(
    rows: usize,
    cols: usize,
    kc: usize,
    a: *const T,
    b: *const T,
    ldb: usize,
    hoff: usize,
    c: *mut T,
    ldc: usize,
    accumulate: bool,
) {
    let h = T::NR / 2;
    let mut acc = [[T::ZERO; 32]; MR];
    if accumulate {
        for i in 0..rows {
            for j in 0..cols {
                acc[i][j] = *c.add(i * ldc + j);
            }
        }
    }
    for kk in 0..kc {
        let bk = b.add(kk * ldb);
        let ak = a.add(kk * MR);
        for i in 0..rows {
            let ai = *ak.add(i);
            for j in 0..cols {
                acc[i][j] = ai.mul_add(*b_at(bk, hoff, h, j), acc[i][j]);
            }
        }
    }
    for i in 0..rows {
        for j in 0..cols {
            *c.add(i * ldc + j) = acc[i][j];
        }
    }
}
