//! `q8_0`: ggml's Q8_0 blocks: per block of 32 weights along K, one float16 scale `d` and 32
//! signed bytes `q`; a weight is `d * q`. A file block is 34 bytes (`d`, then `q[0..32]`); a
//! panel step holds the 32 columns' bytes, column `j` at byte `j` (see [`super::block`]).
//!
//! The quantizer is ggml's `quantize_row_q8_0_ref`: `d = max|x| / 127` and `q = round(x * (1 /
//! d))` (ties away from zero) in float32, `d` stored rounded to float16 (to nearest, ties to
//! even). Where ggml leaves the result to the machine (an inverse scale that overflows to
//! infinity, from a block whose values are all below about 3.7e-37) each `q` is 0, as C stores
//! on x86-64; the block's weights are zeros either way (`d` rounds to 0 in float16).

use super::block::{widen_block_step, BlockFormat, QuantizeError, BLOCK_NR, QK, SCALE_BYTES};
use super::f16::F16;
use super::format::{BPanel, Float16Format, StorageFormat, WidensTo};
use crate::Element;

/// A byte of a `q8_0` panel (see [`super::block`] for the layout).
#[repr(transparent)]
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub struct Q8_0(pub u8);

// SAFETY: any byte is a unit, zero bytes are a zero scale and zero integers; a panel block is
// the 64 bytes of scales and 32 steps of 32 bytes (`super::block`).
unsafe impl StorageFormat for Q8_0 {
    const FORMAT_NAME: &'static str = "q8_0";
    const BLOCK_K: usize = QK;
    const PANEL_NR: usize = BLOCK_NR;
    const PANEL_BLOCK_UNITS: usize = SCALE_BYTES + QK * 32;
    const HALVES: bool = false;
    const ZERO_UNIT: Self = Q8_0(0);
    /// float32's depth blocks.
    const PANEL_KC_MAX: usize = <f32 as StorageFormat>::PANEL_KC_MAX;
}

impl<T: Element> WidensTo<T> for Q8_0 {
    #[inline(always)]
    unsafe fn widen_step(b: &BPanel<Self>, kk: usize, out: &mut [T]) {
        widen_block_step(b, kk, out)
    }
}

// SAFETY: repr(transparent) over u8, laid out as `super::block` says.
unsafe impl BlockFormat for Q8_0 {
    const GGUF_TYPE: &'static str = "Q8_0";
    const FILE_BLOCK_BYTES: usize = 2 + 32;
    const STEP_BYTES: usize = 32;

    fn quantize_block(x: &[f32], out: &mut [u8]) -> Result<(), QuantizeError> {
        let mut amax = 0f32;
        for (i, &v) in x.iter().enumerate() {
            if !v.is_finite() {
                return Err(QuantizeError::NonFinite(i));
            }
            // ggml's MAX(amax, fabsf(v)).
            if v.abs() > amax {
                amax = v.abs();
            }
        }
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let d16 = F16::from_f32(d);
        if !d16.to_f32().is_finite() {
            return Err(QuantizeError::ScaleOverflow(d));
        }
        out[..2].copy_from_slice(&d16.to_bits().to_le_bytes());
        for i in 0..QK {
            let x0 = x.get(i).copied().unwrap_or(0.0) * id;
            // roundf: to nearest, ties away from zero; |x0| <= 127 (to float32 rounding).
            out[2 + i] = if x0.is_finite() {
                x0.round() as i8 as u8
            } else {
                0
            };
        }
        Ok(())
    }

    #[inline(always)]
    fn q_at(qs: &[u8], i: usize) -> u8 {
        qs[i]
    }

    #[inline(always)]
    fn set_q(qs: &mut [u8], i: usize, q: u8) {
        qs[i] = q;
    }

    #[inline(always)]
    fn weight(d: f32, q: u8) -> f32 {
        d * (q as i8) as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout() {
        super::super::block::check_layout::<Q8_0>();
        assert_eq!(Q8_0::PANEL_BLOCK_UNITS, 1088);
    }

    /// The reference's arithmetic on known blocks: the scale from the largest magnitude, ties
    /// of `x / d` away from zero, the short block's padding zero, and the refusals.
    #[test]
    fn quantizes_as_the_reference() {
        let x: Vec<f32> = (0..32).map(|i| i as f32).collect();
        let mut b = [0u8; 34];
        Q8_0::quantize_block(&x, &mut b).unwrap();
        assert_eq!(
            F16(u16::from_le_bytes([b[0], b[1]])).to_f32(),
            250.0 / 1024.0
        );
        assert_eq!(&b[2..6], &[0, 4, 8, 12]);
        assert_eq!(b[33] as i8, 127);
        // x / d = -2.5 exactly: away from zero.
        let mut y = [0f32; 3];
        y[0] = 127.0;
        y[1] = -2.5;
        Q8_0::quantize_block(&y, &mut b).unwrap();
        assert_eq!((b[2] as i8, b[3] as i8, b[4] as i8), (127, -3, 0));
        assert!(b[5..].iter().all(|&q| q == 0), "a short block's padding");
        assert_eq!(
            Q8_0::quantize_block(&[1.0, f32::NAN], &mut b),
            Err(QuantizeError::NonFinite(1))
        );
        assert!(matches!(
            Q8_0::quantize_block(&[127.0 * 65520.0], &mut b),
            Err(QuantizeError::ScaleOverflow(_))
        ));
        // All zeros: scale 0, every integer 0. Tiny values: an infinite inverse, integers 0.
        Q8_0::quantize_block(&[0.0; 32], &mut b).unwrap();
        assert!(b.iter().all(|&v| v == 0));
        Q8_0::quantize_block(&[1e-40, -1e-40], &mut b).unwrap();
        assert_eq!(&b[..4], &[0, 0, 0, 0]);
        assert_eq!(Q8_0::weight(0.5, (-3i8) as u8), -1.5);
    }
}
