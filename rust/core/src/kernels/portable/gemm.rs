//! The portable micro-kernel: plain Rust loops over a runtime tile.
use crate::Element;

pub const MR: usize = 4;

/// # Safety
/// `a` holds `kc * MR` values, `b` holds `kc` rows of `cols` readable values `ldb` apart,
/// and C has `rows` rows of `cols` writable values `ldc` apart.
pub unsafe fn kernel<T: Element>(
    rows: usize,
    cols: usize,
    kc: usize,
    a: *const T,
    b: *const T,
    ldb: usize,
    c: *mut T,
    ldc: usize,
    accumulate: bool,
) {
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
                acc[i][j] = ai.mul_add(*bk.add(j), acc[i][j]);
            }
        }
    }
    for i in 0..rows {
        for j in 0..cols {
            *c.add(i * ldc + j) = acc[i][j];
        }
    }
}
