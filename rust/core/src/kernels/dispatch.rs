//! Which micro-kernel runs: detected once from the CPU, overridable for tests.
//!
//! Order of preference: AVX-512F, then AVX2+FMA, then NEON (aarch64), then the portable
//! kernel (any CPU). `GPTCORE_KERNEL=avx512|avx2|neon|portable` or [`set_kernel`] forces one
//! (if the CPU has it).
//! What each family needs of the CPU is the family's own business (`Family::supported`).

use std::sync::atomic::{AtomicU8, Ordering};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kernel {
    Avx512,
    Avx2,
    Neon,
    Portable,
}

impl Kernel {
    pub const ALL: [Kernel; 4] = [Kernel::Avx512, Kernel::Avx2, Kernel::Neon, Kernel::Portable];

    pub fn name(self) -> &'static str {
        match self {
            Kernel::Avx512 => "avx512",
            Kernel::Avx2 => "avx2",
            Kernel::Neon => "neon",
            Kernel::Portable => "portable",
        }
    }

    pub fn from_name(s: &str) -> Option<Kernel> {
        Kernel::ALL
            .into_iter()
            .find(|k| k.name() == s.trim().to_ascii_lowercase())
    }

    /// Whether the kernel is compiled for this architecture (x86-64: avx512, avx2; aarch64:
    /// neon; portable everywhere).
    pub fn built(self) -> bool {
        match self {
            Kernel::Avx512 | Kernel::Avx2 => cfg!(target_arch = "x86_64"),
            Kernel::Neon => cfg!(target_arch = "aarch64"),
            Kernel::Portable => true,
        }
    }

    /// Whether this CPU can run the kernel.
    pub fn supported(self) -> bool {
        self.built() && self.family_supported()
    }

    fn code(self) -> u8 {
        match self {
            Kernel::Avx512 => 1,
            Kernel::Avx2 => 2,
            Kernel::Portable => 3,
            Kernel::Neon => 4,
        }
    }

    fn from_code(c: u8) -> Option<Kernel> {
        match c {
            1 => Some(Kernel::Avx512),
            2 => Some(Kernel::Avx2),
            3 => Some(Kernel::Portable),
            4 => Some(Kernel::Neon),
            _ => None,
        }
    }
}

/// The kernels this CPU supports, best first.
pub fn available() -> Vec<Kernel> {
    Kernel::ALL.into_iter().filter(|k| k.supported()).collect()
}

/// The best kernel this CPU supports.
pub fn detect() -> Kernel {
    available()[0]
}

static ACTIVE: AtomicU8 = AtomicU8::new(0);

/// The kernel in use.
pub fn current() -> Kernel {
    if let Some(k) = Kernel::from_code(ACTIVE.load(Ordering::Relaxed)) {
        return k;
    }
    let k = std::env::var("GPTCORE_KERNEL")
        .ok()
        .and_then(|s| Kernel::from_name(&s))
        .filter(|k| k.supported())
        .unwrap_or_else(detect);
    ACTIVE.store(k.code(), Ordering::Relaxed);
    k
}

/// `k` when this CPU runs it, else `Error::Value` naming it and the kernels that run here.
pub fn require(k: Kernel) -> crate::Result<Kernel> {
    if k.supported() {
        return Ok(k);
    }
    crate::value_error!(
        "kernel {:?} is not supported on this CPU (available: {})",
        k.name(),
        available()
            .iter()
            .map(|k| k.name())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// Force a kernel (`None` returns to the detected best).
pub fn set_kernel(k: Option<Kernel>) -> crate::Result<Kernel> {
    let k = match k {
        None => detect(),
        Some(k) => require(k)?,
    };
    ACTIVE.store(k.code(), Ordering::Relaxed);
    Ok(k)
}
