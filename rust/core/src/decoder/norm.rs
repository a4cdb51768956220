//! Normalisation over the rows of an activation (LayerNorm, RMSNorm), and the row-parallel
//! loop it runs in.

use super::schema::{export, Exported, NormSpec, Source};
use super::Float;
use crate::ops;
use crate::threads::{self, SendPtr};
use crate::Result;

/// A normalisation layer with its parameters (in the compute type) and epsilon.
pub enum Norm<T> {
    /// `(x - mean) / sqrt(var + eps)`, then `* gamma + beta` when affine.
    LayerNorm {
        affine: Option<(Vec<T>, Vec<T>)>,
        eps: T,
    },
    /// `x / sqrt(mean(x^2) + eps) * weight`.
    RmsNorm { weight: Vec<T>, eps: T },
}

impl<T: Float> Norm<T> {
    pub fn load(spec: &NormSpec, src: &Source<'_, '_, T>) -> Result<Self> {
        Ok(match spec {
            NormSpec::LayerNorm { affine, eps } => Norm::LayerNorm {
                affine: match affine {
                    Some((g, b)) => Some((src.get(g)?.to_vec(), src.get(b)?.to_vec())),
                    None => None,
                },
                eps: T::from_f64(*eps),
            },
            NormSpec::RmsNorm { weight, eps } => Norm::RmsNorm {
                weight: src.get(weight)?.to_vec(),
                eps: T::from_f64(*eps),
            },
        })
    }

    pub fn export(&self, spec: &NormSpec, out: &mut Exported<T>) {
        match (spec, self) {
            (
                NormSpec::LayerNorm {
                    affine: Some((sg, sb)),
                    ..
                },
                Norm::LayerNorm {
                    affine: Some((g, b)),
                    ..
                },
            ) => {
                export(out, sg, g.clone());
                export(out, sb, b.clone());
            }
            (NormSpec::RmsNorm { weight: s, .. }, Norm::RmsNorm { weight, .. }) => {
                export(out, s, weight.clone())
            }
            _ => {}
        }
    }

    /// `out (rows, d) = norm(x (rows, d))`, row by row.
    pub fn forward(&self, x: &[T], out: &mut Vec<T>, d: usize) {
        crate::memory::resize_for_overwrite(out, x.len());
        match self {
            Norm::LayerNorm { affine, eps } => {
                let aff = affine.as_ref().map(|(g, b)| (g.as_slice(), b.as_slice()));
                for_rows(out, d, |i, row| {
                    ops::layernorm_row(&x[i * d..(i + 1) * d], row, aff, *eps)
                });
            }
            Norm::RmsNorm { weight, eps } => {
                for_rows(out, d, |i, row| {
                    ops::rmsnorm_row(&x[i * d..(i + 1) * d], row, weight, *eps)
                });
            }
        }
    }
}

/// Run `f(row_index, row)` over the rows of a row-major buffer, in parallel when large.
pub fn for_rows<T: Send>(buf: &mut [T], width: usize, f: impl Fn(usize, &mut [T]) + Sync + Send) {
    if width == 0 {
        return;
    }
    let rows = buf.len() / width;
    if buf.len() >= 1 << 15 && threads::num_threads() > 1 {
        // Chunks of rows about 8K values each, so an item is worth handing out.
        let per = (8192 / width).max(1);
        let ptr = SendPtr(buf.as_mut_ptr());
        threads::parallel_for(rows.div_ceil(per), |c| {
            for i in c * per..((c + 1) * per).min(rows) {
                // SAFETY: row i lies inside `buf` and belongs to chunk c alone.
                let r = unsafe { std::slice::from_raw_parts_mut(ptr.get().add(i * width), width) };
                f(i, r);
            }
        });
    } else {
        buf.chunks_mut(width).enumerate().for_each(|(i, r)| f(i, r));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every row normalised on its own, whether the rows run in parallel or not, and each
    /// norm as its definition says (float64).
    #[test]
    fn norms_match_their_definitions_row_by_row() {
        let d = 96;
        let rows = 400; // 38,400 values: the parallel loop
        let x: Vec<f64> = (0..rows * d)
            .map(|i| ((i * 37 % 101) as f64 / 50.0 - 1.0) * (1.0 + (i / d) as f64 * 0.01))
            .collect();
        let w: Vec<f64> = (0..d).map(|i| 0.5 + i as f64 / d as f64).collect();
        let b: Vec<f64> = (0..d).map(|i| i as f64 * 0.01).collect();
        let norms = [
            Norm::LayerNorm {
                affine: Some((w.clone(), b.clone())),
                eps: 1e-5,
            },
            Norm::LayerNorm {
                affine: None,
                eps: 1e-5,
            },
            Norm::RmsNorm {
                weight: w.clone(),
                eps: 1e-6,
            },
        ];
        crate::threads::set_num_threads(2).unwrap();
        for n in &norms {
            let mut out = Vec::new();
            n.forward(&x, &mut out, d);
            for r in [0, 1, rows / 2, rows - 1] {
                let row = &x[r * d..(r + 1) * d];
                let mut alone = vec![0.0; d];
                let want: Vec<f64> = match n {
                    Norm::LayerNorm { affine, eps } => {
                        let mean = row.iter().sum::<f64>() / d as f64;
                        let var =
                            row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / d as f64;
                        let aff = affine.as_ref().map(|(g, b)| (g.as_slice(), b.as_slice()));
                        ops::layernorm_row(row, &mut alone, aff, *eps);
                        (0..d)
                            .map(|c| {
                                let y = (row[c] - mean) / (var + eps).sqrt();
                                affine.as_ref().map_or(y, |(g, b)| y * g[c] + b[c])
                            })
                            .collect()
                    }
                    Norm::RmsNorm { weight, eps } => {
                        let ms = row.iter().map(|v| v * v).sum::<f64>() / d as f64;
                        ops::rmsnorm_row(row, &mut alone, weight, *eps);
                        (0..d)
                            .map(|c| row[c] / (ms + eps).sqrt() * weight[c])
                            .collect()
                    }
                };
                for c in 0..d {
                    let got = out[r * d + c];
                    assert_eq!(got.to_bits(), alone[c].to_bits(), "row {r} alone");
                    assert!(
                        (got - want[c]).abs() < 1e-13,
                        "row {r} col {c}: {got} vs {}",
                        want[c]
                    );
                }
            }
        }
    }
}
