//! The attention layer of a block: `x += attn(h) Wo + bo` where `attn` is causal multi-head
//! attention over the keys and values of every position so far, with `n_kv_heads` key/value
//! heads shared by groups of query heads (grouped-query attention; one per query head is
//! GPT-2's multi-head attention, one in all is multi-query attention), and queries and keys
//! rotated by their positions when the model has rotary positions.

use super::linear::{After, Linear};
use super::norm::for_rows;
use super::rotary::{rotate_head, RotaryTable};
use super::schema::{AttentionSpec, Exported, QkvSpec, Source};
use super::{stacked, Float, Pass};
use crate::attention::{attend_block, QueryBlock, Scratch};
use crate::kv_cache::{HeadKv, KB};
use crate::threads::{self, SendPtr};
use crate::Result;

pub struct SelfAttention<T: Float> {
    /// `(d, (n_heads + 2 n_kv_heads) d_head)`: columns `[Q | K | V]`, head `h` in columns
    /// `h * d_head ..` of its part.
    pub qkv: Linear<T>,
    /// `(n_heads * d_head, d)`.
    pub proj: Linear<T>,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub d_head: usize,
}

/// The layer's work buffers.
pub struct AttentionBuffers<'a, T> {
    /// `(B*T, (n_heads + 2 n_kv_heads) d_head)`.
    pub qkv: &'a mut Vec<T>,
    /// `(B*T, n_heads * d_head)`: the heads' outputs side by side.
    pub att: &'a mut Vec<T>,
    /// `(B*T, d)`: the projection.
    pub y: &'a mut Vec<T>,
}

/// Where the parts of a row of the QKV product are.
#[derive(Clone, Copy)]
struct Columns {
    nh: usize,
    nkv: usize,
    dh: usize,
}

impl Columns {
    /// Query heads per key/value head.
    fn group(self) -> usize {
        self.nh / self.nkv
    }
    fn q_width(self) -> usize {
        self.nh * self.dh
    }
    /// Row width of the QKV product.
    fn width(self) -> usize {
        (self.nh + 2 * self.nkv) * self.dh
    }
    fn k_at(self, g: usize) -> usize {
        self.q_width() + g * self.dh
    }
    fn v_at(self, g: usize) -> usize {
        self.q_width() + (self.nkv + g) * self.dh
    }
}

impl<T: Float> SelfAttention<T> {
    pub fn load(spec: &AttentionSpec, src: &Source<'_, '_, T>) -> Result<Self> {
        Ok(SelfAttention {
            qkv: match &spec.qkv {
                QkvSpec::Fused(l) => Linear::load(l, src)?,
                QkvSpec::Stacked(parts) => stacked::load(parts, src)?,
            },
            proj: Linear::load(&spec.out, src)?,
            n_heads: spec.n_heads,
            n_kv_heads: spec.n_kv_heads,
            d_head: spec.d_head,
        })
    }

    pub fn export(&self, spec: &AttentionSpec, out: &mut Exported<T>) {
        match &spec.qkv {
            QkvSpec::Fused(l) => self.qkv.export(l, out),
            QkvSpec::Stacked(parts) => stacked::export_parts(&self.qkv, parts, out),
        }
        self.proj.export(&spec.out, out);
    }

    pub fn nbytes(&self) -> usize {
        self.qkv.nbytes() + self.proj.nbytes()
    }

    fn columns(&self) -> Columns {
        Columns {
            nh: self.n_heads,
            nkv: self.n_kv_heads,
            dh: self.d_head,
        }
    }

