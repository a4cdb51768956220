//! How the weights are stored: weight matrices packed once ([`Packed`]) and embedding tables
//! ([`Table`]), each in the compute type or in a storage format of [`crate::formats`] (the
//! model's [`WeightFormat`]), widened exactly to the compute type where it is read. Biases and
//! LayerNorm parameters always stay in the compute type.
//!
//! A model with stored weights computes, bit for bit, what the same model computes with its
//! weights first rounded to that format and widened back: the kernels widen each B value as
//! they load it and run the same FMA chains, and an embedding row is widened before the same
//! additions.
//!
//! The layers see [`Packed`] and [`Table`] only, whatever the format: a matrix is any
//! [`PackedWeights`] (every `PackedB<W>` whose format the kernels take), a table any
//! [`TableRows`]. What the decoder does with each format ([`WeightStorage`]: pack a matrix,
//! build a table, from the model's values or from a file's patterns) is looked up by the
//! format's name in the formats' registration ([`storage`]).

use super::float::Float;
use super::tensor::{Tensor, TensorSpec};
use crate::formats::{
    for_each_stored_format, values_of_bits, vec_of_bits, Float16Format, StorageFormat,
    WeightFormat, WidensTo,
};
use crate::gemm::{gemm_packed, MatRef, Options, PackedB};
use crate::kernels::KernelsFor;
use crate::Result;
use std::borrow::Cow;
use std::collections::HashMap;
use std::marker::PhantomData;

/// A weight matrix packed once, as the layers use it.
pub trait PackedWeights<T>: Send + Sync {
    /// K, the rows of the matrix.
    fn rows(&self) -> usize;
    /// N, its columns.
    fn cols(&self) -> usize;
    /// Bytes held.
    fn nbytes(&self) -> usize;
    /// How the values are stored.
    fn format(&self) -> WeightFormat;
    /// The matrix in row-major order, widened to `T`.
    fn unpack(&self) -> Vec<T>;
    /// `c = a @ self` (then the options' epilogue); never fails.
    fn gemm(&self, a: MatRef<'_, T>, c: &mut [T], ldc: usize, opts: &Options<'_, T>);
}

impl<T, W> PackedWeights<T> for PackedB<W>
where
    T: Float + KernelsFor<W>,
    W: StorageFormat + WidensTo<T>,
{
    fn rows(&self) -> usize {
        PackedB::rows(self)
    }
    fn cols(&self) -> usize {
        PackedB::cols(self)
    }
    fn nbytes(&self) -> usize {
        PackedB::nbytes(self)
    }
    fn format(&self) -> WeightFormat {
        // The compute type itself is no registered format: `Full`.
        WeightFormat::named(W::FORMAT_NAME).unwrap_or(WeightFormat::Full)
    }
    fn unpack(&self) -> Vec<T> {
        self.unpack_widened()
    }
    fn gemm(&self, a: MatRef<'_, T>, c: &mut [T], ldc: usize, opts: &Options<'_, T>) {
        gemm_packed(a, self, c, ldc, opts)
    }
}

/// A weight matrix packed once, in the compute type or a stored format.
pub struct Packed<T>(Box<dyn PackedWeights<T>>);

impl<T: Float> Packed<T> {
    pub fn new(p: impl PackedWeights<T> + 'static) -> Self {
        Packed(Box::new(p))
    }

    /// Packs `v` (any strides) stored as `format` (rounded to it).
    pub fn pack(v: MatRef<'_, T>, format: WeightFormat) -> Result<Self> {
        storage::<T>(format).pack(v)
    }

    /// Packs 16-bit patterns of `format` laid out as `(k, n)` (or `(n, k)` read transposed);
    /// an error when `format` has no 16-bit patterns or `bits` is not `k * n` long.
    pub fn pack_bits(
        bits: &[u16],
        k: usize,
        n: usize,
        transposed: bool,
        format: WeightFormat,
    ) -> Result<Self> {
        storage::<T>(format).pack_bits(bits, k, n, transposed)
    }

    pub fn rows(&self) -> usize {
        self.0.rows()
    }
    pub fn cols(&self) -> usize {
        self.0.cols()
    }
    pub fn nbytes(&self) -> usize {
        self.0.nbytes()
    }
    pub fn format(&self) -> WeightFormat {
        self.0.format()
    }

    /// The matrix in row-major order, widened to `T`.
    pub fn unpack(&self) -> Vec<T> {
        self.0.unpack()
    }

