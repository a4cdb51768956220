//! One call's new positions, as every layer of the pass sees them.
//!
//! The rows of the activations are the new tokens of one or more sequences, one sequence's
//! rows after another's (a [`Segment`] each). A uniform pass ([`Pass::uniform`], what
//! [`super::Model::run`] does) has `batch` segments of `t_new` rows after the same `p0` cached
//! positions; a ragged pass ([`super::Model::step_many`]) has segments of any lengths, each
//! after its own sequence's positions. The matrix products see only rows; the embedding, the
//! rotary positions and the attention read a row's position and sequence from here.

use crate::kernels::Kernel;

/// The new rows of one sequence: rows `row0 .. row0 + rows` of the activations, at positions
/// `p0 .. p0 + rows` of the sequence; its keys and values are the `n_kv_heads` heads from
/// index `s * n_kv_heads` of each layer's heads for the pass's segment `s`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub row0: usize,
    pub rows: usize,
    pub p0: usize,
    /// The row of the pass's rotary table that holds position `p0`.
    pub table0: usize,
}

/// One call's new positions: the segments, one per sequence, in row order.
pub struct Pass {
    pub segments: Vec<Segment>,
    /// Position of each row.
    pub positions: Vec<usize>,
    /// Row of the rotary table of each row.
    pub table_rows: Vec<usize>,
    pub d: usize,
    pub causal: bool,
    /// The kernel family the whole pass runs with.
    pub kernel: Kernel,
}

impl Pass {
    /// `batch` sequences of `t_new` new rows each, all after `p0` cached positions: they share
    /// one rotary table of positions `p0 .. p0 + t_new`.
    pub fn uniform(batch: usize, t_new: usize, p0: usize, d: usize, causal: bool) -> Pass {
        let segments = (0..batch)
            .map(|b| Segment {
                row0: b * t_new,
                rows: t_new,
                p0,
                table0: 0,
            })
            .collect();
        Pass::new(segments, d, causal)
    }

    /// Sequences of `(new rows, cached positions)` each, one after another; each has its own
    /// run of the rotary table.
    pub fn ragged(parts: &[(usize, usize)], d: usize, causal: bool) -> Pass {
        let mut row0 = 0;
        let segments = parts
            .iter()
            .map(|&(rows, p0)| {
                let s = Segment {
                    row0,
                    rows,
                    p0,
                    table0: row0,
                };
                row0 += rows;
                s
            })
            .collect();
        Pass::new(segments, d, causal)
    }

    fn new(segments: Vec<Segment>, d: usize, causal: bool) -> Pass {
        let rows: usize = segments.iter().map(|s| s.rows).sum();
        let mut positions = Vec::with_capacity(rows);
        let mut table_rows = Vec::with_capacity(rows);
        for s in &segments {
            positions.extend(s.p0..s.p0 + s.rows);
            table_rows.extend(s.table0..s.table0 + s.rows);
        }
        Pass {
            segments,
            positions,
            table_rows,
            d,
            causal,
            kernel: crate::kernels::current(),
        }
    }

    /// The pass of only the rows `keep` of this one, for a last layer whose other rows reach
    /// no output: the kept rows, in order, become rows `0 ..` of the new pass, each at its own
    /// position and in its own segment (the segment indices, and so the key/value heads they
    /// read, stay as they are; a segment with no kept row has none). `None` when it would keep
    /// every row, or when `keep` is not ascending or keeps rows of a segment that are not
    /// consecutive.
    pub fn kept(&self, keep: &[usize]) -> Option<Pass> {
        if keep.len() >= self.rows() || keep.windows(2).any(|w| w[0] >= w[1]) {
            return None;
        }
        let mut segments = Vec::with_capacity(self.segments.len());
        let mut next = 0; // the first of `keep` not yet in a segment
        for s in &self.segments {
            let end = s.row0 + s.rows;
            let n = keep[next..].iter().take_while(|&&r| r < end).count();
            let first = keep.get(next).copied().filter(|_| n > 0).unwrap_or(s.row0);
            if n > 0 && keep[next + n - 1] - first + 1 != n {
                return None;
            }
            segments.push(Segment {
                row0: next,
                rows: n,
                p0: s.p0 + (first - s.row0),
                table0: s.table0 + (first - s.row0),
            });
            next += n;
        }
        if next != keep.len() {
            return None;
        }
        let mut kept = Pass::new(segments, self.d, self.causal);
        kept.kernel = self.kernel;
        Some(kept)
    }

    /// Rows of the activations (all segments').
    pub fn rows(&self) -> usize {
        self.positions.len()
    }

    /// The runs of positions the rotary table must hold, `(p0, n)` in table order: one for a
    /// uniform pass, one per segment for a ragged one.
    pub fn table_runs(&self) -> Vec<(usize, usize)> {
        let mut runs: Vec<(usize, usize)> = Vec::new();
        for s in &self.segments {
            let end: usize = runs.iter().map(|r| r.1).sum();
            if s.table0 == end {
                runs.push((s.p0, s.rows));
            }
        }
        runs
    }
}
