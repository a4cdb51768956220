//! The attention layer of a block: `x += attn(h) Wo + bo` where `attn` is causal multi-head
//! attention over the keys and values of every position so far.

use super::linear::{After, Linear};
use super::schema::{BlockSpec, Exported, Source};
use super::{Float, Pass};
use crate::attention::{attend_block, QueryBlock, Scratch};
use crate::kv_cache::{HeadKv, KB};
use crate::threads::{self, SendPtr};
use crate::Result;

pub struct SelfAttention<T: Float> {
    /// `(d, 3d)`: columns `[Q | K | V]`, head `hh` in columns `hh*dh .. (hh+1)*dh` of each.
    pub qkv: Linear<T>,
    /// `(d, d)`.
    pub proj: Linear<T>,
    pub n_heads: usize,
}

/// The layer's work buffers.
pub struct AttentionBuffers<'a, T> {
    /// `(B*T, 3d)`.
    pub qkv: &'a mut Vec<T>,
    /// `(B*T, d)`: the heads' outputs side by side.
    pub att: &'a mut Vec<T>,
    /// `(B*T, d)`: the projection.
    pub y: &'a mut Vec<T>,
}

impl<T: Float> SelfAttention<T> {
    pub fn load(spec: &BlockSpec, n_heads: usize, src: &Source<'_, '_, T>) -> Result<Self> {
        Ok(SelfAttention {
            qkv: Linear::load(&spec.qkv, src)?,
            proj: Linear::load(&spec.proj, src)?,
            n_heads,
        })
    }

    pub fn export(&self, spec: &BlockSpec, out: &mut Exported<T>) {
        self.qkv.export(&spec.qkv, out);
        self.proj.export(&spec.proj, out);
    }

    /// `x (B*T, d) += attn(h (B*T, d)) Wo + bo`, appending the new positions' keys and values
    /// to `heads` (one per (sequence, head), `B * n_heads`).
    pub fn forward(
        &self,
        h: &[T],
        x: &mut [T],
        heads: &mut [HeadKv<T>],
        pass: &Pass,
        buf: AttentionBuffers<'_, T>,
    ) {
        let rows = pass.rows();
        let d = self.proj.w.cols();
        self.qkv.forward(h, rows, buf.qkv, After::Bias);
        self.append_kv(buf.qkv, heads, pass, d);
        self.attend(buf.qkv, heads, buf.att, pass, d);
        self.proj.forward(buf.att, rows, buf.y, After::AddInto(x));
    }

    /// Appends the keys and values of the new positions (`qkv (B*T, 3d)`) to their heads.
    fn append_kv(&self, qkv: &[T], heads: &mut [HeadKv<T>], pass: &Pass, d: usize) {
        let (nh, t_new) = (self.n_heads, pass.t_new);
        let dh = d / nh;
        let fill = |(idx, hk): (usize, &mut HeadKv<T>)| {
            let (b, hh) = (idx / nh, idx % nh);
            let rows = &qkv[b * t_new * 3 * d..(b + 1) * t_new * 3 * d];
            hk.push_rows(rows, 3 * d, (d + hh * dh, 2 * d + hh * dh), t_new);
        };
        if pass.rows() * d >= 1 << 14 {
            let hp = SendPtr(heads.as_mut_ptr());
            // SAFETY: item idx touches heads[idx] alone.
            threads::parallel_for(heads.len(), |idx| {
                fill((idx, unsafe { &mut *hp.get().add(idx) }))
            });
        } else {
            heads.iter_mut().enumerate().for_each(fill);
        }
    }

    /// `att (B*T, d)`: every head's attention output for the new positions. Work items are
    /// (sequence, head, query block aligned to KB); each writes a disjoint (rows, head columns)
    /// region of `att`.
    fn attend(&self, qkv: &[T], heads: &[HeadKv<T>], att: &mut Vec<T>, pass: &Pass, d: usize) {
        let (nh, t_new, p0) = (self.n_heads, pass.t_new, pass.p0);
        let dh = d / nh;
        crate::memory::resize_for_overwrite(att, pass.rows() * d);
        let mut items = Vec::new();
        for b in 0..pass.batch {
            for hh in 0..nh {
                let mut t = p0;
                while t < p0 + t_new {
                    let end = ((t / KB + 1) * KB).min(p0 + t_new);
                    items.push((b, hh, t, end - t));
                    t = end;
                }
            }
        }
        let att_ptr = SendPtr(att.as_mut_ptr());
        let qkv_ptr = SendPtr(qkv.as_ptr() as *mut T);
        let work = |&(b, hh, q0, nq): &(usize, usize, usize, usize), scratch: &mut Scratch<T>| {
            let r0 = b * t_new + (q0 - p0);
            let blk = QueryBlock {
                q: qkv_ptr.get().wrapping_add(r0 * 3 * d + hh * dh),
                ldq: 3 * d,
                q0,
                nq,
                out: att_ptr.get().wrapping_add(r0 * d + hh * dh),
                ldo: d,
            };
            // SAFETY: the item's query rows and output rows lie inside the buffers, and no
            // other item writes its output region.
            unsafe { attend_block(pass.kernel, &heads[b * nh + hh], &blk, pass.causal, scratch) };
        };
        let flops = (items.len() * KB * KB * dh) as f64;
        if items.len() > 1 && flops > 1e5 && threads::num_threads() > 1 {
            threads::parallel_for_init(items.len(), Scratch::default, |s, i| work(&items[i], s));
        } else {
            let mut s = Scratch::default();
            items.iter().for_each(|it| work(it, &mut s));
        }
    }
}
