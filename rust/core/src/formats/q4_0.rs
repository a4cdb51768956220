//! `q4_0`: ggml's Q4_0 blocks: per block of 32 weights along K, one float16 scale `d` and 32
//! integers `q` of 4 bits; a weight is `d * (q - 8)`. A file block is 18 bytes (`d`, then 16
//! bytes: value `i < 16` in the low nibble of byte `i`, value `i + 16` in its high nibble); a
//! panel step packs the 32 columns the same way, column `j < 16` in the low nibble of byte
//! `j`, column `j + 16` in its high nibble (see [`super::block`]).
//!
//! The quantizer is ggml's `quantize_row_q4_0_ref`: `m` is the value of largest magnitude, its
//! sign kept (the first one when several tie; `+0.0` for a block of zeros), `d = m / -8` and
//! `q = min(15, trunc(x * (1 / d) + 8.5))` in float32, `d` stored rounded to float16. Where the
//! inverse scale overflows to infinity each `q` is 0 (x86-64's conversion of a NaN or infinity
//! to an integer, low nibble); the weights are zeros either way (`d` rounds to 0).

use super::block::{widen_block_step, BlockFormat, QuantizeError, BLOCK_NR, QK, SCALE_BYTES};
use super::f16::F16;
use super::format::{BPanel, Float16Format, StorageFormat, WidensTo};
use crate::Element;

/// A byte of a `q4_0` panel (see [`super::block`] for the layout).
#[repr(transparent)]
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub struct Q4_0(pub u8);

// SAFETY: any byte is a unit, zero bytes are a zero scale and zero nibbles; a panel block is
// the 64 bytes of scales and 32 steps of 16 bytes (`super::block`).
unsafe impl StorageFormat for Q4_0 {
    const FORMAT_NAME: &'static str = "q4_0";
    const BLOCK_K: usize = QK;
    const PANEL_NR: usize = BLOCK_NR;
    const PANEL_BLOCK_UNITS: usize = SCALE_BYTES + QK * 16;
    const HALVES: bool = false;
    const ZERO_UNIT: Self = Q4_0(0);
    /// float32's depth blocks.
    const PANEL_KC_MAX: usize = <f32 as StorageFormat>::PANEL_KC_MAX;
}

impl<T: Element> WidensTo<T> for Q4_0 {
    #[inline(always)]
    unsafe fn widen_step(b: &BPanel<Self>, kk: usize, out: &mut [T]) {
        widen_block_step(b, kk, out)
    }
}

// SAFETY: repr(transparent) over u8, laid out as `super::block` says.
unsafe impl BlockFormat for Q4_0 {
    const GGUF_TYPE: &'static str = "Q4_0";
    const FILE_BLOCK_BYTES: usize = 2 + 16;
    const STEP_BYTES: usize = 16;

    fn quantize_block(x: &[f32], out: &mut [u8]) -> Result<(), QuantizeError> {
        let (mut amax, mut max) = (0f32, 0f32);
        for (i, &v) in x.iter().enumerate() {
            if !v.is_finite() {
                return Err(QuantizeError::NonFinite(i));
            }
            if amax < v.abs() {
                amax = v.abs();
                max = v;
            }
        }
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let d16 = F16::from_f32(d);
        if !d16.to_f32().is_finite() {
            return Err(QuantizeError::ScaleOverflow(d));
        }
        out[..2].copy_from_slice(&d16.to_bits().to_le_bytes());
        out[2..18].fill(0);
        for i in 0..QK {
            let v = x.get(i).copied().unwrap_or(0.0) * id + 8.5;
            // (int8_t) truncates toward zero; v >= 0.5 here (to float32 rounding).
            let q = if v.is_finite() {
                (v.trunc() as i32).min(15) as u8
            } else {
                0
            };
            Self::set_q(&mut out[2..], i, q);
        }
        Ok(())
    }

    #[inline(always)]
    fn q_at(qs: &[u8], i: usize) -> u8 {
        if i < 16 {
            qs[i] & 0x0F
        } else {
            qs[i - 16] >> 4
        }
    }

    #[inline(always)]
    fn set_q(qs: &mut [u8], i: usize, q: u8) {
        if i < 16 {
            qs[i] = (qs[i] & 0xF0) | (q & 0x0F);
        } else {
            qs[i - 16] = (qs[i - 16] & 0x0F) | (q << 4);
        }
    }

    #[inline(always)]
    fn weight(d: f32, q: u8) -> f32 {
        d * (q as i32 - 8) as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout() {
        super::super::block::check_layout::<Q4_0>();
        assert_eq!(Q4_0::PANEL_BLOCK_UNITS, 576);
    }

    /// The reference's arithmetic on known blocks: the scale from the first value of largest
    /// magnitude with its sign, `trunc(x / d + 8.5)` capped at 15, the nibble order, the short
    /// block's padding (the quantization of zero: 8) and the refusals.
    #[test]
    fn quantizes_as_the_reference() {
        let x: Vec<f32> = (0..32).map(|i| -1.0 + 2.0 * i as f32 / 31.0).collect();
        let mut b = [0u8; 18];
        Q4_0::quantize_block(&x, &mut b).unwrap();
        let d = F16(u16::from_le_bytes([b[0], b[1]])).to_f32();
        assert_eq!(d, 0.125);
        // x[0] = -1: q = 0 (weight -1); x[31] = 1: 1 * 8 + 8.5 -> 15 (capped: 16.5).
        assert_eq!((Q4_0::q_at(&b[2..], 0), Q4_0::q_at(&b[2..], 31)), (0, 15));
        assert_eq!(b[2] & 0x0F, 0);
        assert_eq!(b[17] >> 4, 15);
        // The first of equal magnitudes decides the sign: m = +2, d = -0.25.
        Q4_0::quantize_block(&[2.0, -2.0, 1.0], &mut b).unwrap();
        assert_eq!(F16(u16::from_le_bytes([b[0], b[1]])).to_f32(), -0.25);
        let q: Vec<u8> = (0..4).map(|i| Q4_0::q_at(&b[2..], i)).collect();
        assert_eq!(q, [0, 15, 4, 8]);
        assert!(
            (3..32).all(|i| Q4_0::q_at(&b[2..], i) == 8),
            "padding: zero"
        );
        assert_eq!(Q4_0::weight(-0.25, 4), 1.0);
        // A block of zeros: m = +0, d = -0 (stored as the pattern of -0).
        Q4_0::quantize_block(&[0.0; 5], &mut b).unwrap();
        assert_eq!(u16::from_le_bytes([b[0], b[1]]), 0x8000);
        assert_eq!(
            Q4_0::quantize_block(&[f32::INFINITY], &mut b),
            Err(QuantizeError::NonFinite(0))
        );
        assert!(matches!(
            Q4_0::quantize_block(&[-8.0 * 65520.0], &mut b),
            Err(QuantizeError::ScaleOverflow(_))
        ));
        let mut qs = [0u8; 16];
        for i in 0..32 {
            Q4_0::set_q(&mut qs, i, (i % 16) as u8);
        }
        assert!((0..32).all(|i| Q4_0::q_at(&qs, i) == (i % 16) as u8));
    }
}