    /// `x (rows, d) += attn(h (rows, d)) Wo + bo`, appending the new positions' keys and values
    /// to `heads` (one per (segment, key/value head), `segments * n_kv_heads`). With `rotary`,
    /// the queries and keys of each row are rotated by the row's position first.
    ///
    /// With `keep` (the pass of only some rows, [`Pass::kept`], and those rows' indices), every
    /// row's keys and values are appended but only the kept rows attend: they are moved to rows
    /// `0 ..` of `x` and only those are updated (each row's arithmetic is its own, so a kept
    /// row's bits are those of the whole pass).
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        h: &[T],
        x: &mut [T],
        heads: &mut [HeadKv<T>],
        pass: &Pass,
        buf: AttentionBuffers<'_, T>,
        rotary: Option<&RotaryTable<T>>,
        keep: Option<(&Pass, &[usize])>,
    ) {
        let rows = pass.rows();
        let cols = self.columns();
        self.qkv.forward(h, rows, buf.qkv, After::Bias);
        if let Some(table) = rotary {
            rotate(buf.qkv, cols, pass, table);
        }
        append_kv(buf.qkv, heads, cols, pass);
        let Some((kept, rows_kept)) = keep else {
            attend(buf.qkv, heads, buf.att, cols, pass);
            self.proj.forward(buf.att, rows, buf.y, After::AddInto(x));
            return;
        };
        let d = pass.d;
        gather_rows(buf.qkv, cols.width(), rows_kept);
        gather_rows(x, d, rows_kept);
        attend(buf.qkv, heads, buf.att, cols, kept);
        let n = rows_kept.len();
        self.proj
            .forward(buf.att, n, buf.y, After::AddInto(&mut x[..n * d]));
    }
}

/// Moves rows `rows` (ascending) of `a` (rows of `width` values) to rows `0 .. rows.len()`, in
/// order (row `rows[i]` is at or after row `i`, so no row is overwritten before it moves).
fn gather_rows<T: Copy>(a: &mut [T], width: usize, rows: &[usize]) {
    for (i, &r) in rows.iter().enumerate() {
        if r != i {
            a.copy_within(r * width..(r + 1) * width, i * width);
        }
    }
}

/// Rotates every query and key head of the rows of `qkv` by the row's position.
fn rotate<T: Float>(qkv: &mut [T], cols: Columns, pass: &Pass, table: &RotaryTable<T>) {
    let (dh, w) = (cols.dh, cols.width());
    let rotated = cols.nh + cols.nkv; // the queries' heads, then the keys'
    for_rows(qkv, w, |r, row| {
        let (cos, sin) = table.row(pass.table_rows[r]);
        for head in row[..rotated * dh].chunks_exact_mut(dh) {
            rotate_head(head, cos, sin);
        }
    });
}

/// Appends the keys and values of the new positions (rows of `qkv`) to their heads: segment
/// `s`'s rows to heads `s * n_kv_heads ..`.
fn append_kv<T: Float>(qkv: &[T], heads: &mut [HeadKv<T>], cols: Columns, pass: &Pass) {
    let (nkv, w) = (cols.nkv, cols.width());
    let fill = |(idx, hk): (usize, &mut HeadKv<T>)| {
        let (seg, g) = (&pass.segments[idx / nkv], idx % nkv);
        let rows = &qkv[seg.row0 * w..(seg.row0 + seg.rows) * w];
        hk.push_rows(rows, w, (cols.k_at(g), cols.v_at(g)), seg.rows);
    };
    // A key is written a value per cache line (a column of its K^T panel): writes that miss
    // the cache, each head's dh lines. The lines of the head `APPEND_AHEAD` on are asked for
    // before a head is written, so that its misses overlap these.
    let hp = SendPtr(heads.as_mut_ptr());
    let fill_range = |lo: usize, hi: usize| {
        for idx in lo..hi {
            if idx + APPEND_AHEAD < hi {
                // SAFETY: idx + APPEND_AHEAD < hi <= heads.len(), a head of this range (only
                // read: it is written later, on this thread).
                unsafe { (*hp.get().add(idx + APPEND_AHEAD)).prefetch_push() };
            }
            // SAFETY: idx < heads.len(), and no other range holds idx.
            fill((idx, unsafe { &mut *hp.get().add(idx) }));
        }
    };
    let n = heads.len();
    let threads = threads::num_threads();
    if pass.rows() * nkv * cols.dh >= APPEND_PARALLEL_LINES && threads > 1 && n > 1 {
        // Contiguous ranges of heads, two a thread.
        let parts = (2 * threads).min(n);
        threads::parallel_for(parts, |p| fill_range(p * n / parts, (p + 1) * n / parts));
    } else {
        fill_range(0, n);
    }
}

/// How many heads ahead [`append_kv`] asks for the lines it will write.
const APPEND_AHEAD: usize = 2;

/// The key lines a pass writes (rows x key/value heads x head width) from which [`append_kv`]
/// shares the heads among the threads: a decode step of a few sequences already has enough.
const APPEND_PARALLEL_LINES: usize = 2048;

