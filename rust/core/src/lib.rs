//! gptcore-core: the numerical heart of gptcore, free of any Python.
//!
//! * [`gemm`]: a blocked, packed, SIMD matrix multiply with an exactness contract
//!   (every output element is one ascending fused-multiply-add chain).
//! * [`threads`]: the thread team and its size.
//! * [`memory`]: large zeroed buffers on huge pages; [`buffer_pool`]: result buffers reused.
//! * [`rng`]: the lesson's random stream (Rust `rand` 0.8.5 `StdRng` + `rand_distr` 0.4.3).

pub mod attention;
pub mod buffer_pool;
pub mod decoder;
pub mod element;
pub mod error;
pub mod formats;
pub mod gemm;
pub mod kernels;
pub mod kv_cache;
pub mod memory;
pub mod ops;
pub mod profile;
pub mod rng;
pub mod threads;

pub use element::Element;
pub use error::{Error, Result};
