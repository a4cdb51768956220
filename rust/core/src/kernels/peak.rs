//! The FMA probe: how fast one core retires fused multiply-adds on a family's widest vectors
//! when nothing else limits it (no loads, no stores: independent chains held in registers, at
//! least as many as the FMA latency times the FMA units, so that every unit issues every
//! cycle: twelve on x86-64, where two units of latency four need eight and 16 vector
//! registers hold no more than twelve chains and the two operands; sixteen on aarch64, where
//! cores with four units of latency four need sixteen).
//!
//! Benchmarks divide by this rate to say how far a product or a forward is from the machine's
//! floor. A product that stays in the cache measures a lower bound of it only (its loads and
//! stores take issue slots the probe leaves to the FMAs).
//!
//! The chains are [`super::probe`]'s.

use super::probe::Probe;
use super::Kernel;
use std::time::Instant;

/// Runs kernel `k`'s probe (float64 when `double`) for `rounds` rounds.
///
/// # Safety
/// The CPU supports `k`.
unsafe fn run(k: Kernel, double: bool, rounds: usize) -> Probe {
    super::dispatch::fma_probe(k, double, rounds)
}

/// The FMA rate of one core with kernel `k`'s vectors, in FLOP/s (an FMA is two FLOPs): the
/// best of five timings of about `seconds` / 5 each, on the calling thread. `None` when this CPU
/// cannot run `k`.
pub fn fma_rate(k: Kernel, double: bool, seconds: f64) -> Option<f64> {
    if !k.supported() {
        return None;
    }
    let timed = |rounds: usize| {
        let t0 = Instant::now();
        // SAFETY: `k` is supported (checked above).
        let (sum, chains, lanes) = unsafe { run(k, double, rounds) };
        std::hint::black_box(sum);
        (
            t0.elapsed().as_secs_f64(),
            (2 * chains * lanes) as f64 * rounds as f64,
        )
    };
    // Rounds doubled until a timing is long enough to scale from, then scaled to one slice.
    let slice = seconds.max(1e-3) / 5.0;
    let mut rounds = 1usize << 10;
    let mut t = timed(rounds).0;
    while t < slice / 8.0 && rounds < 1 << 40 {
        rounds *= 2;
        t = timed(rounds).0;
    }
    let rounds = ((rounds as f64 * slice / t.max(1e-9)) as usize).max(1);
    let best = (0..5)
        .map(|_| timed(rounds))
        .map(|(t, flops)| flops / t.max(1e-9))
        .fold(0.0f64, f64::max);
    Some(best)
}

#[cfg(test)]
mod tests {
    use super::super::probe::{chain, start};
    use super::*;

    /// Every family this CPU runs computes the chains the scalar reference computes, lane for
    /// lane (float64 vectors hold half the lanes of float32 ones), and reports a positive rate.
    #[test]
    fn probes_compute_the_reference_chains() {
        for k in super::super::available() {
            for rounds in [0usize, 1, 3, 40, 1000] {
                // SAFETY: `available` lists the kernels this CPU supports.
                let (s32, chains32, lanes32) = unsafe { run(k, false, rounds) };
                let (s64, chains64, lanes64) = unsafe { run(k, true, rounds) };
                let want32: f64 = (0..chains32)
                    .map(|i| chain::<f32>(rounds, start(i) as f32) as f64)
                    .sum();
                let want64: f64 = (0..chains64).map(|i| chain::<f64>(rounds, start(i))).sum();
                let what = format!("{} rounds={rounds}", k.name());
                assert_eq!(s32, want32 * lanes32 as f64, "f32 {what}");
                assert_eq!(s64, want64 * lanes64 as f64, "f64 {what}");
                assert!(chains32 >= 8 && chains32 == chains64, "{what}");
                assert!(
                    lanes32 == 2 * lanes64 || (lanes32, lanes64) == (1, 1),
                    "{what}"
                );
            }
            let r = fma_rate(k, false, 0.01).unwrap();
            assert!(r.is_finite() && r > 0.0, "{} {r}", k.name());
        }
    }
}
