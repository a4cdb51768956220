//! Half-size storage: bfloat16 and float16 values kept as their 16-bit patterns, widened to
//! float32 (exactly) wherever they are computed with.
//!
//! * Widening is exact: every bfloat16 and every float16 value (subnormals, infinities
//!   included) is a float32 value. bfloat16 is the top half of a float32 (a 16-bit shift);
//!   float16 widens through F16C's `vcvtph2ps` in the x86 kernels and [`F16::to_f32`]
//!   elsewhere, which give the same bits (a NaN comes out quiet, its payload kept).
//! * Rounding ([`HalfFormat::from_f32`]) is IEEE round to nearest, ties to even; a NaN stays a
//!   (quiet) NaN with its sign; a value beyond the largest finite one rounds to infinity when
//!   IEEE says so (float16: from 65520 in magnitude up).
//!
//! Hence the contract of the half-size products: a product with a half-size right-hand side
//! gives, bit for bit, the float32 product whose right-hand side holds the widened values.

/// A 16-bit storage format.
pub trait HalfFormat:
    Copy + Send + Sync + Default + PartialEq + Eq + std::fmt::Debug + 'static
{
    /// `"bfloat16"` or `"float16"`.
    const NAME: &'static str;
    fn from_bits(bits: u16) -> Self;
    fn to_bits(self) -> u16;
    /// The exact float32 value.
    fn to_f32(self) -> f32;
    /// `x` rounded to nearest, ties to even (NaN stays NaN, quiet).
    fn from_f32(x: f32) -> Self;
}

/// bfloat16: sign, 8 exponent bits, 7 mantissa bits (the top half of a float32).
#[repr(transparent)]
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug, Hash)]
pub struct Bf16(pub u16);

/// IEEE binary16: sign, 5 exponent bits, 10 mantissa bits.
#[repr(transparent)]
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug, Hash)]
pub struct F16(pub u16);

impl HalfFormat for Bf16 {
    const NAME: &'static str = "bfloat16";
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

impl HalfFormat for F16 {
    const NAME: &'static str = "float16";
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

/// Rounds every value of `src` into `dst` (same length).
pub fn round_slice<H: HalfFormat>(src: &[f32], dst: &mut [H]) {
    assert_eq!(src.len(), dst.len());
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = H::from_f32(s);
    }
}

/// Widens every value of `src` into `dst` (same length).
pub fn widen_slice<H: HalfFormat>(src: &[H], dst: &mut [f32]) {
    assert_eq!(src.len(), dst.len());
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = s.to_f32();
    }
}

/// Views 16-bit patterns as values of a half format (the same bits, no copy).
pub fn from_bits_slice<H: HalfFormat>(bits: &[u16]) -> &[H] {
    // SAFETY: Bf16 and F16 are `repr(transparent)` over u16 (the only implementors).
    unsafe { std::slice::from_raw_parts(bits.as_ptr() as *const H, bits.len()) }
}

/// A vector of 16-bit patterns as a vector of half values (the same allocation).
pub fn from_bits_vec<H: HalfFormat>(bits: Vec<u16>) -> Vec<H> {
    debug_assert_eq!(std::mem::size_of::<H>(), 2);
    let mut v = std::mem::ManuallyDrop::new(bits);
    // SAFETY: H is `repr(transparent)` over u16: same size and alignment.
    unsafe { Vec::from_raw_parts(v.as_mut_ptr() as *mut H, v.len(), v.capacity()) }
}

/// The storage format of a model's weight matrices and embedding tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeightFormat {
    /// The model's compute type (float32 or float64).
    Full,
    Bf16,
    F16,
}

impl WeightFormat {
    pub fn name(self) -> &'static str {
        match self {
            WeightFormat::Full => "full",
            WeightFormat::Bf16 => "bfloat16",
            WeightFormat::F16 => "float16",
        }
    }
}

/// Rounds `x` to `format` and widens it back (`Full`: `x` itself).
pub fn round_f32(x: f32, format: WeightFormat) -> f32 {
    match format {
        WeightFormat::Full => x,
        WeightFormat::Bf16 => Bf16::from_f32(x).to_f32(),
        WeightFormat::F16 => F16::from_f32(x).to_f32(),
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
            1.00048828125,
            1.00146484375,
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
        assert_eq!(Bf16::from_f32(f32::INFINITY).0, 0x7f80);
        assert_eq!(Bf16::from_f32(f32::MAX).0, 0x7f80);
        assert_eq!(Bf16::from_f32(-f32::MAX).0, 0xff80);
        let snan = f32::from_bits(0x7f80_0001);
        assert!(Bf16::from_f32(snan).to_f32().is_nan());
        assert!(F16::from_f32(snan).to_f32().is_nan());
        assert!(F16::from_f32(f32::NAN).to_f32().is_nan());
        // bfloat16 ties: 1 + 2^-8 is halfway between 1 and 1 + 2^-7: to even (1).
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
