//! Formats of blocks (ggml's `q8_0` and `q4_0`): what they share ([`BlockFormat`]), the
//! panel layout their kernels read, and the moves between a file's blocks, a packed matrix and
//! values (packing and unpacking panels: `gemm::pack_blocks`).
//!
//! A block covers [`QK`] = 32 consecutive weights along the reduction dimension K of one
//! column of B (one row of the weight matrix as GGUF stores it, `ne[0] = K`) and holds one
//! float16 scale `d` and 32 small integers `q`; a weight is `d * value(q)` (`q8_0`: `q` itself,
//! a signed byte; `q4_0`: `q - 8`, `q` a nibble), exact in float32: the scale's 11 significant
//! bits times at most 8. So the "dequantized" matrix is one well-defined float32 matrix, and
//! the kernels, which widen a block to those float32 weights in registers and then run the
//! contract's FMA chain, give its product bit for bit.
//!
//! # A file's blocks
//! A matrix of N columns (GGUF: N rows) is N runs of `ceil(K / 32)` blocks, each
//! [`BlockFormat::FILE_BLOCK_BYTES`] bytes: the scale (float16, little endian), then the
//! integers packed as [`BlockFormat::q_at`] reads them. GGUF requires K to be a multiple of
//! 32; in memory a matrix may end in a short block: its live values quantized as if the block
//! were padded with zeros (zeros never change the scale: it comes from the live values), the
//! padding holding the quantization of zero.
//!
//! # A panel
//! Packed, panel `jp` of a depth block is `kc / 32` blocks (the last one short where K ends)
//! of [`StorageFormat::PANEL_BLOCK_UNITS`] bytes each, one after the other:
//!
//! ```text
//! | d[0] d[1] ... d[31]       (32 float16 scales: 64 bytes, one per column)
//! | step 0:  q[0][0..32]      (STEP_BYTES: the 32 columns' integers of depth step 0)
//! | step 1:  q[1][0..32]
//! | ...
//! | step 31: q[31][0..32]
//! ```
//!
//! Both formats' blocks are whole cache lines (q8_0: 64 + 32 x 32 = 1088 bytes; q4_0:
//! 64 + 32 x 16 = 576 bytes), so a panel that starts on a line keeps every block on one.
//! Within a step the integers are packed as in a file block, columns for positions: `q8_0`
//! one byte per column; `q4_0` column `j < 16` in the low nibble of byte `j`, column `j + 16`
//! in its high nibble. A kernel loads a block's 32 scales once and widens each step's 32
//! integers to float32 weights in registers.

use super::f16::F16;
use super::format::{BPanel, Float16Format, StorageFormat, WidensTo};
use crate::error::{Error, Result};
use crate::gemm::MatRef;
use crate::threads;
use crate::Element;

/// Depth steps (weights along K) of one block.
pub const QK: usize = 32;

/// Columns of a block format's panels (float32's, so that the float32 tile shapes apply).
pub const BLOCK_NR: usize = 32;

/// Bytes of a panel block's scales: [`BLOCK_NR`] float16 patterns.
pub const SCALE_BYTES: usize = 2 * BLOCK_NR;

/// Why a block cannot be quantized.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum QuantizeError {
    /// The value at this position of the block is NaN or infinite.
    NonFinite(usize),
    /// The block's scale (this float32 value) overflows float16.
    ScaleOverflow(f32),
}

/// A format of blocks of [`QK`] weights along K with one float16 scale per block and column.
///
/// # Safety
/// `Self` is `repr(transparent)` over `u8` (a byte of a panel), and its panels are laid out as
/// the module documentation says: `PANEL_NR == BLOCK_NR`, `BLOCK_K == QK` and
/// `PANEL_BLOCK_UNITS == SCALE_BYTES + QK * STEP_BYTES`.
pub unsafe trait BlockFormat: StorageFormat + WidensTo<f32> + WidensTo<f64> {
    /// The GGUF (ggml) type name: `"Q8_0"`, `"Q4_0"`.
    const GGUF_TYPE: &'static str;
    /// Bytes of one block in a file: the float16 scale, then 32 integers packed.
    const FILE_BLOCK_BYTES: usize;
    /// Bytes of 32 packed integers: one depth step of a panel block, or a file block's values.
    const STEP_BYTES: usize;

