//! Block sizes, with environment overrides for tuning experiments.
//!
//! `GPTCORE_KC` overrides the largest depth block (KC) and `GPTCORE_MC` the rows of A per work
//! item (rounded to a multiple of the 12-row quantum, which every family's MR divides), `GPTCORE_NC` the panels
//! of B in one column group (rounded to a multiple of 4, the wide kernel's width), `GPTCORE_B_CHUNK_KIB` the size of
//! packed B one column chunk may span when several row blocks share it, `GPTCORE_SLAB_KIB` the
//! slabs a B packed for one product is packed in, `GPTCORE_L2_KIB` the L2 size the slab rules
//! assume (read from sysfs otherwise). They change speed
//! only: the exactness contract makes every result independent of the block sizes.

use crate::formats::StorageFormat;
use std::sync::OnceLock;

/// Rows of A handled by one work item (a multiple of every family's MR, which divides 12).
pub const MC: usize = 192;

/// Panels of B (of NR columns) in one column group: a group's C tile (MC x 8 NR) stays in L2
/// while it goes through every depth block (a multiple of 4 for the wide kernel).
pub const NC_PANELS: usize = 8;

/// Packed B spanned by one column chunk when several row blocks go through a B of more than
/// four times this (a B that does not stay in the L3 cache, such as the LM head's): the row
/// blocks of a chunk run one after the other (two threads side by side), so the chunk is read
/// from memory once and then from the L3 cache, instead of once per row block.
pub const B_CHUNK_BYTES: usize = 4 << 20;

/// Tiles are shared out in row blocks of whole groups of this many rows.
pub const ROW_QUANTUM: usize = 12;

/// Products below this many multiply-adds run on the calling thread alone.
pub const PARALLEL_MIN_FLOPS: f64 = 262_144.0;

/// Bytes of one slab of B packed for a product with `Rhs::PackHere` (see `pack_by_slabs`):
/// half of a 2 MiB L2 cache.
pub const SLAB_BYTES: usize = 1 << 20;

/// Whether an (m x k) by (k x n) product is large enough to run on every thread.
pub fn runs_on_every_thread(m: usize, k: usize, n: usize) -> bool {
    m as f64 * k as f64 * n as f64 >= PARALLEL_MIN_FLOPS
}

fn env_usize(name: &str) -> Option<usize> {
    std::env::var(name)
        .ok()?
        .trim()
        .parse::<usize>()
        .ok()
        .filter(|&v| v > 0)
}

/// Largest depth block of B holding `W` values.
pub fn kc_max<W: StorageFormat>() -> usize {
    static KC: OnceLock<Option<usize>> = OnceLock::new();
    KC.get_or_init(|| env_usize("GPTCORE_KC"))
        .unwrap_or(W::PANEL_KC_MAX)
}

/// Rows of A per work item.
pub fn mc() -> usize {
    static M: OnceLock<usize> = OnceLock::new();
    *M.get_or_init(|| {
        env_usize("GPTCORE_MC")
            .map(|v| v.div_ceil(ROW_QUANTUM) * ROW_QUANTUM)
            .unwrap_or(MC)
    })
}

/// Panels of B in one column group.
pub fn nc_panels() -> usize {
    static N: OnceLock<usize> = OnceLock::new();
    *N.get_or_init(|| {
        env_usize("GPTCORE_NC")
            .map(|v| v.div_ceil(4) * 4)
            .unwrap_or(NC_PANELS)
    })
}

/// Set by tests to make small products take the column-chunk path (0: not set).
#[cfg(test)]
pub(crate) static B_CHUNK_FOR_TESTS: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);

/// Bytes of packed B in one column chunk when several row blocks go through it.
pub fn b_chunk_bytes() -> usize {
    #[cfg(test)]
    {
        let v = B_CHUNK_FOR_TESTS.load(std::sync::atomic::Ordering::Relaxed);
        if v > 0 {
            return v;
        }
    }
    static B: OnceLock<usize> = OnceLock::new();
    *B.get_or_init(|| {
        env_usize("GPTCORE_B_CHUNK_KIB")
            .map(|v| v << 10)
            .unwrap_or(B_CHUNK_BYTES)
    })
}

/// Bytes of one slab of B packed for one product (`GPTCORE_SLAB_KIB` overrides).
pub fn slab_bytes() -> usize {
    static S: OnceLock<usize> = OnceLock::new();
    *S.get_or_init(|| {
        env_usize("GPTCORE_SLAB_KIB")
            .map(|v| v << 10)
            .unwrap_or(SLAB_BYTES)
    })
}

/// Bytes of one core's L2 cache as Linux describes CPU 0's caches in sysfs
/// (`GPTCORE_L2_KIB` overrides); `None` where nothing says (another system, a hidden sysfs).
pub fn l2_bytes() -> Option<usize> {
    static L2: OnceLock<Option<usize>> = OnceLock::new();
    *L2.get_or_init(|| {
        env_usize("GPTCORE_L2_KIB")
            .map(|v| v << 10)
            .or_else(sysfs_l2_bytes)
    })
}

fn sysfs_l2_bytes() -> Option<usize> {
    for i in 0..16 {
        let dir = format!("/sys/devices/system/cpu/cpu0/cache/index{i}");
        let read = |f: &str| std::fs::read_to_string(format!("{dir}/{f}")).ok();
        let level = read("level")?;
        let instruction = read("type").is_some_and(|t| t.trim() == "Instruction");
        if level.trim() == "2" && !instruction {
            return parse_cache_size(&read("size")?);
        }
    }
    None
}

/// A cache size as sysfs writes it: `2048K`, `1M` or plain bytes.
pub(crate) fn parse_cache_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let (digits, unit) = match s.char_indices().last()? {
        (i, 'K') => (&s[..i], 1 << 10),
        (i, 'M') => (&s[..i], 1 << 20),
        _ => (s, 1),
    };
    digits
        .parse::<usize>()
        .ok()
        .filter(|&v| v > 0)?
        .checked_mul(unit)
}
