//! Rotary position embedding (RoPE) in Hugging Face's "rotate half" layout.
//!
//! A head of width `dh` is rotated pairwise: value `i` and value `i + dh/2` (`i < dh/2`) turn
//! by the angle `position * inv_freq[i]`:
//!
//! ```text
//! out[i]        = x[i] * cos - x[i + dh/2] * sin
//! out[i + dh/2] = x[i + dh/2] * cos + x[i] * sin
//! ```
//!
//! (`x * cos + rotate_half(x) * sin` with `rotate_half(x) = [-x2, x1]`: the same products and
//! sums, since `a + (-b) * s` and `a - b * s` are the same IEEE operations.) `inv_freq` and
//! every angle, cosine and sine are computed in float64 from the position alone and rounded
//! once to the compute type, so a position's table is the same whichever pass asks for it (a
//! full forward or one decode step), and the rotation of a row depends on nothing but the row
//! and its position.

use super::Float;
use crate::Result;

/// How the frequencies are scaled (`rope_scaling` / `rope_parameters` of a Hugging Face
/// config).
#[derive(Clone, Debug, PartialEq)]
pub enum RopeScaling {
    /// `inv_freq[i] = theta^(-2i/dh)`.
    Default,
    /// Every frequency divided by `factor` (positions interpolated).
    Linear { factor: f64 },
    /// Llama 3.1's scaling: long wavelengths divided by `factor`, short ones kept, a smooth
    /// blend in between (see [`Rope::inv_freq`]).
    Llama3 {
        factor: f64,
        low_freq_factor: f64,
        high_freq_factor: f64,
        original_max_position_embeddings: f64,
    },
}

impl RopeScaling {
    /// The rope types known, as Hugging Face names them.
    pub const TYPES: [&'static str; 3] = ["default", "linear", "llama3"];

    pub fn name(&self) -> &'static str {
        match self {
            RopeScaling::Default => "default",
            RopeScaling::Linear { .. } => "linear",
            RopeScaling::Llama3 { .. } => "llama3",
        }
    }
}

/// The rotary settings of a model.
#[derive(Clone, Debug, PartialEq)]
pub struct Rope {
    /// The base of the frequencies (`rope_theta`).
    pub theta: f64,
    pub scaling: RopeScaling,
}

impl Rope {
    pub fn validate(&self, d_head: usize) -> Result<()> {
        if !d_head.is_multiple_of(2) {
            return crate::value_error!(
                "config: rotary positions need an even head width, got d_head = {d_head}"
            );
        }
        let positive = |name: &str, v: f64| -> Result<()> {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                crate::value_error!("config: rope {name} must be a positive number, got {v}")
            }
        };
        positive("theta", self.theta)?;
        match self.scaling {
            RopeScaling::Default => Ok(()),
            RopeScaling::Linear { factor } => positive("factor", factor),
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings,
            } => {
                positive("factor", factor)?;
                positive("low_freq_factor", low_freq_factor)?;
                positive("high_freq_factor", high_freq_factor)?;
                positive(
                    "original_max_position_embeddings",
                    original_max_position_embeddings,
                )?;
                if high_freq_factor <= low_freq_factor {
                    return crate::value_error!(
                        "config: llama3 rope needs high_freq_factor ({high_freq_factor}) > \
                         low_freq_factor ({low_freq_factor})"
                    );
                }
                Ok(())
            }
        }
    }

    /// The `dh / 2` frequencies, float64: `theta^(-2i/dh)`, then scaled.
    ///
    /// llama3: with wavelength `w = 2 pi / f` and `L` the original context, `f / factor` where
    /// `w > L / low_freq_factor`, `f` where `w < L / high_freq_factor`, else
    /// `(1 - s) f / factor + s f` with `s = (L / w - low_freq_factor) / (high_freq_factor -
    /// low_freq_factor)`.
    pub fn inv_freq(&self, dh: usize) -> Vec<f64> {
        (0..dh / 2)
            .map(|i| {
                let f = 1.0 / self.theta.powf((2 * i) as f64 / dh as f64);
                match self.scaling {
                    RopeScaling::Default => f,
                    RopeScaling::Linear { factor } => f / factor,
                    RopeScaling::Llama3 {
                        factor,
                        low_freq_factor: lo,
                        high_freq_factor: hi,
                        original_max_position_embeddings: l,
                    } => {
                        let w = 2.0 * std::f64::consts::PI / f;
                        if w > l / lo {
                            f / factor
                        } else if w < l / hi {
                            f
                        } else {
                            let s = (l / w - lo) / (hi - lo);
                            (1.0 - s) * f / factor + s * f
                        }
                    }
                }
            })
            .collect()
    }
}

/// The rotary layer of one model: its frequencies, and the tables of a pass.
#[derive(Clone, Debug)]
pub struct Rotary {
    pub rope: Rope,
    pub d_head: usize,
    inv_freq: Vec<f64>,
}

/// The cosines and sines of a run of positions, `(positions, dh / 2)` each, in `T`.
#[derive(Clone, Debug, Default)]
pub struct RotaryTable<T> {
    pub p0: usize,
    pub half: usize,
    pub cos: Vec<T>,
    pub sin: Vec<T>,
}

impl<T: Float> RotaryTable<T> {
    /// Fills the table for positions `p0 .. p0 + n` (keeps the memory).
    pub fn fill(&mut self, rotary: &Rotary, p0: usize, n: usize) {
        let half = rotary.d_head / 2;
        self.p0 = p0;
        self.half = half;
        self.cos.clear();
        self.sin.clear();
        for p in p0..p0 + n {
            for &f in &rotary.inv_freq {
                let angle = p as f64 * f;
                self.cos.push(T::from_f64(angle.cos()));
                self.sin.push(T::from_f64(angle.sin()));
            }
        }
    }

