//! bfloat16: the top half of a float32 (sign, 8 exponent bits, 7 mantissa bits), kept as its
//! 16-bit pattern. Widening is a 16-bit shift, exact for every pattern (subnormals, infinities
//! and NaN included); rounding from float32 is to nearest, ties to even, a NaN staying a quiet
//! NaN with its sign and the top of its payload.

use super::format::{
    widen_values, BPanel, Bits16, Float16Format, StorageFormat, ValueFormat, WidensTo,
};
use crate::Element;

/// bfloat16: sign, 8 exponent bits, 7 mantissa bits (the top half of a float32).
#[repr(transparent)]
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug, Hash)]
pub struct Bf16(pub u16);

// SAFETY: any 16 bits are a bfloat16 value, zero bits +0; a step of a panel is PANEL_NR values.
unsafe impl StorageFormat for Bf16 {
    const FORMAT_NAME: &'static str = "bfloat16";
    const BLOCK_K: usize = 1;
    /// float32's panel width (the kernels widen one 16-lane half of a step at a time).
    const PANEL_NR: usize = <f32 as StorageFormat>::PANEL_NR;
    const PANEL_BLOCK_UNITS: usize = Self::PANEL_NR;
    const HALVES: bool = false;
    const ZERO_UNIT: Self = Bf16(0);
    /// float32's depth blocks.
    const PANEL_KC_MAX: usize = <f32 as StorageFormat>::PANEL_KC_MAX;
    const BITS16: Option<Bits16> = Some(Bits16::of::<Bf16>());
}

impl ValueFormat for Bf16 {}

/// float32 -> `T` is exact for both compute types.
impl<T: Element> WidensTo<T> for Bf16 {
    #[inline(always)]
    unsafe fn widen_step(b: &BPanel<Self>, kk: usize, out: &mut [T]) {
        widen_values(b, kk, out, |v| T::from_f64(v.to_f32() as f64))
    }
}

// SAFETY: `repr(transparent)` over its 16-bit pattern.
unsafe impl Float16Format for Bf16 {
    #[inline(always)]
    fn from_bits(bits: u16) -> Self {
        Bf16(bits)
    }
    #[inline(always)]
    fn to_bits(self) -> u16 {
        self.0
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f32::from_bits((self.0 as u32) << 16)
    }
    #[inline]
    fn from_f32(x: f32) -> Self {
        let b = x.to_bits();
        if x.is_nan() {
            // Keep the sign and the top of the payload; set the quiet bit.
            return Bf16(((b >> 16) as u16) | 0x0040);
        }
        // Round to nearest even on the low 16 bits; a carry into the exponent is the right
        // answer (up to infinity, 0x7f80, from the largest finite values).
        let lsb = (b >> 16) & 1;
        Bf16((b.wrapping_add(0x7fff + lsb) >> 16) as u16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_round_trip_every_pattern() {
        for h in 0..=u16::MAX {
            let v = Bf16(h).to_f32();
            if v.is_nan() {
                assert!(Bf16::from_f32(v).to_f32().is_nan());
            } else {
                assert_eq!(Bf16::from_f32(v).0, h);
            }
        }
    }

    #[test]
    fn special_values() {
        assert_eq!(Bf16::from_f32(f32::INFINITY).0, 0x7f80);
        assert_eq!(Bf16::from_f32(f32::MAX).0, 0x7f80);
        assert_eq!(Bf16::from_f32(-f32::MAX).0, 0xff80);
        let snan = f32::from_bits(0x7f80_0001);
        assert!(Bf16::from_f32(snan).to_f32().is_nan());
        // Ties: 1 + 2^-8 is halfway between 1 and 1 + 2^-7: to even (1).
        assert_eq!(Bf16::from_f32(1.0 + 2f32.powi(-8)).to_f32(), 1.0);
        assert_eq!(
            Bf16::from_f32(1.0 + 3.0 * 2f32.powi(-8)).to_f32(),
            1.0 + 2.0 * 2f32.powi(-7)
        );
        // Subnormal float32 inputs keep their bfloat16 meaning.
        let tiny = f32::from_bits(0x0001_8000);
        assert_eq!(Bf16::from_f32(tiny).0, 0x0002);
    }
}
