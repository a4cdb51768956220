//! The read probe: how many bytes a second the thread team reads from memory when nothing else
//! limits it. Each thread sums its own part of a buffer (the benchmarks give one twice the
//! last-level cache, so that it comes from memory) as 32-bit integers in [`LANES`] independent
//! lanes (wrapping adds: one cycle each, no chain of dependent operations, compiled for the
//! family's vectors), asking for each cache line [`AHEAD`] of its use, so the loads alone set
//! the pace.
//!
//! Benchmarks divide by this rate where a step must read every weight (decode, one-row
//! products). A library's own reduction is a lower bound of it only: a float sum carries a
//! dependency from step to step, which can hold it below what the memory delivers (and below
//! gptcore's one-row products).

use super::Kernel;
use crate::memory::try_zeroed;
use crate::threads;
use std::time::Instant;

/// Independent 32-bit lanes of the sum: 128 bytes a step, two cache lines.
pub const LANES: usize = 32;

/// How far ahead (in values: 4 KiB) each step asks for the two cache lines it will read: fetching
/// ahead hides the latency the hardware prefetcher alone leaves one thread exposed to.
pub const AHEAD: usize = 1024;

/// The wrapping sum of the bits of `values`, lane `i % LANES` taking value `i`, the lanes
/// folded in order at the end; the lines [`AHEAD`] are fetched as it goes.
#[inline(always)]
pub fn sum_bits(values: &[f32]) -> u32 {
    let mut acc = [0u32; LANES];
    let mut steps = values.chunks_exact(LANES);
    let p = values.as_ptr();
    for (i, step) in (&mut steps).enumerate() {
        let next = p.wrapping_add(i * LANES + AHEAD);
        super::prefetch(next);
        super::prefetch(next.wrapping_add(LANES / 2));
        for (a, v) in acc.iter_mut().zip(step) {
            *a = a.wrapping_add(v.to_bits());
        }
    }
    for (a, v) in acc.iter_mut().zip(steps.remainder()) {
        *a = a.wrapping_add(v.to_bits());
    }
    acc.iter().fold(0, |s, &a| s.wrapping_add(a))
}

/// Bytes per second that the thread team ([`threads::num_threads`] threads) reads with kernel
/// `k`'s vectors: a buffer of `bytes` (rounded down to whole float32 values, at least one per
/// thread) in as many equal parts as threads, every thread summing parts until none is left;
/// the best of the passes made in about `seconds` (at least three). `None` when this CPU
/// cannot run `k`; `Err` when the buffer cannot be allocated.
pub fn read_rate(k: Kernel, bytes: usize, seconds: f64) -> crate::Result<Option<f64>> {
    if !k.supported() {
        return Ok(None);
    }
    let parts = threads::num_threads();
    let n = (bytes / 4).max(parts);
    let mut buf = try_zeroed::<f32>(n, "read_rate")?;
    // Every page written once: faulted in, not the shared zero page.
    buf.fill(1.0);
    let buf = &buf;
    let len = n.div_ceil(parts);
    let range = |i: usize| (i * len).min(n)..((i + 1) * len).min(n);
    let pass = || {
        let t0 = Instant::now();
        threads::parallel_for(parts, |i| {
            let part = &buf[range(i)];
            std::hint::black_box(k.vectorized(|| sum_bits(part)));
        });
        t0.elapsed().as_secs_f64()
    };
    let start = Instant::now();
    let mut best = f64::INFINITY;
    let mut passes = 0;
    while passes < 3 || start.elapsed().as_secs_f64() < seconds {
        best = best.min(pass());
        passes += 1;
    }
    Ok(Some((n * 4) as f64 / best.max(1e-9)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lanes add up what a plain loop adds up, for lengths around whole steps, and every
    /// family this CPU runs reports a positive, finite rate on one thread and on the team.
    #[test]
    fn sum_and_rate() {
        for n in [0usize, 1, LANES - 1, LANES, LANES + 1, 5 * LANES + 7] {
            let v: Vec<f32> = (0..n).map(|i| i as f32 * 1.5 - 3.0).collect();
            let want = v.iter().fold(0u32, |s, x| s.wrapping_add(x.to_bits()));
            assert_eq!(sum_bits(&v), want, "n={n}");
        }
        for k in super::super::available() {
            for bytes in [0usize, 3, 1 << 20] {
                let r = read_rate(k, bytes, 0.001).unwrap().unwrap();
                assert!(r.is_finite() && r > 0.0, "{} {bytes}: {r}", k.name());
            }
        }
    }
}