    /// The cosines and sines of position `p` (one of the table's).
    #[inline]
    pub fn at(&self, p: usize) -> (&[T], &[T]) {
        let r = (p - self.p0) * self.half;
        (&self.cos[r..r + self.half], &self.sin[r..r + self.half])
    }
}

impl Rotary {
    pub fn new(rope: Rope, d_head: usize) -> Self {
        let inv_freq = rope.inv_freq(d_head);
        Rotary {
            rope,
            d_head,
            inv_freq,
        }
    }

    /// The float64 frequencies.
    pub fn inv_freq(&self) -> &[f64] {
        &self.inv_freq
    }
}

/// Rotates one head `x` (`dh` values) by the angles whose cosines and sines are `cos`, `sin`
/// (`dh / 2` each).
#[inline(always)]
pub fn rotate_head<T: Float>(x: &mut [T], cos: &[T], sin: &[T]) {
    let half = cos.len();
    let (a, b) = x.split_at_mut(half);
    for (((x1, x2), &c), &s) in a.iter_mut().zip(b.iter_mut()).zip(cos).zip(sin) {
        let (u, v) = (*x1, *x2);
        *x1 = u * c - v * s;
        *x2 = v * c + u * s;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rope(scaling: RopeScaling) -> Rope {
        Rope {
            theta: 10000.0,
            scaling,
        }
    }

    #[test]
    fn default_frequencies_are_the_powers_of_theta() {
        let f = rope(RopeScaling::Default).inv_freq(8);
        assert_eq!(f.len(), 4);
        assert_eq!(f[0], 1.0);
        for (i, &v) in f.iter().enumerate() {
            let want = 10000f64.powf(-(2.0 * i as f64) / 8.0);
            assert!((v - want).abs() <= 1e-16 * want, "{i}: {v} vs {want}");
        }
        let lin = rope(RopeScaling::Linear { factor: 4.0 }).inv_freq(8);
        for (a, b) in lin.iter().zip(&f) {
            assert_eq!(*a, b / 4.0);
        }
    }

    #[test]
    fn llama3_scaling_keeps_short_and_stretches_long_wavelengths() {
        let (factor, lo, hi, l) = (8.0, 1.0, 4.0, 64.0);
        let r = Rope {
            theta: 500000.0,
            scaling: RopeScaling::Llama3 {
                factor,
                low_freq_factor: lo,
                high_freq_factor: hi,
                original_max_position_embeddings: l,
            },
        };
        let dh = 64;
        let base = Rope {
            theta: 500000.0,
            scaling: RopeScaling::Default,
        }
        .inv_freq(dh);
        let scaled = r.inv_freq(dh);
        let (mut short, mut long, mut blend) = (0, 0, 0);
        for (&f, &g) in base.iter().zip(&scaled) {
            let w = 2.0 * std::f64::consts::PI / f;
            if w < l / hi {
                assert_eq!(g, f);
                short += 1;
            } else if w > l / lo {
                assert_eq!(g, f / factor);
                long += 1;
            } else {
                // Between the two: strictly between f / factor and f.
                assert!(g > f / factor && g < f, "{g} not in ({}, {f})", f / factor);
                blend += 1;
            }
        }
        assert!(short > 0 && long > 0 && blend > 0, "{short} {long} {blend}");
    }

    #[test]
    fn bad_settings_are_errors() {
        assert!(rope(RopeScaling::Default).validate(7).is_err());
        assert!(Rope {
            theta: 0.0,
            scaling: RopeScaling::Default
        }
        .validate(8)
        .is_err());
        assert!(rope(RopeScaling::Linear { factor: -1.0 })
            .validate(8)
            .is_err());
        let l3 = RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 4.0,
            high_freq_factor: 1.0,
            original_max_position_embeddings: 8192.0,
        };
        assert!(rope(l3).validate(8).is_err());
    }

    /// A position's table does not depend on where the run starts, and rotating a head
    /// matches the float64 rotation (`x cos + rotate_half(x) sin`), rounded once.
    #[test]
    fn tables_depend_on_the_position_only_and_rotate_as_defined() {
        fn check<T: Float>(tol: f64) {
            let rot = Rotary::new(rope(RopeScaling::Default), 16);
            let mut all = RotaryTable::<T>::default();
            all.fill(&rot, 0, 300);
            let mut one = RotaryTable::<T>::default();
            for p in [0usize, 1, 97, 299] {
                one.fill(&rot, p, 1);
                let (c1, s1) = one.at(p);
                let (c2, s2) = all.at(p);
                let bits = |v: &[T]| v.iter().map(|x| x.to_f64().to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(c1), bits(c2), "cos at {p}");
                assert_eq!(bits(s1), bits(s2), "sin at {p}");
                let x: Vec<f64> = (0..16).map(|i| (i as f64 * 0.37).sin()).collect();
                let mut y: Vec<T> = x.iter().map(|&v| T::from_f64(v)).collect();
                rotate_head(&mut y, c1, s1);
                for i in 0..8 {
                    let a = p as f64 * rot.inv_freq()[i];
                    let (c, s) = (a.cos(), a.sin());
                    let w1 = x[i] * c - x[i + 8] * s;
                    let w2 = x[i + 8] * c + x[i] * s;
                    assert!((y[i].to_f64() - w1).abs() <= tol, "{p} {i}");
                    assert!((y[i + 8].to_f64() - w2).abs() <= tol, "{p} {i}");
                }
            }
        }
        check::<f32>(1e-6);
        check::<f64>(1e-15);
    }
}