/// One work item of [`attend`]: query heads `h0 .. h0 + heads` of segment `si` at positions
/// `q0 .. q0 + nq` (inside one key block): one head at several positions, or, for a segment of
/// one new position, several heads of one key/value group at that position.
#[derive(Clone, Copy)]
struct Item {
    si: usize,
    h0: usize,
    heads: usize,
    q0: usize,
    nq: usize,
}

/// `att (rows, n_heads * d_head)`: every query head's attention output for the new positions.
/// Work items ([`Item`]) each write a disjoint (rows, head columns) region of `att` and read
/// the key/value head of their segment and group. A segment of one new position (a decode
/// step) takes the query heads of a key/value group together, as rows of one block at that
/// position, so the group's keys and values are read once (split further so that every thread
/// has two items: with one large item each, the threads waited on the slowest); longer
/// segments take one head a block of positions. A row's arithmetic is the same either way
/// (rows of a block are independent).
fn attend<T: Float>(qkv: &[T], heads: &[HeadKv<T>], att: &mut Vec<T>, cols: Columns, pass: &Pass) {
    let (nh, nkv, dh) = (cols.nh, cols.nkv, cols.dh);
    let (w, qw, group) = (cols.width(), cols.q_width(), cols.group());
    crate::memory::resize_for_overwrite(att, pass.rows() * qw);
    let threads = threads::num_threads();
    let decoding = pass.segments.iter().filter(|s| s.rows == 1).count();
    // Pieces a group of a decoding segment goes in: enough for two items a thread.
    let split = (2 * threads)
        .div_ceil((nkv * decoding).max(1))
        .clamp(1, group);
    let mut items = Vec::new();
    for (si, seg) in pass.segments.iter().enumerate() {
        let (p0, t_new) = (seg.p0, seg.rows);
        if t_new == 1 && group > 1 {
            for g in 0..nkv {
                for part in 0..split {
                    let (a, b) = (part * group / split, (part + 1) * group / split);
                    let (h0, heads) = (g * group + a, b - a);
                    items.push(Item {
                        si,
                        h0,
                        heads,
                        q0: p0,
                        nq: 1,
                    });
                }
            }
            continue;
        }
        for h0 in 0..nh {
            let mut t = p0;
            while t < p0 + t_new {
                let end = ((t / KB + 1) * KB).min(p0 + t_new);
                items.push(Item {
                    si,
                    h0,
                    heads: 1,
                    q0: t,
                    nq: end - t,
                });
                t = end;
            }
        }
    }
    let att_ptr = SendPtr(att.as_mut_ptr());
    let qkv_ptr = SendPtr(qkv.as_ptr() as *mut T);
    let work = |it: &Item, scratch: &mut Scratch<T>| {
        let seg = &pass.segments[it.si];
        let r0 = seg.row0 + (it.q0 - seg.p0);
        let (q, out) = (
            qkv_ptr.get().wrapping_add(r0 * w + it.h0 * dh),
            att_ptr.get().wrapping_add(r0 * qw + it.h0 * dh),
        );
        let blk = if it.heads > 1 {
            // The heads' query rows lie side by side in the row, as do their outputs.
            QueryBlock {
                q,
                ldq: dh,
                q0: it.q0,
                nq: it.heads,
                pos_step: 0,
                out,
                ldo: dh,
            }
        } else {
            QueryBlock {
                q,
                ldq: w,
                q0: it.q0,
                nq: it.nq,
                pos_step: 1,
                out,
                ldo: qw,
            }
        };
        let kv = &heads[it.si * nkv + it.h0 / group];
        // SAFETY: the item's query rows and output rows lie inside the buffers, and no
        // other item writes its output region.
        unsafe { attend_block(pass.kernel, kv, &blk, pass.causal, scratch) };
    };
    // Shared among the threads even for a decode step over a short context (a few
    // microseconds of work): the team is still awake from the product before, and the other
    // threads would wait for this one anyway (benches/JOURNAL.md).
    if items.len() > 1 && threads > 1 {
        threads::parallel_for_init(items.len(), Scratch::default, |s, i| work(&items[i], s));
    } else {
        let mut s = Scratch::default();
        items.iter().for_each(|it| work(it, &mut s));
    }
}