    /// `c = a @ self` (then the options' epilogue); never fails.
    #[inline]
    pub fn gemm(&self, a: MatRef<'_, T>, c: &mut [T], ldc: usize, opts: &Options<'_, T>) {
        self.0.gemm(a, c, ldc, opts)
    }
}

/// An embedding table `(rows, d)`, as the layers use it.
pub trait TableRows<T>: Send + Sync {
    /// Row `r` of width `d`, widened to `T`.
    fn row(&self, r: usize, d: usize) -> Cow<'_, [T]>
    where
        T: Clone;
    /// Every value, widened to `T`.
    fn widened(&self) -> Vec<T>;
    /// Bytes held.
    fn nbytes(&self) -> usize;
    /// The table `(v, d)` transposed, `(d, v)`, packed in the table's format (the tied LM
    /// head).
    fn pack_transposed(&self, v: usize, d: usize) -> Result<Packed<T>>;
}

/// `(v, d)` values read transposed, `(d, v)`, or an error when `w` does not hold them.
fn transposed<W: Copy>(w: &[W], v: usize, d: usize) -> Result<MatRef<'_, W>> {
    if Some(w.len()) != v.checked_mul(d) {
        return crate::value_error!("{} values for a ({v}, {d}) matrix", w.len());
    }
    // SAFETY: w holds v x d values; its transpose is read with unit row stride.
    Ok(unsafe { MatRef::from_raw(w.as_ptr(), d, v, 1, d as isize) })
}

/// A table in the compute type.
impl<T: Float> TableRows<T> for Vec<T> {
    #[inline]
    fn row(&self, r: usize, d: usize) -> Cow<'_, [T]> {
        Cow::Borrowed(&self[r * d..(r + 1) * d])
    }
    fn widened(&self) -> Vec<T> {
        self.clone()
    }
    fn nbytes(&self) -> usize {
        self.len() * std::mem::size_of::<T>()
    }
    fn pack_transposed(&self, v: usize, d: usize) -> Result<Packed<T>> {
        Ok(Packed::new(PackedB::try_pack(transposed(self, v, d)?)?))
    }
}

/// A table of 16-bit values.
struct Table16<W>(Vec<W>);

/// `values` widened (float32 -> `T` is exact for both compute types).
fn widen16<T: Float, W: Float16Format>(values: &[W]) -> Vec<T> {
    values
        .iter()
        .map(|h| T::from_f64(h.to_f32() as f64))
        .collect()
}

impl<T, W> TableRows<T> for Table16<W>
where
    T: Float + KernelsFor<W>,
    W: Float16Format + WidensTo<T>,
{
    #[inline]
    fn row(&self, r: usize, d: usize) -> Cow<'_, [T]> {
        Cow::Owned(widen16(&self.0[r * d..(r + 1) * d]))
    }
    fn widened(&self) -> Vec<T> {
        widen16(&self.0)
    }
    fn nbytes(&self) -> usize {
        self.0.len() * std::mem::size_of::<W>()
    }
    fn pack_transposed(&self, v: usize, d: usize) -> Result<Packed<T>> {
        Ok(Packed::new(PackedB::try_pack(transposed(&self.0, v, d)?)?))
    }
}

/// An embedding table `(rows, d)`, in the compute type or a stored format.
pub struct Table<T>(Box<dyn TableRows<T>>);

impl<T: Float> Table<T> {
    pub fn new(t: impl TableRows<T> + 'static) -> Self {
        Table(Box::new(t))
    }

    /// Row `r` of width `d`, widened to `T`.
    #[inline]
    pub fn row(&self, r: usize, d: usize) -> Cow<'_, [T]> {
        self.0.row(r, d)
    }

    /// Every value, widened to `T`.
    pub fn widened(&self) -> Vec<T> {
        self.0.widened()
    }

    pub fn nbytes(&self) -> usize {
        self.0.nbytes()
    }

    /// The table `(v, d)` transposed, `(d, v)`, packed (the tied LM head), in the table's
    /// format.
    pub fn pack_transposed(&self, v: usize, d: usize) -> Result<Packed<T>> {
        self.0.pack_transposed(v, d)
    }
}

