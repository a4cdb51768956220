//! Phase timings of a forward pass, printed to stderr when `GPTCORE_PROFILE=1` (for tuning; off
//! by default, and then free).

pub struct Phases {
    on: bool,
    t: std::time::Instant,
    acc: Vec<(&'static str, f64)>,
}

impl Phases {
    pub fn new() -> Self {
        static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        let on = *ON.get_or_init(|| {
            std::env::var("GPTCORE_PROFILE")
                .map(|v| v == "1")
                .unwrap_or(false)
        });
        Phases {
            on,
            t: std::time::Instant::now(),
            acc: Vec::new(),
        }
    }

    /// Charges the time since the last mark to `name`.
    pub fn mark(&mut self, name: &'static str) {
        if self.on {
            let dt = self.t.elapsed().as_secs_f64();
            match self.acc.iter_mut().find(|(n, _)| *n == name) {
                Some((_, v)) => *v += dt,
                None => self.acc.push((name, dt)),
            }
            self.t = std::time::Instant::now();
        }
    }
}

impl Default for Phases {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Phases {
    fn drop(&mut self) {
        if self.on {
            let total: f64 = self.acc.iter().map(|(_, v)| v).sum();
            let parts: Vec<String> = self
                .acc
                .iter()
                .map(|(n, v)| format!("{n} {:.1}ms", v * 1e3))
                .collect();
            eprintln!(
                "gptcore profile: total {:.1}ms: {}",
                total * 1e3,
                parts.join(", ")
            );
        }
    }
}
