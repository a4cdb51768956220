//! Weight storage formats: how the right-hand side of a product is stored in its packed panels,
//! and how the kernels widen it, exactly, to the compute type as they load it.
//!
//! A format is a type implementing [`StorageFormat`] (one unit of storage: a value, or a byte
//! of a block) and [`WidensTo`] (what a panel's depth step holds, widened). The compute types
//! are formats of their own (`compute.rs`: float32 and float64 panels are read as they are);
//! below them, [`Bf16`] and [`F16`] store single values ([`Float16Format`]), and [`Q8_0`] and
//! [`Q4_0`] store blocks ([`BlockFormat`], `block.rs`): 32 weights along the depth K and one
//! float16 scale per block and column. A block format sets [`StorageFormat::BLOCK_K`] to the
//! block's depth: packed depth blocks are then whole multiples of it, and a panel stores, for
//! each block, its columns' scales and values in the units the format chooses
//! ([`StorageFormat::PANEL_BLOCK_UNITS`]).
//!
//! # Adding a format
//! 1. One file here: the unit type with [`StorageFormat`] and [`WidensTo`] for float32 and
//!    float64 (the definition of its values: the portable kernels run it, and every family's
//!    kernels for the format must equal it bit for bit), and its rounding from float32. A
//!    format of single values is packed by `gemm::PackedB`'s own packing ([`ValueFormat`]); a
//!    block format packs its panels itself and hands them over with
//!    `PackedB::from_packed_units` (a format of ggml's 32-weight blocks with a float16 scale
//!    implements [`BlockFormat`], and `block.rs` packs, quantizes and unpacks it).
//! 2. One line in `for_each_stored_format!` (`registry.rs`). From it, every kernel family gets
//!    a method for the format (the portable kernels unless the family overrides it), float32
//!    and float64 get `KernelsFor` it, `weight_dtype` accepts its name ([`WeightFormat`]), and
//!    the decoder looks up what to do with it by the entry's kind (`decoder::storage`:
//!    `Stored<W>` for formats of 16-bit values, `Blocks<W>` for block formats). No layer of the
//!    decoder changes.
//! 3. Optionally, one kernel file per family (`kernels/<family>/<format>.rs`), returned by the
//!    family's method for the format.
//!
//! Whatever the format, the products' contract holds for the widened values: a product with a
//! stored right-hand side gives, bit for bit, the product whose right-hand side holds the
//! values the format widens to.

mod bf16;
pub mod block;
mod compute;
mod f16;
mod format;
mod q4_0;
mod q8_0;
mod registry;

pub use bf16::Bf16;
pub use block::BlockFormat;
pub use f16::F16;
pub use format::{
    b_at, half_offset, values_of_bits, vec_of_bits, widen_values, BPanel, Bits16, Float16Format,
    StorageFormat, ValueFormat, WidensTo,
};
pub use q4_0::Q4_0;
pub use q8_0::Q8_0;
pub(crate) use registry::for_each_stored_format;
pub use registry::{StoredFormat, WeightFormat};
