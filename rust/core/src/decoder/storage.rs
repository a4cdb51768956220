//! How the weights are stored: weight matrices packed once and embedding tables, each in the
//! compute type or in 16-bit storage (bfloat16 / float16, [`WeightFormat`]) widened exactly
//! to the compute type where it is read. Biases and LayerNorm parameters always stay in the
//! compute type.
//!
//! A model with 16-bit weights computes, bit for bit, what the same model computes with its
//! weights first rounded to that format and widened back: the kernels widen each B value as
//! they load it and run the same FMA chains, and an embedding row is widened before the same
//! additions.

use super::float::Float;
use super::tensor::{Tensor, TensorSpec};
use crate::gemm::{gemm_packed, MatRef, Options, PackedB};
use crate::half::{from_bits_slice, from_bits_vec, Bf16, HalfFormat, WeightFormat, F16};
use crate::Result;
use std::borrow::Cow;
use std::collections::HashMap;

/// A weight matrix packed once, in the compute type or 16-bit.
pub enum Packed<T: Float> {
    Full(PackedB<T>),
    Bf16(PackedB<Bf16>),
    F16(PackedB<F16>),
}

/// Runs `$body` with `$p` bound to the packed matrix, whatever it holds.
macro_rules! each_packed {
    ($m:expr, $p:ident => $body:expr) => {
        match $m {
            Packed::Full($p) => $body,
            Packed::Bf16($p) => $body,
            Packed::F16($p) => $body,
        }
    };
}

/// Values in `T` rounded to `H` (through float32: exact rounding for float32 models; a
/// float64 model's weights are rounded twice).
fn round_to<T: Float, H: HalfFormat>(v: MatRef<'_, T>) -> Vec<H> {
    let mut out = Vec::with_capacity(v.rows * v.cols);
    for i in 0..v.rows {
        for j in 0..v.cols {
            out.push(H::from_f32(v.at(i, j).to_f64() as f32));
        }
    }
    out
}

fn widen<T: Float, H: HalfFormat>(v: &[H]) -> Vec<T> {
    v.iter().map(|h| T::from_f64(h.to_f32() as f64)).collect()
}

impl<T: Float> Packed<T> {
    /// Packs `v` (any strides) stored as `format` (rounded to it when 16-bit).
    pub fn pack(v: MatRef<'_, T>, format: WeightFormat) -> Result<Self> {
        let (k, n) = (v.rows, v.cols);
        Ok(match format {
            WeightFormat::Full => Packed::Full(PackedB::try_pack(v)?),
            WeightFormat::Bf16 => {
                let h = round_to::<T, Bf16>(v);
                Packed::Bf16(PackedB::try_pack(MatRef::from_slice(&h, k, n))?)
            }
            WeightFormat::F16 => {
                let h = round_to::<T, F16>(v);
                Packed::F16(PackedB::try_pack(MatRef::from_slice(&h, k, n))?)
            }
        })
    }

    /// Packs 16-bit patterns of `format` laid out as `(k, n)` (or `(n, k)` read transposed).
    pub fn pack_bits(
        bits: &[u16],
        k: usize,
        n: usize,
        transposed: bool,
        format: WeightFormat,
    ) -> Result<Self> {
        assert_eq!(bits.len(), k * n);
        fn view<H: HalfFormat>(h: &[H], k: usize, n: usize, tr: bool) -> MatRef<'_, H> {
            if tr {
                // SAFETY: h holds n x k values; its transpose is read with unit row stride.
                unsafe { MatRef::from_raw(h.as_ptr(), k, n, 1, k as isize) }
            } else {
                MatRef::from_slice(h, k, n)
            }
        }
        Ok(match format {
            WeightFormat::Full => panic!("pack_bits: a 16-bit format is needed"),
            WeightFormat::Bf16 => Packed::Bf16(PackedB::try_pack(view(
                from_bits_slice::<Bf16>(bits),
                k,
                n,
                transposed,
            ))?),
            WeightFormat::F16 => Packed::F16(PackedB::try_pack(view(
                from_bits_slice::<F16>(bits),
                k,
                n,
                transposed,
            ))?),
        })
    }

    pub fn rows(&self) -> usize {
        each_packed!(self, p => p.rows())
    }
    pub fn cols(&self) -> usize {
        each_packed!(self, p => p.cols())
    }
    pub fn nbytes(&self) -> usize {
        each_packed!(self, p => p.nbytes())
    }
    pub fn format(&self) -> WeightFormat {
        match self {
            Packed::Full(_) => WeightFormat::Full,
            Packed::Bf16(_) => WeightFormat::Bf16,
            Packed::F16(_) => WeightFormat::F16,
        }
    }

    /// The matrix in row-major order, widened to `T`.
    pub fn unpack(&self) -> Vec<T> {
        match self {
            Packed::Full(p) => p.unpack(),
            Packed::Bf16(p) => widen(&p.unpack()),
            Packed::F16(p) => widen(&p.unpack()),
        }
    }

    /// `c = a @ self` (then the options' epilogue); never fails.
    pub fn gemm(&self, a: MatRef<'_, T>, c: &mut [T], ldc: usize, opts: &Options<'_, T>) {
        match self {
            Packed::Full(p) => gemm_packed(a, p, c, ldc, opts),
            Packed::Bf16(p) => gemm_packed(a, p, c, ldc, opts),
            Packed::F16(p) => gemm_packed(a, p, c, ldc, opts),
        }
    }
}

/// An embedding table `(rows, d)`, in the compute type or 16-bit.
pub enum Table<T> {
    Full(Vec<T>),
    Bf16(Vec<Bf16>),
    F16(Vec<F16>),
}

