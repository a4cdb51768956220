//! Block sizes, with environment overrides for tuning experiments.
//!
//! `GPTCORE_KC` overrides the largest depth block (KC) and `GPTCORE_MC` the rows of A per work
//! item (rounded to a multiple of 12, which every kernel's MR divides). They change speed
//! only: the exactness contract makes every result independent of the block sizes.

use super::MC;
use crate::Element;
use std::sync::OnceLock;

fn env_usize(name: &str) -> Option<usize> {
    std::env::var(name)
        .ok()?
        .trim()
        .parse::<usize>()
        .ok()
        .filter(|&v| v > 0)
}

/// Largest depth block for type T.
pub fn kc_max<T: Element>() -> usize {
    static KC: OnceLock<Option<usize>> = OnceLock::new();
    KC.get_or_init(|| env_usize("GPTCORE_KC"))
        .unwrap_or(T::KC_MAX)
}

/// Rows of A per work item.
pub fn mc() -> usize {
    static M: OnceLock<usize> = OnceLock::new();
    *M.get_or_init(|| {
        env_usize("GPTCORE_MC")
            .map(|v| v.div_ceil(12) * 12)
            .unwrap_or(MC)
    })
}
