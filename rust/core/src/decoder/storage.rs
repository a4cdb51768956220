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
//! build a table, from the model's values or from a file's patterns or blocks) is looked up by
//! the format's name in the formats' registration ([`storage`]).
//!
//! A block format (`q8_0`, `q4_0`: see [`crate::formats::block`]) stores the weight matrices,
//! the head and the token embedding in blocks along each matrix's reduction dimension K (the
//! table's rows); the position table stays in the compute type, as llama.cpp keeps it. A model
//! may also hold some of its large tensors in another format than its own, as a file gives
//! them ([`Fetched`]): each computes exactly with the values it stores.

use super::float::Float;
use super::tensor::{Tensor, TensorSpec};
use crate::formats::block::{self, QK};
use crate::formats::{
    for_each_stored_format, values_of_bits, vec_of_bits, BlockFormat, Float16Format, StorageFormat,
    WeightFormat, WidensTo,
};
use crate::gemm::{gemm_packed, pack_blocks, MatRef, Options, PackedB};
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
    /// For a block format, the matrix's file blocks (a run of `ceil(K / 32)` blocks for each
    /// of its N columns, see [`crate::formats::block`]); `None` for other formats.
    fn blocks(&self) -> Option<Vec<u8>> {
        None
    }
    /// The region shared with the model's other matrices that the matrix was packed into, if
    /// any (see [`crate::memory::gathered`]).
    fn region(&self) -> Option<&crate::memory::Region>;
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
    fn region(&self) -> Option<&crate::memory::Region> {
        PackedB::region(self)
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

    /// Packs the file blocks of block format `format` of a `(k, n)` matrix (a run of
    /// `ceil(k / 32)` blocks for each of its `n` columns, see [`crate::formats::block`]); an
    /// error when `format` is no block format or `blocks` has the wrong length.
    pub fn pack_blocks(blocks: &[u8], k: usize, n: usize, format: WeightFormat) -> Result<Self> {
        storage::<T>(format).pack_blocks(blocks, k, n)
    }

    pub fn rows(&self) -> usize {
        self.0.rows()
    }
    pub fn cols(&self) -> usize {
        self.0.cols()
    }
    /// The region shared with the model's other matrices that the matrix lies in, if any.
    pub fn region(&self) -> Option<&crate::memory::Region> {
        self.0.region()
    }
    pub fn nbytes(&self) -> usize {
        self.0.nbytes()
    }
    pub fn format(&self) -> WeightFormat {
        self.0.format()
    }

    /// For a block format, the matrix's file blocks ([`PackedWeights::blocks`]).
    pub fn blocks(&self) -> Option<Vec<u8>> {
        self.0.blocks()
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
    /// How the values are stored.
    fn format(&self) -> WeightFormat;
    /// For a block format, the table's file blocks (a run of `ceil(d / 32)` blocks a row).
    fn blocks(&self) -> Option<Vec<u8>> {
        None
    }
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
    fn format(&self) -> WeightFormat {
        WeightFormat::Full
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
    fn format(&self) -> WeightFormat {
        WeightFormat::named(W::FORMAT_NAME).unwrap_or(WeightFormat::Full)
    }
}

/// A table of a block format: a run of file blocks for each row (`d` values, the last block
/// short when 32 does not divide `d`), as a GGUF file stores the token embedding.
struct BlockTable<W> {
    blocks: Vec<u8>,
    d: usize,
    _format: PhantomData<W>,
}

impl<W: BlockFormat> BlockTable<W> {
    fn row_bytes(&self) -> usize {
        self.d.div_ceil(QK) * W::FILE_BLOCK_BYTES
    }
}

impl<T, W> TableRows<T> for BlockTable<W>
where
    T: Float + KernelsFor<W>,
    W: BlockFormat + WidensTo<T>,
{
    #[inline]
    fn row(&self, r: usize, d: usize) -> Cow<'_, [T]> {
        let rb = self.row_bytes();
        let mut out = vec![T::ZERO; d];
        block::widen_row::<W, T>(&self.blocks[r * rb..(r + 1) * rb], &mut out);
        Cow::Owned(out)
    }
    fn widened(&self) -> Vec<T> {
        let rb = self.row_bytes();
        let rows = self.blocks.len().checked_div(rb).unwrap_or(0);
        let mut out = vec![T::ZERO; rows * self.d];
        for (r, row) in out.chunks_mut(self.d.max(1)).enumerate().take(rows) {
            block::widen_row::<W, T>(&self.blocks[r * rb..(r + 1) * rb], row);
        }
        out
    }
    fn nbytes(&self) -> usize {
        self.blocks.len()
    }
    fn pack_transposed(&self, v: usize, d: usize) -> Result<Packed<T>> {
        // The table's rows are the head's columns, their blocks along d, the head's K.
        Ok(Packed::new(BlockMatrix(pack_blocks::pack::<W>(
            &self.blocks,
            d,
            v,
        )?)))
    }
    fn format(&self) -> WeightFormat {
        WeightFormat::named(W::FORMAT_NAME).unwrap_or(WeightFormat::Full)
    }
    fn blocks(&self) -> Option<Vec<u8>> {
        Some(self.blocks.clone())
    }
}

/// A matrix packed in a block format: the packed panels, which also give its file blocks
/// back.
struct BlockMatrix<W>(PackedB<W>);

impl<T, W> PackedWeights<T> for BlockMatrix<W>
where
    T: Float + KernelsFor<W>,
    W: BlockFormat + WidensTo<T>,
{
    fn rows(&self) -> usize {
        self.0.rows()
    }
    fn cols(&self) -> usize {
        self.0.cols()
    }
    fn nbytes(&self) -> usize {
        self.0.nbytes()
    }
    fn format(&self) -> WeightFormat {
        WeightFormat::named(W::FORMAT_NAME).unwrap_or(WeightFormat::Full)
    }
    fn unpack(&self) -> Vec<T> {
        self.0.unpack_widened()
    }
    fn gemm(&self, a: MatRef<'_, T>, c: &mut [T], ldc: usize, opts: &Options<'_, T>) {
        gemm_packed(a, &self.0, c, ldc, opts)
    }
    fn blocks(&self) -> Option<Vec<u8>> {
        Some(pack_blocks::unpack(&self.0))
    }
    fn region(&self) -> Option<&crate::memory::Region> {
        self.0.region()
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

    /// How the values are stored.
    pub fn format(&self) -> WeightFormat {
        self.0.format()
    }

    /// For a block format, the table's file blocks ([`TableRows::blocks`]).
    pub fn blocks(&self) -> Option<Vec<u8>> {
        self.0.blocks()
    }
}

/// What the decoder does with one weight format: packing a matrix and building a table, from
/// the model's values (rounded or quantized to the format) or from the 16-bit patterns or the
/// blocks a file holds.
pub trait WeightStorage<T>: Sync {
    /// Packs `v` (any strides), rounded to the format (a block format: quantized along K, the
    /// rows of `v`).
    fn pack(&self, v: MatRef<'_, T>) -> Result<Packed<T>>;
    /// Packs the format's 16-bit patterns laid out as `(k, n)` (or `(n, k)` read transposed).
    fn pack_bits(&self, bits: &[u16], k: usize, n: usize, transposed: bool) -> Result<Packed<T>> {
        let _ = (bits, k, n, transposed);
        no_bits(self.format())
    }
    /// Packs the format's file blocks of a `(k, n)` matrix (a run of `ceil(k / 32)` blocks for
    /// each of its `n` columns).
    fn pack_blocks(&self, blocks: &[u8], k: usize, n: usize) -> Result<Packed<T>> {
        let _ = (blocks, k, n);
        no_blocks(self.format())
    }
    /// A table `(values.len() / d, d)` of `values`, rounded (quantized along its rows) to the
    /// format.
    fn table(&self, values: &[T], d: usize) -> Result<Table<T>>;
    /// A table of the format's 16-bit patterns.
    fn table_bits(&self, bits: Vec<u16>) -> Result<Table<T>> {
        let _ = bits;
        no_bits(self.format())
    }
    /// A table of `rows` rows of `d` values from the format's file blocks (a run a row).
    fn table_blocks(&self, blocks: Vec<u8>, rows: usize, d: usize) -> Result<Table<T>> {
        let _ = (blocks, rows, d);
        no_blocks(self.format())
    }
    /// The format.
    fn format(&self) -> WeightFormat;
    /// Whether a learned position table is stored in the format (else in the compute type).
    fn stores_positions(&self) -> bool {
        true
    }
}

/// The model's compute type itself.
struct Full;

impl<T: Float> WeightStorage<T> for Full {
    fn pack(&self, v: MatRef<'_, T>) -> Result<Packed<T>> {
        Ok(Packed::new(PackedB::try_pack(v)?))
    }
    fn table(&self, values: &[T], _: usize) -> Result<Table<T>> {
        Ok(Table::new(values.to_vec()))
    }
    fn format(&self) -> WeightFormat {
        WeightFormat::Full
    }
}

fn no_bits<R>(format: WeightFormat) -> Result<R> {
    crate::value_error!(
        "weights in format {:?} are not given as 16-bit patterns",
        format.name()
    )
}

fn no_blocks<R>(format: WeightFormat) -> Result<R> {
    crate::value_error!(
        "weights in format {:?} are not given as blocks",
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
    fn format(&self) -> WeightFormat {
        WeightFormat::named(W::FORMAT_NAME).expect("a registered format")
    }

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

    fn table(&self, values: &[T], _: usize) -> Result<Table<T>> {
        let w = round_to::<T, W>(MatRef::from_slice(values, 1, values.len()));
        Ok(Table::new(Table16(w)))
    }

    fn table_bits(&self, bits: Vec<u16>) -> Result<Table<T>> {
        Ok(Table::new(Table16(vec_of_bits::<W>(bits))))
    }
}

/// A registered block format `W` (see [`crate::formats::block`]).
struct Blocks<W>(PhantomData<W>);

impl<T, W> WeightStorage<T> for Blocks<W>
where
    T: Float + KernelsFor<W>,
    W: BlockFormat + WidensTo<T>,
{
    fn format(&self) -> WeightFormat {
        WeightFormat::named(W::FORMAT_NAME).expect("a registered format")
    }

    /// Quantized along K through float32 (exact for float32 models; a float64 model's weights
    /// are rounded to float32 first).
    fn pack(&self, v: MatRef<'_, T>) -> Result<Packed<T>> {
        let blocks = block::quantize::<W, T>(v)?;
        self.pack_blocks(&blocks, v.rows, v.cols)
    }

    fn pack_blocks(&self, blocks: &[u8], k: usize, n: usize) -> Result<Packed<T>> {
        Ok(Packed::new(BlockMatrix(pack_blocks::pack::<W>(
            blocks, k, n,
        )?)))
    }

    fn table(&self, values: &[T], d: usize) -> Result<Table<T>> {
        let rows = values.len().checked_div(d).unwrap_or(0);
        if rows * d != values.len() {
            return crate::value_error!("{} values for a table of rows of {d}", values.len());
        }
        // The rows are the runs: the (d x rows) matrix whose columns are the table's rows.
        // SAFETY: values holds rows x d values; the transpose is read with unit row stride.
        let view = unsafe { MatRef::from_raw(values.as_ptr(), d, rows, 1, d as isize) };
        self.table_blocks(block::quantize::<W, T>(view)?, rows, d)
    }

    fn table_blocks(&self, blocks: Vec<u8>, rows: usize, d: usize) -> Result<Table<T>> {
        let want = block::file_bytes::<W>(d, rows);
        if want != Some(blocks.len()) {
            return crate::value_error!(
                "{} blocks of a table of {rows} rows of {d} values: expected {} bytes, got {}",
                W::FORMAT_NAME,
                want.map_or("too many".to_string(), |b| b.to_string()),
                blocks.len()
            );
        }
        Ok(Table::new(BlockTable::<W> {
            blocks,
            d,
            _format: PhantomData,
        }))
    }

    fn stores_positions(&self) -> bool {
        false
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
    // The storage of each kind of format: `Stored` for values, `Blocks` for blocks.
    macro_rules! of_kind {
        (values, $W:ty) => {
            &Stored::<$W>(PhantomData)
        };
        (blocks, $W:ty) => {
            &Blocks::<$W>(PhantomData)
        };
    }
    macro_rules! by_name {
        ($($W:ty => $method:ident in $kind:ident),* $(,)?) => {
            $(
                if f.name() == <$W as StorageFormat>::FORMAT_NAME {
                    return of_kind!($kind, $W);
                }
            )*
        };
    }
    for_each_stored_format!(by_name);
    unreachable!("{:?} is registered but has no storage", f.name())
}

/// A large tensor as the weights' source stores it (what [`Fetch`] hands over).
#[derive(Clone, Debug, PartialEq)]
pub enum Fetched {
    /// Kept in the compute type: the tensor's values in the full-precision map, as they are.
    Full,
    /// float32 values laid out as the tensor's shape, to be stored in the model's format (as
    /// a tensor of the full-precision map would be).
    Values(Vec<f32>),
    /// The 16-bit patterns of a format of 16-bit values, laid out as the tensor's shape.
    Bits16(WeightFormat, Vec<u16>),
    /// The file blocks of a block format, in runs along the product's depth K: a run for each
    /// column of a matrix `(k, n)`, for each row of one read transposed (`(n, k)`, the head)
    /// and for each row of a table (see [`crate::formats::block`]).
    Blocks(WeightFormat, Vec<u8>),
}

/// Reads a large tensor (a weight matrix or an embedding table) from wherever the weights come
/// from, one tensor at a time, in the format the source stores it in; `None`: the tensor is
/// in the full-precision map, to be stored in the model's format (rounded or quantized on
/// loading).
pub type Fetch<'s> = dyn Fn(&TensorSpec) -> Result<Option<Fetched>> + Sync + 's;

/// Named weights, looked up and checked against the schema: the compute-type map, and for a
/// model stored in another format the large tensors as the source stores them (`fetch`).
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

    /// `spec` as `fetch` has it, when the model is stored in another format than the compute
    /// type; 16-bit patterns checked against the shape.
    pub(super) fn fetched(&self, spec: &TensorSpec) -> Result<Option<Fetched>> {
        let Some(fetch) = self.fetch.filter(|_| self.format != WeightFormat::Full) else {
            return Ok(None);
        };
        let got = fetch(spec)?;
        let len = match &got {
            Some(Fetched::Bits16(_, bits)) => Some(bits.len()),
            Some(Fetched::Values(v)) => Some(v.len()),
            _ => None,
        };
        let want: usize = spec.shape.iter().product();
        if let Some(len) = len.filter(|&l| l != want) {
            return crate::value_error!(
                "weights: tensor {:?} holds {len} values for shape {:?}",
                spec.name,
                spec.shape
            );
        }
        Ok(got)
    }

    /// The weight matrix `spec` `(k, n)`, or `(n, k)` read transposed, packed in the model's
    /// format, or as `fetch` gives it.
    pub fn matrix(&self, spec: &TensorSpec, transposed: bool) -> Result<Packed<T>> {
        let (r, c) = (spec.shape[0], spec.shape[1]);
        let (k, n) = if transposed { (c, r) } else { (r, c) };
        fn oriented<T: Copy>(w: &[T], k: usize, n: usize, transposed: bool) -> MatRef<'_, T> {
            if transposed {
                // SAFETY: w holds n x k values; its transpose is read with unit row stride.
                unsafe { MatRef::from_raw(w.as_ptr(), k, n, 1, k as isize) }
            } else {
                MatRef::from_slice(w, k, n)
            }
        }
        let view = |w| oriented(w, k, n, transposed);
        let packed = match self.fetched(spec)? {
            None => storage::<T>(self.format).pack(view(self.get(spec)?)),
            Some(Fetched::Full) => Full.pack(view(self.get(spec)?)),
            Some(Fetched::Values(v)) => {
                let w = widened::<T>(&v);
                storage::<T>(self.format).pack(view(&w))
            }
            Some(Fetched::Bits16(f, bits)) => storage::<T>(f).pack_bits(&bits, k, n, transposed),
            Some(Fetched::Blocks(f, blocks)) => storage::<T>(f).pack_blocks(&blocks, k, n),
        };
        packed.map_err(|e| named(spec, e))
    }

    /// The embedding table `spec`, in the model's format (a position table in the compute type
    /// for a format that does not store one), or as `fetch` gives it.
    pub fn table(&self, spec: &TensorSpec) -> Result<Table<T>> {
        let d = spec.shape[1];
        let mut storage = storage::<T>(self.format);
        if spec.kind == "wpe" && !storage.stores_positions() {
            storage = &Full;
        }
        let table = match self.fetched(spec)? {
            None => storage.table(self.get(spec)?, d),
            Some(Fetched::Full) => Full.table(self.get(spec)?, d),
            Some(Fetched::Values(v)) => storage.table(&widened::<T>(&v), d),
            Some(Fetched::Bits16(f, bits)) => self::storage::<T>(f).table_bits(bits),
            Some(Fetched::Blocks(f, blocks)) => {
                self::storage::<T>(f).table_blocks(blocks, spec.shape[0], d)
            }
        };
        table.map_err(|e| named(spec, e))
    }
}

/// float32 values in the compute type (exact).
fn widened<T: Float>(v: &[f32]) -> Vec<T> {
    v.iter().map(|&x| T::from_f64(x as f64)).collect()
}

/// `e` with the tensor's name in front (a value error).
fn named(spec: &TensorSpec, e: crate::Error) -> crate::Error {
    match e {
        crate::Error::Value(m) if !m.contains(&format!("{:?}", spec.name)) => {
            crate::Error::Value(format!("weights: tensor {:?}: {m}", spec.name))
        }
        other => other,
    }
}
