//! The two floating-point types gptcore computes in, and what the kernels need of them.

use crate::formats::{ValueFormat, WidensTo};

/// f32 (the fast path) or f64 (the reference path): each a storage format of its own
/// (panels of the compute type, read as they are; see `formats/compute.rs`).
pub trait Element:
    ValueFormat
    + WidensTo<Self>
    + Copy
    + Send
    + Sync
    + Default
    + PartialEq
    + PartialOrd
    + std::fmt::Debug
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
    + std::ops::AddAssign
    + 'static
{
    /// Columns in one packed panel of the right-hand side (shared by every kernel of this type,
    /// so that a matrix packed once serves whichever kernel is active): the format's.
    const NR: usize = <Self as crate::formats::StorageFormat>::PANEL_NR;
    /// Largest depth of one packed block (the KC of the five-loop algorithm): the format's.
    const KC_MAX: usize = <Self as crate::formats::StorageFormat>::PANEL_KC_MAX;
    const ZERO: Self;
    const ONE: Self;
    const NAME: &'static str;
    fn mul_add(self, a: Self, b: Self) -> Self;
    fn from_f64(x: f64) -> Self;
    fn to_f64(self) -> f64;
    fn exp(self) -> Self;
    fn tanh(self) -> Self;
    fn sqrt(self) -> Self;
    fn neg_infinity() -> Self;
    fn max(self, other: Self) -> Self;
}

macro_rules! impl_element {
    ($t:ty, $name:expr) => {
        impl Element for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const NAME: &'static str = $name;
            #[inline(always)]
            fn mul_add(self, a: Self, b: Self) -> Self {
                <$t>::mul_add(self, a, b)
            }
            #[inline(always)]
            fn from_f64(x: f64) -> Self {
                x as $t
            }
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline(always)]
            fn exp(self) -> Self {
                <$t>::exp(self)
            }
            #[inline(always)]
            fn tanh(self) -> Self {
                <$t>::tanh(self)
            }
            #[inline(always)]
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            #[inline(always)]
            fn neg_infinity() -> Self {
                <$t>::NEG_INFINITY
            }
            #[inline(always)]
            fn max(self, other: Self) -> Self {
                if other > self {
                    other
                } else {
                    self
                }
            }
        }
    };
}

impl_element!(f32, "float32");
impl_element!(f64, "float64");
