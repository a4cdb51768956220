//! What a storage format is ([`StorageFormat`]), how its panels are laid out ([`BPanel`]) and
//! how they widen ([`WidensTo`]); the formats of 16-bit values ([`Float16Format`]).

/// One storage format of packed right-hand sides.
///
/// Panel `jp` of a depth block of `kc` steps holds the format's blocks one after the other,
/// each [`Self::PANEL_BLOCK_UNITS`] units; a format of single values (`BLOCK_K == 1`) stores
/// `PANEL_NR` values a step, step by step or, when [`Self::HALVES`] and the kernel family asks
/// for it, as two halves of `PANEL_NR / 2` columns one after the other (see [`BPanel`]).
///
/// # Safety
/// Every bit pattern of the unit's size that is all zeros is a valid unit
/// ([`Self::ZERO_UNIT`]): buffers of units are allocated zeroed. The constants describe the
/// layout the kernels of the format read: a panel of `kc` steps is exactly
/// [`Self::panel_units`]`(kc)` units.
pub unsafe trait StorageFormat: Copy + Send + Sync + 'static {
    /// The format's name, as `weight_dtype` and `dtype` spell it.
    const FORMAT_NAME: &'static str;
    /// Depth steps one block covers: 1 for a format of single values; the depth of a block
    /// (32 for `q8_0`) for a format whose blocks carry a scale per column.
    const BLOCK_K: usize;
    /// Columns of one packed panel (the same for every kernel family, so that a matrix packed
    /// once serves whichever family runs).
    const PANEL_NR: usize;
    /// Units one block of one panel takes: `PANEL_NR * BLOCK_K` values and, for a block
    /// format, the block's `PANEL_NR` scales.
    const PANEL_BLOCK_UNITS: usize;
    /// Whether a panel may be stored as two halves for a family that asks for them: float32
    /// and float64 (a step of a panel is two cache lines or more), not 16-bit values (a step
    /// is one line, which a half-width strip reads half of anyway).
    const HALVES: bool;
    /// The unit whose bits are all zero: a fresh buffer's units, and the padding of a partial
    /// last panel (zero values).
    const ZERO_UNIT: Self;
    /// Largest depth block (a multiple of `BLOCK_K`; the loops' tuning may set another).
    const PANEL_KC_MAX: usize;
    /// The conversions between float32 values and the format's 16-bit patterns, for a format
    /// of 16-bit values ([`Bits16::of`]), so that callers knowing the format by name only
    /// can use them.
    const BITS16: Option<Bits16> = None;

    /// Units a panel of `steps` depth steps takes (a partial last block counts whole).
    #[inline(always)]
    fn panel_units(steps: usize) -> usize {
        steps.div_ceil(Self::BLOCK_K) * Self::PANEL_BLOCK_UNITS
    }
}

/// A format that stores every value on its own (`BLOCK_K == 1`): packing moves values, one
/// unit each, into the panels.
pub trait ValueFormat: StorageFormat {}

/// How a panel of the format widens, exactly, to compute type `T`: the definition of the
/// format's values, which every kernel family's kernels for the format must equal bit for bit
/// (the portable kernels run it as it is).
pub trait WidensTo<T>: StorageFormat {
    /// Values `0 .. out.len()` (at most `PANEL_NR`) of depth step `kk` of the panel `b`,
    /// widened, into `out`.
    ///
    /// # Safety
    /// `b` addresses a panel of this format holding step `kk`, laid out as its fields say.
    unsafe fn widen_step(b: &BPanel<Self>, kk: usize, out: &mut [T]);
}

/// A format of 16-bit floating-point values, rounded from float32 one value at a time and
/// widened back exactly.
///
/// Rounding ([`Float16Format::from_f32`]) is IEEE round to nearest, ties to even; a NaN stays a
/// (quiet) NaN with its sign; a value beyond the largest finite one rounds to infinity when
/// IEEE says so.
///
/// # Safety
/// `Self` is `repr(transparent)` over `u16` (its bit pattern): slices and vectors of patterns
/// are viewed as values of the format without a copy ([`values_of_bits`], [`vec_of_bits`]).
pub unsafe trait Float16Format:
    ValueFormat + WidensTo<f32> + WidensTo<f64> + Default + Eq + std::fmt::Debug
{
    fn from_bits(bits: u16) -> Self;
    fn to_bits(self) -> u16;
    /// The exact float32 value.
    fn to_f32(self) -> f32;
    /// `x` rounded to nearest, ties to even (NaN stays NaN, quiet).
    fn from_f32(x: f32) -> Self;
}

/// The conversions of a format of 16-bit values, between float32 values and their patterns.
#[derive(Clone, Copy, Debug)]
pub struct Bits16 {
    /// float32 values rounded to the format, as bit patterns.
    pub round: fn(&[f32]) -> Vec<u16>,
    /// Bit patterns widened to their float32 values (exact).
    pub widen: fn(&[u16]) -> Vec<f32>,
}

impl Bits16 {
    /// The conversions of format `W`.
    pub const fn of<W: Float16Format>() -> Bits16 {
        Bits16 {
            round: round_bits::<W>,
            widen: widen_bits::<W>,
        }
    }
}

fn round_bits<W: Float16Format>(x: &[f32]) -> Vec<u16> {
    x.iter().map(|&v| W::from_f32(v).to_bits()).collect()
}

