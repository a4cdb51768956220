//! The work buffers of a pass, kept by the model between passes.

use super::rotary::RotaryTable;
use super::Float;
use crate::kv_cache::KvCache;
use std::sync::Mutex;

/// The activation buffers of one pass (norm output, QKV, attention output, projection
/// output, MLP hidden and SwiGLU's gate), the rotary table of the pass's positions and the
/// one-layer key/value cache of a plain forward.
///
/// A model keeps the buffers of finished passes and hands them to the next pass, so a
/// forward does not allocate them again: fresh memory costs a page fault and a zeroing pass
/// per page on first touch (on a virtual machine that returns freed memory to its host, a
/// host fault too), which at T = 1024 came to several percent of the forward. At most
/// `MAX_WORKSPACES` are kept (one per thread running passes at the same time), each only up
/// to `MAX_WORKSPACE_BYTES`; they are freed with the model.
pub struct Workspace<T> {
    pub h: Vec<T>,
    pub qkv: Vec<T>,
    pub att: Vec<T>,
    pub y: Vec<T>,
    pub u: Vec<T>,
    pub g: Vec<T>,
    pub rope: RotaryTable<T>,
    pub kv: Option<KvCache<T>>,
}

pub const MAX_WORKSPACES: usize = 4;
pub const MAX_WORKSPACE_BYTES: usize = 512 << 20;

impl<T: Float> Workspace<T> {
    pub fn new() -> Self {
        Workspace {
            h: Vec::new(),
            qkv: Vec::new(),
            att: Vec::new(),
            y: Vec::new(),
            u: Vec::new(),
            g: Vec::new(),
            rope: RotaryTable::default(),
            kv: None,
        }
    }

    pub fn nbytes(&self) -> usize {
        let kv: usize = self.kv.as_ref().map_or(0, |c| {
            c.layers
                .iter()
                .flatten()
                .map(|h| h.kt.capacity() + h.v.capacity())
                .sum()
        });
        (self.h.capacity()
            + self.qkv.capacity()
            + self.att.capacity()
            + self.y.capacity()
            + self.u.capacity()
            + self.g.capacity()
            + self.rope.cos.capacity()
            + self.rope.sin.capacity()
            + kv)
            * std::mem::size_of::<T>()
    }
}

/// The workspaces of finished passes.
#[derive(Default)]
pub struct WorkspacePool<T>(pub(super) Mutex<Vec<Workspace<T>>>);

impl<T: Float> WorkspacePool<T> {
    pub fn take(&self) -> Workspace<T> {
        let mut pool = self.0.lock().unwrap_or_else(|e| e.into_inner());
        pool.pop().unwrap_or_else(Workspace::new)
    }

    pub fn give_back(&self, ws: Workspace<T>) {
        if ws.nbytes() > MAX_WORKSPACE_BYTES {
            return;
        }
        let mut pool = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if pool.len() < MAX_WORKSPACES {
            pool.push(ws);
        }
    }
}
