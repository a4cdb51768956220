//! The registration of the storage formats ([`for_each_stored_format!`], the one place that
//! lists them) and the formats as values known by name ([`StoredFormat`], [`WeightFormat`]).

use super::block::{BlockCodec, BlockFormat};
use super::format::{Bits16, StorageFormat};

/// Calls macro `$m` with every storage format below the compute types, once: the one
/// registration of a format (see the module documentation). Each entry is
/// `type => name of the kernel families' method for it in kind`, the kind saying how the
/// format stores its weights: `values` (one unit a value, a [`super::ValueFormat`]) or
/// `blocks` (a [`super::BlockFormat`]).
macro_rules! for_each_stored_format {
    ($m:ident) => {
        $m! {
            $crate::formats::Bf16 => bf16 in values,
            $crate::formats::F16 => f16 in values,
            $crate::formats::Q8_0 => q8_0 in blocks,
            $crate::formats::Q4_0 => q4_0 in blocks,
        }
    };
}
pub(crate) use for_each_stored_format;

/// A registered storage format, known by name ([`WeightFormat::Stored`]).
#[derive(Clone, Copy, Debug)]
pub struct StoredFormat {
    name: &'static str,
    bits16: Option<Bits16>,
    block_k: usize,
    blocks: Option<BlockCodec>,
}

impl StoredFormat {
    /// The entry of format `W`, a format of single values.
    const fn values<W: StorageFormat>() -> StoredFormat {
        StoredFormat {
            name: W::FORMAT_NAME,
            bits16: W::BITS16,
            block_k: W::BLOCK_K,
            blocks: None,
        }
    }

    /// The entry of block format `W`.
    const fn blocks<W: BlockFormat>() -> StoredFormat {
        StoredFormat {
            name: W::FORMAT_NAME,
            bits16: None,
            block_k: W::BLOCK_K,
            blocks: Some(BlockCodec::of::<W>()),
        }
    }

    pub fn name(self) -> &'static str {
        self.name
    }

    /// The 16-bit conversions, for a format of 16-bit values.
    pub fn bits16(self) -> Option<Bits16> {
        self.bits16
    }

    /// The quantizer and the file layout, for a block format.
    pub fn block_codec(self) -> Option<BlockCodec> {
        self.blocks
    }

    /// Depth steps one block of the format covers: 1 for a format of single values, 32 for
    /// `q8_0` and `q4_0` (see [`StorageFormat::BLOCK_K`]).
    pub fn block_k(self) -> usize {
        self.block_k
    }

    /// Every registered format, in registration order.
    pub fn all() -> &'static [StoredFormat] {
        macro_rules! list {
            ($($W:ty => $method:ident in $kind:ident),* $(,)?) => {
                {
                    static ALL: &[StoredFormat] = &[$(StoredFormat::$kind::<$W>()),*];
                    ALL
                }
            };
        }
        for_each_stored_format!(list)
    }

    /// The registered format called `name`.
    pub fn named(name: &str) -> Option<StoredFormat> {
        Self::all().iter().copied().find(|f| f.name == name)
    }
}

impl PartialEq for StoredFormat {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}
impl Eq for StoredFormat {}

/// The storage format of a model's weight matrices and embedding tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeightFormat {
    /// The model's compute type (float32 or float64).
    Full,
    /// A registered format, widened exactly to the compute type where it is read.
    Stored(StoredFormat),
}

impl WeightFormat {
    /// `"full"`, or the stored format's name.
    pub fn name(self) -> &'static str {
        match self {
            WeightFormat::Full => "full",
            WeightFormat::Stored(f) => f.name(),
        }
    }

    /// The registered format called `name` (`None` for any other name, `"full"` included).
    pub fn named(name: &str) -> Option<WeightFormat> {
        StoredFormat::named(name).map(WeightFormat::Stored)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::{Bf16, Float16Format, F16};

    /// Every registered format is found by its name and by nothing else, the names are
    /// distinct, and a 16-bit format's conversions round and widen as its type does.
    #[test]
    fn the_registry_lists_every_format_once() {
        let names: Vec<&str> = StoredFormat::all().iter().map(|f| f.name()).collect();
        assert_eq!(names, ["bfloat16", "float16", "q8_0", "q4_0"]);
        let blocks: Vec<usize> = StoredFormat::all().iter().map(|f| f.block_k()).collect();
        assert_eq!(blocks, [1, 1, 32, 32]);
        for f in StoredFormat::all() {
            assert_eq!(StoredFormat::named(f.name()), Some(*f));
            assert_eq!(WeightFormat::named(f.name()).unwrap().name(), f.name());
        }
        for bad in ["full", "float32", "BFLOAT16", "", "Q8_0", "q4_1"] {
            assert!(WeightFormat::named(bad).is_none(), "{bad}");
        }
        let x = [
            1.0f32,
            1.0 + 2f32.powi(-8),
            -3.3e38,
            65520.0,
            f32::MIN_POSITIVE,
        ];
        assert!(StoredFormat::named("q8_0").unwrap().bits16().is_none());
        for (f, round, widen) in [
            (
                "bfloat16",
                (|v: f32| Bf16::from_f32(v).to_bits()) as fn(f32) -> u16,
                (|b: u16| Bf16::from_bits(b).to_f32()) as fn(u16) -> f32,
            ),
            (
                "float16",
                |v| F16::from_f32(v).to_bits(),
                |b| F16::from_bits(b).to_f32(),
            ),
        ] {
            let bits = StoredFormat::named(f).unwrap().bits16().unwrap();
            let got = (bits.round)(&x);
            assert_eq!(got, x.map(round), "{f}");
            let back = (bits.widen)(&got);
            assert!(back
                .iter()
                .zip(&got)
                .all(|(v, &b)| v.to_bits() == widen(b).to_bits()));
        }
    }
}
