//! The reference product: the naive triple loop with `mul_add`, in the contract's order.

use super::view::MatRef;
use crate::Element;

/// The reference product: the naive triple loop with `mul_add`, in the contract's order.
/// `c` is row-major (M x N).
pub fn gemm_reference<T: Element>(a: MatRef<'_, T>, b: MatRef<'_, T>, c: &mut [T]) {
    assert_eq!(a.cols, b.rows);
    let (m, n, k) = (a.rows, b.cols, a.cols);
    assert!(c.len() >= m * n);
    for i in 0..m {
        for j in 0..n {
            let mut acc = T::ZERO;
            for kk in 0..k {
                acc = a.at(i, kk).mul_add(b.at(kk, j), acc);
            }
            c[i * n + j] = acc;
        }
    }
}
