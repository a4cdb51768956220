//! float16 (IEEE binary16: sign, 5 exponent bits, 10 mantissa bits), kept as its 16-bit
//! pattern. Widening is exact for every pattern: F16C's `vcvtph2ps` in the x86 kernels,
//! `fcvtl` in the NEON ones and [`F16::to_f32`](super::Float16Format::to_f32) elsewhere give
//! the same bits (a NaN comes out quiet, its payload kept). Rounding from float32 is to
//! nearest, ties to even, overflowing to infinity from 65520 in magnitude up.

use super::format::{
    widen_values, BPanel, Bits16, Float16Format, StorageFormat, ValueFormat, WidensTo,
};
use crate::Element;

/// IEEE binary16: sign, 5 exponent bits, 10 mantissa bits.
#[repr(transparent)]
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug, Hash)]
pub struct F16(pub u16);

// SAFETY: any 16 bits are a float16 value, zero bits +0; a step of a panel is PANEL_NR values.
unsafe impl StorageFormat for F16 {
    const FORMAT_NAME: &'static str = "float16";
    const BLOCK_K: usize = 1;
    /// float32's panel width (the kernels widen one 16-lane half of a step at a time).
    const PANEL_NR: usize = <f32 as StorageFormat>::PANEL_NR;
    const PANEL_BLOCK_UNITS: usize = Self::PANEL_NR;
    const HALVES: bool = false;
    const ZERO_UNIT: Self = F16(0);
    /// float32's depth blocks.
    const PANEL_KC_MAX: usize = <f32 as StorageFormat>::PANEL_KC_MAX;
    const BITS16: Option<Bits16> = Some(Bits16::of::<F16>());
}

impl ValueFormat for F16 {}

/// float32 -> `T` is exact for both compute types.
impl<T: Element> WidensTo<T> for F16 {
    #[inline(always)]
    unsafe fn widen_step(b: &BPanel<Self>, kk: usize, out: &mut [T]) {
        widen_values(b, kk, out, |v| T::from_f64(v.to_f32() as f64))
    }
}