impl<T: Float> Table<T> {
    /// Row `r` of width `d`, widened to `T` when 16-bit.
    #[inline]
    pub fn row(&self, r: usize, d: usize) -> Cow<'_, [T]> {
        match self {
            Table::Full(v) => Cow::Borrowed(&v[r * d..(r + 1) * d]),
            Table::Bf16(v) => Cow::Owned(widen(&v[r * d..(r + 1) * d])),
            Table::F16(v) => Cow::Owned(widen(&v[r * d..(r + 1) * d])),
        }
    }

    /// Every value, widened to `T`.
    pub fn widened(&self) -> Vec<T> {
        match self {
            Table::Full(v) => v.clone(),
            Table::Bf16(v) => widen(v),
            Table::F16(v) => widen(v),
        }
    }

    pub fn nbytes(&self) -> usize {
        match self {
            Table::Full(v) => v.len() * std::mem::size_of::<T>(),
            Table::Bf16(v) => v.len() * 2,
            Table::F16(v) => v.len() * 2,
        }
    }

    /// The table `(v, d)` transposed, `(d, v)`, packed (the tied LM head), in the table's
    /// format.
    pub fn pack_transposed(&self, v: usize, d: usize) -> Result<Packed<T>> {
        fn t<H: Copy>(h: &[H], v: usize, d: usize) -> MatRef<'_, H> {
            assert_eq!(h.len(), v * d);
            // SAFETY: h holds v x d values; its transpose is read with unit row stride.
            unsafe { MatRef::from_raw(h.as_ptr(), d, v, 1, d as isize) }
        }
        Ok(match self {
            Table::Full(w) => Packed::Full(PackedB::try_pack(t(w, v, d))?),
            Table::Bf16(w) => Packed::Bf16(PackedB::try_pack(t(w, v, d))?),
            Table::F16(w) => Packed::F16(PackedB::try_pack(t(w, v, d))?),
        })
    }
}

/// Reads a large tensor's 16-bit patterns (in the model's format) from wherever the weights
/// come from, one tensor at a time; `None`: the tensor is in the full-precision map (it is
/// rounded on loading).
pub type Fetch<'s> = dyn Fn(&TensorSpec) -> Result<Option<Vec<u16>>> + Sync + 's;

/// Named weights, looked up and checked against the schema: the compute-type map, and for a
/// 16-bit model the large tensors' patterns (`fetch`).
pub struct Source<'s, 'a, T> {
    pub full: &'s HashMap<String, Tensor<'a, T>>,
    pub format: WeightFormat,
    pub fetch: Option<&'s Fetch<'s>>,
}

impl<'a, T: Float> Source<'_, 'a, T> {
    /// The values of `spec` in the compute type, or an error naming the tensor and the
    /// expected shape.
    pub fn get(&self, spec: &TensorSpec) -> Result<&'a [T]> {
        let (name, shape) = (&spec.name, &spec.shape);
        match self.full.get(name) {
            None => {
                crate::value_error!("weights: missing tensor {name:?} (expected shape {shape:?})")
            }
            Some(t) if &t.shape != shape => crate::value_error!(
                "weights: tensor {name:?} has shape {:?}, expected {shape:?}",
                t.shape
            ),
            Some(t) if t.data.len() != shape.iter().product::<usize>() => crate::value_error!(
                "weights: tensor {name:?} holds {} values for shape {shape:?}",
                t.data.len()
            ),
            Some(t) => Ok(t.data),
        }
    }

    /// The 16-bit patterns of `spec` when the model is 16-bit and `fetch` has them.
    fn bits(&self, spec: &TensorSpec) -> Result<Option<Vec<u16>>> {
        let Some(fetch) = self.fetch.filter(|_| self.format != WeightFormat::Full) else {
            return Ok(None);
        };
        let Some(bits) = fetch(spec)? else {
            return Ok(None);
        };
        let want: usize = spec.shape.iter().product();
        if bits.len() != want {
            return crate::value_error!(
                "weights: tensor {:?} holds {} values for shape {:?}",
                spec.name,
                bits.len(),
                spec.shape
            );
        }
        Ok(Some(bits))
    }

    /// The weight matrix `spec` `(k, n)`, or `(n, k)` read transposed, packed in the model's
    /// format.
    pub fn matrix(&self, spec: &TensorSpec, transposed: bool) -> Result<Packed<T>> {
        let (r, c) = (spec.shape[0], spec.shape[1]);
        let (k, n) = if transposed { (c, r) } else { (r, c) };
        if let Some(bits) = self.bits(spec)? {
            return Packed::pack_bits(&bits, k, n, transposed, self.format);
        }
        let w = self.get(spec)?;
        let view = if transposed {
            // SAFETY: w holds n x k values; its transpose is read with unit row stride.
            unsafe { MatRef::from_raw(w.as_ptr(), k, n, 1, k as isize) }
        } else {
            MatRef::from_slice(w, k, n)
        };
        Packed::pack(view, self.format)
    }

    /// The embedding table `spec`, in the model's format.
    pub fn table(&self, spec: &TensorSpec) -> Result<Table<T>> {
        if let Some(bits) = self.bits(spec)? {
            return Ok(match self.format {
                WeightFormat::Bf16 => Table::Bf16(from_bits_vec(bits)),
                WeightFormat::F16 => Table::F16(from_bits_vec(bits)),
                WeightFormat::Full => unreachable!("bits only for 16-bit formats"),
            });
        }
        let w = self.get(spec)?;
        Ok(match self.format {
            WeightFormat::Full => Table::Full(w.to_vec()),
            WeightFormat::Bf16 => Table::Bf16(round_to(MatRef::from_slice(w, 1, w.len()))),
            WeightFormat::F16 => Table::F16(round_to(MatRef::from_slice(w, 1, w.len()))),
        })
    }
}