    /// The reference quantizer (ggml's `quantize_row_*_ref`, operation for operation in
    /// float32): the block of the live values `x` (at most 32; the rest of the block counts as
    /// zeros) into `out` (`FILE_BLOCK_BYTES` bytes, a file block).
    fn quantize_block(x: &[f32], out: &mut [u8]) -> std::result::Result<(), QuantizeError>;

    /// Integer `i` (< 32) of 32 packed integers.
    fn q_at(qs: &[u8], i: usize) -> u8;

    /// Sets integer `i` (< 32) of 32 packed integers to `q` (the format's range).
    fn set_q(qs: &mut [u8], i: usize, q: u8);

    /// The weight of integer `q` under scale `d`: exact in float32.
    fn weight(d: f32, q: u8) -> f32;
}

/// The bytes of a panel of format `W` (its units, viewed as bytes).
#[inline(always)]
pub fn bytes_of<W: BlockFormat>(units: &[W]) -> &[u8] {
    // SAFETY: W is repr(transparent) over u8 (BlockFormat's contract).
    unsafe { std::slice::from_raw_parts(units.as_ptr() as *const u8, units.len()) }
}

/// The float16 scale at `p` (little endian), widened.
#[inline(always)]
fn scale_at(p: &[u8]) -> f32 {
    F16::from_bits(u16::from_le_bytes([p[0], p[1]])).to_f32()
}

/// Values `0 .. out.len()` of depth step `kk` of a block format's panel `b`, widened: the
/// definition of a block format's values ([`WidensTo::widen_step`]), which every family's
/// kernels for the format equal bit for bit.
///
/// # Safety
/// As for [`WidensTo::widen_step`]: `b` addresses a panel of `W` holding step `kk`.
#[inline(always)]
pub unsafe fn widen_block_step<W: BlockFormat, T: Element>(
    b: &BPanel<W>,
    kk: usize,
    out: &mut [T],
) {
    let block = b.ptr.add(kk / QK * b.ldb) as *const u8;
    let scales = std::slice::from_raw_parts(block, SCALE_BYTES);
    let step = std::slice::from_raw_parts(
        block.add(SCALE_BYTES + kk % QK * W::STEP_BYTES),
        W::STEP_BYTES,
    );
    for (j, v) in out.iter_mut().enumerate() {
        let d = scale_at(&scales[2 * j..]);
        *v = T::from_f64(W::weight(d, W::q_at(step, j)) as f64);
    }
}

/// The float32 values of one run of file blocks (a matrix column, a table row) of `W`: the
/// first `out.len()` weights.
pub fn widen_row<W: BlockFormat, T: Element>(blocks: &[u8], out: &mut [T]) {
    for (b, chunk) in out.chunks_mut(QK).enumerate() {
        let block = &blocks[b * W::FILE_BLOCK_BYTES..(b + 1) * W::FILE_BLOCK_BYTES];
        let d = scale_at(block);
        for (i, v) in chunk.iter_mut().enumerate() {
            *v = T::from_f64(W::weight(d, W::q_at(&block[2..], i)) as f64);
        }
    }
}

/// Bytes of a (K x N) matrix of `W` as file blocks: N runs of `ceil(K / 32)` blocks.
pub fn file_bytes<W: BlockFormat>(k: usize, n: usize) -> Option<usize> {
    n.checked_mul(k.div_ceil(QK))?
        .checked_mul(W::FILE_BLOCK_BYTES)
}