fn widen_bits<W: Float16Format>(b: &[u16]) -> Vec<f32> {
    b.iter().map(|&v| W::from_bits(v).to_f32()).collect()
}

/// 16-bit patterns viewed as values of a format of 16-bit values (the same bits, no copy).
pub fn values_of_bits<W: Float16Format>(bits: &[u16]) -> &[W] {
    // SAFETY: W is `repr(transparent)` over u16 (the trait's contract).
    unsafe { std::slice::from_raw_parts(bits.as_ptr() as *const W, bits.len()) }
}

/// A vector of 16-bit patterns as a vector of values of the format (the same allocation).
pub fn vec_of_bits<W: Float16Format>(bits: Vec<u16>) -> Vec<W> {
    let mut v = std::mem::ManuallyDrop::new(bits);
    // SAFETY: W is `repr(transparent)` over u16: the same size and alignment.
    unsafe { Vec::from_raw_parts(v.as_mut_ptr() as *mut W, v.len(), v.capacity()) }
}

/// A micro-panel of B as a kernel reads it: its first unit, the distance between its depth
/// steps (between its blocks, for a block format) and the offset of its second half.
///
/// For a format of single values, value `j` (< NR) of step `k` is at `ptr + k * ldb + j` in
/// the first half (`j < h = NR / 2`) and at `ptr + hoff + k * ldb + (j - h)` in the second
/// ([`b_at`]). A panel packed as halves stores each half whole (`ldb = h`, `hoff = kc * h`);
/// one packed step by step (`ldb = NR`, `hoff = h`), B read in place and a panel copied in row
/// order have `ldb` = the row stride and `hoff = h`. A block format's panel holds its blocks
/// `ldb` units apart, in the layout the format defines (`hoff` unused).
#[derive(Clone, Copy, Debug)]
pub struct BPanel<W> {
    pub ptr: *const W,
    pub ldb: usize,
    pub hoff: usize,
}

impl<W: StorageFormat> BPanel<W> {
    /// The same panel from depth step `steps` on (a multiple of the format's block depth).
    #[inline(always)]
    pub fn from_step(self, steps: usize) -> BPanel<W> {
        debug_assert_eq!(steps % W::BLOCK_K, 0);
        BPanel {
            ptr: self.ptr.wrapping_add(steps / W::BLOCK_K * self.ldb),
            ..self
        }
    }
}

/// Where value `j` (< NR) of a depth step lies, in values from the step's first, for a panel
/// whose second half is `hoff` values after its first (see [`BPanel`]); `h` is half the panel.
#[inline(always)]
pub const fn half_offset(j: usize, h: usize, hoff: usize) -> usize {
    if j < h {
        j
    } else {
        hoff + (j - h)
    }
}

/// Where value `j` (< NR) of a depth step that starts at `b` lies ([`half_offset`]).
#[inline(always)]
pub fn b_at<W>(b: *const W, hoff: usize, h: usize, j: usize) -> *const W {
    b.wrapping_add(half_offset(j, h, hoff))
}

/// Values `0 .. out.len()` of depth step `kk` of a panel of single values, each widened by
/// `widen`: [`WidensTo::widen_step`] for a [`ValueFormat`].
///
/// # Safety
/// As for [`WidensTo::widen_step`].
#[inline(always)]
pub unsafe fn widen_values<W: ValueFormat, T>(
    b: &BPanel<W>,
    kk: usize,
    out: &mut [T],
    widen: impl Fn(W) -> T,
) {
    let step = b.ptr.add(kk * b.ldb);
    for (j, v) in out.iter_mut().enumerate() {
        *v = widen(*b_at(step, b.hoff, W::PANEL_NR / 2, j));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Panels of a block format: a panel of `kc` steps takes whole blocks, and a panel read
    /// from a later step starts that many blocks on.
    #[test]
    fn block_geometry() {
        #[derive(Clone, Copy)]
        struct Blocks(#[allow(dead_code)] u8);
        // SAFETY: a byte; the layout below is only computed, never read.
        unsafe impl StorageFormat for Blocks {
            const FORMAT_NAME: &'static str = "blocks";
            const BLOCK_K: usize = 32;
            const PANEL_NR: usize = 32;
            const PANEL_BLOCK_UNITS: usize = 32 * 2 + 32 * 32;
            const HALVES: bool = false;
            const ZERO_UNIT: Self = Blocks(0);
            const PANEL_KC_MAX: usize = 384;
        }
        assert_eq!(Blocks::panel_units(384), 12 * 1088);
        assert_eq!(Blocks::panel_units(33), 2 * 1088);
        assert_eq!(f32::panel_units(7), 7 * 32);
        let base = [Blocks(0); 4];
        let p = BPanel {
            ptr: base.as_ptr(),
            ldb: 1088,
            hoff: 0,
        };
        assert_eq!(p.from_step(96).ptr, base.as_ptr().wrapping_add(3 * 1088));
        let q = BPanel {
            ptr: [0f32; 1].as_ptr(),
            ldb: 16,
            hoff: 16 * 9,
        };
        assert_eq!(q.from_step(5).ptr, q.ptr.wrapping_add(80));
        assert_eq!(q.from_step(5).hoff, q.hoff);
    }
}
