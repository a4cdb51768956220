//! Several `torch.nn.Linear` tensors with the same input run as one product: their weights
//! `(n_i, k)` stacked into one `(sum n_i, k)` matrix (read transposed and packed once, in the
//! format the parts come in: a block format's runs of blocks are the rows, stacked as they
//! are), their biases concatenated. Each output column is still one FMA chain over the same `k` values, so
//! the stacked product gives exactly the columns of the separate ones.

use super::linear::Linear;
use super::schema::{export, stored_columns, Exported, LinearSpec, Source};
use super::storage::{Fetched, Packed};
use super::Float;
use crate::formats::WeightFormat;
use crate::gemm::MatRef;
use crate::Result;

/// One [`Linear`] for the parts (all `nn.Linear` weights of the same input width; biases on
/// all or none).
pub fn load<T: Float>(parts: &[LinearSpec], src: &Source<'_, '_, T>) -> Result<Linear<T>> {
    let k = parts[0].k_n().0;
    debug_assert!(parts.iter().all(|p| p.transposed && p.k_n().0 == k));
    let n: usize = parts.iter().map(|p| p.k_n().1).sum();
    let w = stack(parts, src, k, n)?;
    let b = if parts.iter().any(|p| p.bias.is_some()) {
        let mut b = Vec::with_capacity(n);
        for p in parts {
            match &p.bias {
                Some(s) => b.extend_from_slice(src.get(s)?),
                None => b.extend(std::iter::repeat_n(T::ZERO, p.k_n().1)),
            }
        }
        Some(b)
    } else {
        None
    };
    Ok(Linear { w, b })
}

/// How a part's weights come: what [`Source::matrix`] makes of each [`Fetched`] form.
#[derive(PartialEq)]
enum Form {
    /// Values (the full-precision map's, or fetched float32 ones) to store in the model's
    /// format.
    Model,
    Full,
    Bits16(WeightFormat),
    Blocks(WeightFormat),
}

/// The parts' weights `(n_i, k)` stacked into one `(k, n)` matrix, packed: in the form they
/// all come in (16-bit patterns or file blocks stacked as they are, values rounded or
/// quantized together); parts that come in different forms are each stored as they would be
/// alone and the stack is held in the compute type, their values exactly.
fn stack<T: Float>(
    parts: &[LinearSpec],
    src: &Source<'_, '_, T>,
    k: usize,
    n: usize,
) -> Result<Packed<T>> {
    let fetched = parts
        .iter()
        .map(|p| src.fetched(&p.weight))
        .collect::<Result<Vec<_>>>()?;
    let form = |f: &Option<Fetched>| match f {
        None | Some(Fetched::Values(_)) => Form::Model,
        Some(Fetched::Full) => Form::Full,
        Some(Fetched::Bits16(w, _)) => Form::Bits16(*w),
        Some(Fetched::Blocks(w, _)) => Form::Blocks(*w),
    };
    let first = form(&fetched[0]);
    let named = |e: crate::Error| {
        let names: Vec<&str> = parts.iter().map(|p| p.weight.name.as_str()).collect();
        match e {
            crate::Error::Value(m) => {
                crate::Error::Value(format!("weights: {}: {m}", names.join(", ")))
            }
            other => other,
        }
    };
    if fetched.iter().all(|f| form(f) == first) {
        let values = |model_format: bool| -> Result<Packed<T>> {
            let mut all = Vec::with_capacity(n * k);
            for (p, f) in parts.iter().zip(&fetched) {
                match f {
                    Some(Fetched::Values(v)) => {
                        all.extend(v.iter().map(|&x| T::from_f64(x as f64)))
                    }
                    _ => all.extend_from_slice(src.get(&p.weight)?),
                }
            }
            // SAFETY: `all` holds n x k values; its transpose is read with unit row stride.
            let view = unsafe { MatRef::from_raw(all.as_ptr(), k, n, 1, k as isize) };
            let format = if model_format {
                src.format
            } else {
                WeightFormat::Full
            };
            Packed::pack(view, format)
        };
        let packed = match first {
            Form::Model => values(true),
            Form::Full => values(false),
            Form::Bits16(w) => {
                let all: Vec<u16> = fetched
                    .iter()
                    .flat_map(|f| match f {
                        Some(Fetched::Bits16(_, b)) => b.as_slice(),
                        _ => &[],
                    })
                    .copied()
                    .collect();
                Packed::pack_bits(&all, k, n, true, w)
            }
            Form::Blocks(w) => {
                let all: Vec<u8> = fetched
                    .iter()
                    .flat_map(|f| match f {
                        Some(Fetched::Blocks(_, b)) => b.as_slice(),
                        _ => &[],
                    })
                    .copied()
                    .collect();
                Packed::pack_blocks(&all, k, n, w)
            }
        };
        return packed.map_err(named);
    }
    // Forms that differ: each part as it would be stored alone, widened, side by side.
    let mut all = vec![T::ZERO; k * n];
    let mut c0 = 0;
    for p in parts {
        let part = src.matrix(&p.weight, true)?;
        let (kp, np) = (part.rows(), part.cols());
        debug_assert_eq!(kp, k);
        for (r, row) in part.unpack().chunks(np.max(1)).enumerate().take(k) {
            all[r * n + c0..r * n + c0 + np].copy_from_slice(row);
        }
        c0 += np;
    }
    Packed::pack(MatRef::from_slice(&all, k, n), WeightFormat::Full).map_err(named)
}

/// Exports the parts of a stacked [`Linear`] under their own names and shapes.
pub fn export_parts<T: Float>(lin: &Linear<T>, parts: &[LinearSpec], out: &mut Exported<T>) {
    let (k, n) = (lin.w.rows(), lin.w.cols());
    let w = lin.w.unpack();
    let mut c0 = 0;
    for p in parts {
        let np = p.k_n().1;
        export(out, &p.weight, stored_columns(&w, k, n, c0, np, true));
        if let (Some(s), Some(b)) = (&p.bias, &lin.b) {
            export(out, s, b[c0..c0 + np].to_vec());
        }
        c0 += np;
    }
}
