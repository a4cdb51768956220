//! How a product runs ([`Options`]: the kernel family, an epilogue) and what an epilogue is
//! handed ([`Tile`]: a finished block of C).

use crate::kernels::{current as current_kernel, Kernel};

/// How a product runs.
#[derive(Clone, Copy)]
pub struct Options<'a, T> {
    /// The kernel family (it must be supported by the CPU); the active one by default.
    pub kernel: Kernel,
    /// Run on every finished tile of C (see [`Epilogue`]).
    pub epilogue: Option<Epilogue<'a, T>>,
}

impl<T> Default for Options<'_, T> {
    fn default() -> Self {
        Options {
            kernel: current_kernel(),
            epilogue: None,
        }
    }
}

impl<'a, T> Options<'a, T> {
    pub fn with_kernel(kernel: Kernel) -> Self {
        Options {
            kernel,
            epilogue: None,
        }
    }
    pub fn then(epilogue: Epilogue<'a, T>) -> Self {
        Options {
            epilogue: Some(epilogue),
            ..Default::default()
        }
    }
}

/// A finished block of C handed to an [`Epilogue`]: rows `i0 .. i0 + rows`, columns
/// `j0 .. j0 + cols`.
pub struct Tile<'a, T> {
    pub i0: usize,
    pub j0: usize,
    pub rows: usize,
    pub cols: usize,
    ptr: *mut T,
    ld: usize,
    _life: std::marker::PhantomData<&'a mut T>,
}

impl<T> Tile<'_, T> {
    /// A tile at (i0, j0) of `rows x cols` values starting at `ptr`, rows `ld` apart; the
    /// caller hands it to one epilogue call only.
    pub(crate) fn new(
        i0: usize,
        j0: usize,
        rows: usize,
        cols: usize,
        ptr: *mut T,
        ld: usize,
    ) -> Self {
        Tile {
            i0,
            j0,
            rows,
            cols,
            ptr,
            ld,
            _life: Default::default(),
        }
    }

    /// The first value of the tile; row r starts `r * ld()` values after it.
    pub fn as_mut_ptr(&mut self) -> *mut T {
        self.ptr
    }

    /// Distance between the starts of consecutive rows.
    pub fn ld(&self) -> usize {
        self.ld
    }

    /// Row `r` of the tile: columns `j0 .. j0 + cols` of row `i0 + r` of C.
    #[inline(always)]
    pub fn row(&mut self, r: usize) -> &mut [T] {
        assert!(r < self.rows);
        // SAFETY: the tile's rows lie inside C and belong to the running call alone.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(r * self.ld), self.cols) }
    }
}

/// Work on finished parts of C: `f(tile)` receives a block of C once its values are final,
/// while they are still in the cache (one call per micro-kernel tile). Every element of C is
/// passed exactly once; tiles may come in any order and from any thread.
pub type Epilogue<'a, T> = &'a (dyn Fn(Tile<'_, T>) + Sync);