/// Quantizes the (K x N) matrix `v` (any strides) to `W` along K (its rows: each column's K
/// values are that column's blocks), with the reference rounding: N runs of `ceil(K / 32)`
/// file blocks. A column whose K is not a multiple of 32 ends in a short block (see the module
/// documentation). `Error::Value` names the column, the depth (row of `v`) and what is wrong
/// for a value that is not finite or a block whose scale overflows float16.
pub fn quantize<W: BlockFormat, T: Element>(v: MatRef<'_, T>) -> Result<Vec<u8>> {
    let (k, n) = (v.rows, v.cols);
    let nb = k.div_ceil(QK);
    let len = file_bytes::<W>(k, n)
        .ok_or_else(|| Error::Memory(format!("quantizing a ({k}, {n}) matrix: size overflows")))?;
    let mut out = Vec::new();
    out.try_reserve_exact(len)
        .map_err(|_| Error::Memory(format!("quantizing a matrix: cannot allocate {len} bytes")))?;
    out.resize(len, 0u8);
    if len == 0 {
        return Ok(out);
    }
    let first_error = std::sync::Mutex::new(None::<(usize, usize, QuantizeError)>);
    let ptr = threads::SendPtr(out.as_mut_ptr());
    let row_bytes = nb * W::FILE_BLOCK_BYTES;
    // Columns a task: each column is one run of blocks.
    const COLS: usize = 16;
    let task = |t: usize| {
        let mut x = [0f32; QK];
        for j in t * COLS..((t + 1) * COLS).min(n) {
            // SAFETY: column j's run of blocks is this task's alone.
            let run =
                unsafe { std::slice::from_raw_parts_mut(ptr.get().add(j * row_bytes), row_bytes) };
            for b in 0..nb {
                let live = QK.min(k - b * QK);
                for (i, xi) in x[..live].iter_mut().enumerate() {
                    *xi = v.at(b * QK + i, j).to_f64() as f32;
                }
                let block = &mut run[b * W::FILE_BLOCK_BYTES..(b + 1) * W::FILE_BLOCK_BYTES];
                if let Err(e) = W::quantize_block(&x[..live], block) {
                    let mut first = first_error.lock().unwrap_or_else(|p| p.into_inner());
                    let at = match e {
                        QuantizeError::NonFinite(i) => b * QK + i,
                        QuantizeError::ScaleOverflow(_) => b * QK,
                    };
                    if first.is_none_or(|(fj, fk, _)| (j, at) < (fj, fk)) {
                        *first = Some((j, at, e));
                    }
                    return;
                }
            }
        }
    };
    let tasks = n.div_ceil(COLS);
    if k * n >= 1 << 16 {
        threads::parallel_for(tasks, task);
    } else {
        (0..tasks).for_each(task);
    }
    if let Some((j, at, e)) = first_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        let name = W::FORMAT_NAME;
        return Err(Error::Value(match e {
            QuantizeError::NonFinite(_) => format!(
                "{name}: the value at depth {at} of column {j} is {}; {name} blocks hold finite \
                 values only",
                v.at(at, j).to_f64()
            ),
            QuantizeError::ScaleOverflow(d) => format!(
                "{name}: the block of depths {at}..{} of column {j} is too large: its scale {d:e} \
                 overflows float16",
                (at + QK).min(k)
            ),
        }));
    }
    Ok(out)
}

/// What callers knowing a block format by name only can do with it (see
/// `registry::StoredFormat::block_codec`).
#[derive(Clone, Copy, Debug)]
pub struct BlockCodec {
    /// The GGUF (ggml) type name.
    pub gguf_type: &'static str,
    /// Bytes of one block in a file.
    pub file_block_bytes: usize,
    /// float32 values `(k, n)` quantized along K: [`quantize`].
    pub quantize: for<'a> fn(MatRef<'a, f32>) -> Result<Vec<u8>>,
    /// The first `out.len()` values of one run of file blocks: [`widen_row`].
    pub widen_row: fn(&[u8], &mut [f32]),
}

impl BlockCodec {
    /// The codec of format `W`.
    pub const fn of<W: BlockFormat>() -> BlockCodec {
        BlockCodec {
            gguf_type: W::GGUF_TYPE,
            file_block_bytes: W::FILE_BLOCK_BYTES,
            quantize: quantize::<W, f32>,
            widen_row: widen_row::<W, f32>,
        }
    }
}

/// The layout facts a [`BlockFormat`]'s panels must meet (checked by the formats' tests).
#[cfg(test)]
pub(crate) fn check_layout<W: BlockFormat>() {
    assert_eq!(std::mem::size_of::<W>(), 1);
    assert_eq!(W::PANEL_NR, BLOCK_NR);
    assert_eq!(W::BLOCK_K, QK);
    assert_eq!(W::PANEL_BLOCK_UNITS, SCALE_BYTES + QK * W::STEP_BYTES);
    assert_eq!(W::FILE_BLOCK_BYTES, 2 + W::STEP_BYTES);
    assert_eq!(W::PANEL_BLOCK_UNITS % 64, 0, "blocks of whole cache lines");
    assert_eq!(W::PANEL_KC_MAX % QK, 0);
}
