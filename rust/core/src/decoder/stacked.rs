//! Several `torch.nn.Linear` tensors with the same input run as one product: their weights
//! `(n_i, k)` stacked into one `(sum n_i, k)` matrix (read transposed and packed once), their
//! biases concatenated. Each output column is still one FMA chain over the same `k` values, so
//! the stacked product gives exactly the columns of the separate ones.

use super::linear::Linear;
use super::schema::{export, stored_columns, Exported, LinearSpec, Source};
use super::storage::Packed;
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
    let w = match bits(parts, src)? {
        Some(b) => Packed::pack_bits(&b, k, n, true, src.format)?,
        None => {
            let mut all = Vec::with_capacity(n * k);
            for p in parts {
                all.extend_from_slice(src.get(&p.weight)?);
            }
            // SAFETY: `all` holds n x k values; its transpose is read with unit row stride.
            let view = unsafe { MatRef::from_raw(all.as_ptr(), k, n, 1, k as isize) };
            Packed::pack(view, src.format)?
        }
    };
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

/// The parts' 16-bit patterns, stacked, when the model is 16-bit and every part comes as
/// patterns; `None`: the weights are read from the full-precision map.
fn bits<T: Float>(parts: &[LinearSpec], src: &Source<'_, '_, T>) -> Result<Option<Vec<u16>>> {
    let Some(fetch) = src.fetch.filter(|_| src.format != WeightFormat::Full) else {
        return Ok(None);
    };
    let mut all = Vec::new();
    for p in parts {
        let Some(b) = fetch(&p.weight)? else {
            return Ok(None);
        };
        let want: usize = p.weight.shape.iter().product();
        if b.len() != want {
            return crate::value_error!(
                "weights: tensor {:?} holds {} values for shape {:?}",
                p.weight.name,
                b.len(),
                p.weight.shape
            );
        }
        all.extend_from_slice(&b);
    }
    Ok(Some(all))
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