// SAFETY: `repr(transparent)` over its 16-bit pattern.
unsafe impl Float16Format for F16 {
    #[inline(always)]
    fn from_bits(bits: u16) -> Self {
        F16(bits)
    }
    #[inline(always)]
    fn to_bits(self) -> u16 {
        self.0
    }
    #[inline]
    fn to_f32(self) -> f32 {
        let h = self.0 as u32;
        let sign = (h & 0x8000) << 16;
        let exp = (h >> 10) & 0x1f;
        let man = h & 0x3ff;
        if exp == 0x1f {
            if man == 0 {
                return f32::from_bits(sign | 0x7f80_0000);
            }
            // NaN: payload kept, quiet bit set (as vcvtph2ps does).
            return f32::from_bits(sign | 0x7fc0_0000 | (man << 13));
        }
        if exp == 0 {
            // Zero or subnormal: man * 2^-24, exact in float32.
            let v = man as f32 * (1.0 / 16_777_216.0);
            return if sign != 0 { -v } else { v };
        }
        f32::from_bits(sign | ((exp + 112) << 23) | (man << 13))
    }
    #[inline]
    fn from_f32(x: f32) -> Self {
        let b = x.to_bits();
        let sign = ((b >> 16) & 0x8000) as u16;
        let exp = ((b >> 23) & 0xff) as i32;
        let man = b & 0x7f_ffff;
        if exp == 0xff {
            if man == 0 {
                return F16(sign | 0x7c00);
            }
            return F16(sign | 0x7e00 | (man >> 13) as u16);
        }
        let e = exp - 127;
        if e > 15 {
            return F16(sign | 0x7c00);
        }
        if e >= -14 {
            // Normal range; the rounding carry may reach the exponent (and infinity, 0x7c00).
            let mut v = (((e + 15) as u32) << 10) | (man >> 13);
            let rem = man & 0x1fff;
            if rem > 0x1000 || (rem == 0x1000 && v & 1 == 1) {
                v += 1;
            }
            return F16(sign | v as u16);
        }
        if exp == 0 {
            // float32 zero or subnormal: far below half of float16's smallest subnormal.
            return F16(sign);
        }
        // Subnormal float16: the value is m * 2^(e - 23) = (m >> shift) units of 2^-24.
        let m = man | 0x80_0000;
        let shift = (-(e + 1)) as u32; // 14 ..
        if shift > 24 {
            return F16(sign);
        }
        let mut v = m >> shift;
        let rem = m & ((1u32 << shift) - 1);
        let half = 1u32 << (shift - 1);
        if rem > half || (rem == half && v & 1 == 1) {
            v += 1;
        }
        F16(sign | v as u16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exact value of an f16 pattern, from its definition.
    fn f16_value(h: u16) -> f64 {
        let s = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
        let e = ((h >> 10) & 0x1f) as i32;
        let m = (h & 0x3ff) as f64;
        if e == 0 {
            s * m * 2f64.powi(-24)
        } else if e == 31 {
            if m == 0.0 {
                s * f64::INFINITY
            } else {
                f64::NAN
            }
        } else {
            s * (1.0 + m / 1024.0) * 2f64.powi(e - 15)
        }
    }

    #[test]
    fn f16_widening_matches_definition_for_every_pattern() {
        for h in 0..=u16::MAX {
            let v = F16(h).to_f32();
            let want = f16_value(h);
            if want.is_nan() {
                assert!(v.is_nan());
                assert_eq!(v.to_bits() & 0x8000_0000 != 0, h & 0x8000 != 0);
            } else {
                assert_eq!(v as f64, want, "pattern {h:#06x}");
                assert_eq!(v.is_sign_negative(), h & 0x8000 != 0);
                // Widening then rounding gives the pattern back.
                assert_eq!(F16::from_f32(v).0, h);
            }
        }
    }

    /// Round to nearest even against an f64 search over neighbours: the nearest pattern by
    /// value, ties to the even mantissa.
    fn nearest_f16(x: f32) -> u16 {
        let x = x as f64;
        let mut best = 0u16;
        let mut best_d = f64::INFINITY;
        for h in 0..0x7c00u16 {
            let v = f16_value(h) * x.signum();
            let d = (v - x).abs();
            if d < best_d || (d == best_d && h & 1 == 0) {
                best = h;
                best_d = d;
            }
        }
        // Beyond 65504: IEEE overflows to infinity from 65520 (half an ulp above) on.
        if x.abs() >= 65520.0 {
            best = 0x7c00;
        }
        best | if x.is_sign_negative() { 0x8000 } else { 0 }
    }

    #[test]
    fn f16_rounding_against_exhaustive_nearest() {
        let mut rng = 12345u64;
        let mut vals: Vec<f32> = vec![
            0.0,
            -0.0,
            1.0,
            65504.0,
            65519.99,
            65520.0,
            1e6,
            6.1035156e-5,
            5.9604645e-8,
            2.9802322e-8,
            2.9802326e-8,
            8.940697e-8,
            1.0009766,
            1.0 + 2f32.powi(-11),
            1.0 + 3.0 * 2f32.powi(-11),
        ];
        for _ in 0..3000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let e = (rng % 40) as i32 - 26;
            let m = ((rng >> 8) % 4096) as f32 / 4096.0;
            vals.push((1.0 + m) * 2f32.powi(e) * if rng & 1 == 0 { 1.0 } else { -1.0 });
            // Exact ties between two neighbours.
            let h = (rng >> 20) as u16 & 0x7bfe;
            vals.push(((f16_value(h) + f16_value(h + 1)) / 2.0) as f32);
        }
        for x in vals {
            assert_eq!(F16::from_f32(x).0, nearest_f16(x), "x = {x:e}");
        }
    }

    #[test]
    fn special_values() {
        assert_eq!(F16::from_f32(f32::INFINITY).0, 0x7c00);
        assert_eq!(F16::from_f32(f32::NEG_INFINITY).0, 0xfc00);
        let snan = f32::from_bits(0x7f80_0001);
        assert!(F16::from_f32(snan).to_f32().is_nan());
        assert!(F16::from_f32(f32::NAN).to_f32().is_nan());
    }
}