/// What the decoder does with one weight format: packing a matrix and building a table, from
/// the model's values (rounded to the format) or from the 16-bit patterns a file holds.
pub trait WeightStorage<T>: Sync {
    /// Packs `v` (any strides), rounded to the format.
    fn pack(&self, v: MatRef<'_, T>) -> Result<Packed<T>>;
    /// Packs the format's 16-bit patterns laid out as `(k, n)` (or `(n, k)` read transposed).
    fn pack_bits(&self, bits: &[u16], k: usize, n: usize, transposed: bool) -> Result<Packed<T>>;
    /// A table of `values`, rounded to the format.
    fn table(&self, values: &[T]) -> Result<Table<T>>;
    /// A table of the format's 16-bit patterns.
    fn table_bits(&self, bits: Vec<u16>) -> Result<Table<T>>;
}

/// The model's compute type itself.
struct Full;

impl<T: Float> WeightStorage<T> for Full {
    fn pack(&self, v: MatRef<'_, T>) -> Result<Packed<T>> {
        Ok(Packed::new(PackedB::try_pack(v)?))
    }
    fn pack_bits(&self, _: &[u16], _: usize, _: usize, _: bool) -> Result<Packed<T>> {
        no_bits(WeightFormat::Full)
    }
    fn table(&self, values: &[T]) -> Result<Table<T>> {
        Ok(Table::new(values.to_vec()))
    }
    fn table_bits(&self, _: Vec<u16>) -> Result<Table<T>> {
        no_bits(WeightFormat::Full)
    }
}

fn no_bits<R>(format: WeightFormat) -> Result<R> {
    crate::value_error!(
        "weights in format {:?} are not given as 16-bit patterns",
        format.name()
    )
}

/// A registered storage format `W` of 16-bit values.
struct Stored<W>(PhantomData<W>);

impl<T, W> WeightStorage<T> for Stored<W>
where
    T: Float + KernelsFor<W>,
    W: Float16Format + WidensTo<T>,
{
    fn pack(&self, v: MatRef<'_, T>) -> Result<Packed<T>> {
        let w = round_to::<T, W>(v);
        Ok(Packed::new(PackedB::try_pack(MatRef::from_slice(
            &w, v.rows, v.cols,
        ))?))
    }

    fn pack_bits(&self, bits: &[u16], k: usize, n: usize, transposed: bool) -> Result<Packed<T>> {
        if Some(bits.len()) != k.checked_mul(n) {
            return crate::value_error!(
                "{} patterns: {} values for a ({k}, {n}) matrix",
                W::FORMAT_NAME,
                bits.len()
            );
        }
        let w = values_of_bits::<W>(bits);
        let view = if transposed {
            self::transposed(w, n, k)?
        } else {
            MatRef::from_slice(w, k, n)
        };
        Ok(Packed::new(PackedB::try_pack(view)?))
    }

    fn table(&self, values: &[T]) -> Result<Table<T>> {
        let w = round_to::<T, W>(MatRef::from_slice(values, 1, values.len()));
        Ok(Table::new(Table16(w)))
    }

    fn table_bits(&self, bits: Vec<u16>) -> Result<Table<T>> {
        Ok(Table::new(Table16(vec_of_bits::<W>(bits))))
    }
}

/// Values in `T` rounded to `W` (through float32: exact rounding for float32 models; a
/// float64 model's weights are rounded twice).
fn round_to<T: Float, W: Float16Format>(v: MatRef<'_, T>) -> Vec<W> {
    let mut out = Vec::with_capacity(v.rows * v.cols);
    for i in 0..v.rows {
        for j in 0..v.cols {
            out.push(W::from_f32(v.at(i, j).to_f64() as f32));
        }
    }
    out
}

/// What the decoder does with `format` (the registered formats' entries, by name).
pub fn storage<T: Float>(format: WeightFormat) -> &'static dyn WeightStorage<T> {
    let WeightFormat::Stored(f) = format else {
        return &Full;
    };
    macro_rules! by_name {
        ($($W:ty => $method:ident),* $(,)?) => {
            $(
                if f.name() == <$W as StorageFormat>::FORMAT_NAME {
                    return &Stored::<$W>(PhantomData);
                }
            )*
        };
    }
    for_each_stored_format!(by_name);
    unreachable!("{:?} is registered but has no storage", f.name())
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
            return storage::<T>(self.format).pack_bits(&bits, k, n, transposed);
        }
        let w = self.get(spec)?;
        let view = if transposed {
            // SAFETY: w holds n x k values; its transpose is read with unit row stride.
            unsafe { MatRef::from_raw(w.as_ptr(), k, n, 1, k as isize) }
        } else {
            MatRef::from_slice(w, k, n)
        };
        storage::<T>(self.format).pack(view)
    }

    /// The embedding table `spec`, in the model's format.
    pub fn table(&self, spec: &TensorSpec) -> Result<Table<T>> {
        let storage = storage::<T>(self.format);
        match self.bits(spec)? {
            Some(bits) => storage.table_bits(bits),
            None => storage.table(self.get(spec)?),
        }
    }
}
