//! Weight storage formats: how the right-hand side of a product is stored in its packed panels,
//! and how the kernels widen it, exactly, to the compute type as they load it.
//!
//! A format is a type implementing [`StorageFormat`] (one unit of storage: a value, or a byte
//! of a block) and [`WidensTo`] (what a panel's depth step holds, widened). The compute types
//! are formats of their own (`compute.rs`: float32 and float64 panels are read as they are);
//! below them, [`Bf16`] and [`F16`] store single values ([`Float16Format`]). A format whose
//! values come in blocks along the depth K (`q8_0` / `q4_0`: 32 weights and one float16 scale
//! per block and column) sets [`StorageFormat::BLOCK_K`] to the block's depth: packed depth
//! blocks are then whole multiples of it, and a panel stores, for each block, its columns'
//! scales and values in the units the format chooses ([`StorageFormat::PANEL_BLOCK_UNITS`]).
//!
//! # Adding a format
//! 1. One file here: the unit type, [`StorageFormat`], [`WidensTo`] (the portable definition
//!    of its values, which the portable kernels run), and its rounding from float32.
//! 2. One line in `for_each_stored_format!` (`registry.rs`): the kernels then take it in every
//!    family (the
//!    portable kernels in a family that has none of its own), the decoder stores weights in
//!    it, and `weight_dtype` accepts its name.
//! 3. Optionally, one kernel file per family (`kernels/<family>/<format>.rs`) and the family's
//!    method for the format returning them.
//!
//! Whatever the format, the products' contract holds for the widened values: a product with a
//! stored right-hand side gives, bit for bit, the product whose right-hand side holds the
//! values the format widens to.

mod bf16;
mod compute;
mod f16;
mod format;
mod registry;

pub use bf16::Bf16;
pub use f16::F16;
pub use format::{
    b_at, half_offset, values_of_bits, vec_of_bits, widen_values, BPanel, Bits16, Float16Format,
    StorageFormat, ValueFormat, WidensTo,
};
pub(crate) use registry::for_each_stored_format;
pub use registry::{StoredFormat, WeightFormat};
