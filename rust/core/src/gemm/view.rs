//! A borrowed strided matrix view, the form every operand of a product takes.

/// A borrowed strided matrix view (strides in elements, may be negative or zero).
#[derive(Clone, Copy)]
pub struct MatRef<'a, T> {
    pub ptr: *const T,
    pub rows: usize,
    pub cols: usize,
    pub rs: isize,
    pub cs: isize,
    _life: std::marker::PhantomData<&'a T>,
}

unsafe impl<T: Sync> Send for MatRef<'_, T> {}
unsafe impl<T: Sync> Sync for MatRef<'_, T> {}

impl<'a, T: Copy> MatRef<'a, T> {
    /// A view of a row-major slice.
    pub fn from_slice(data: &'a [T], rows: usize, cols: usize) -> MatRef<'a, T> {
        assert!(
            data.len() >= rows * cols,
            "slice too short for {rows}x{cols}"
        );
        MatRef {
            ptr: data.as_ptr(),
            rows,
            cols,
            rs: cols as isize,
            cs: 1,
            _life: Default::default(),
        }
    }

    /// A view from a raw pointer and strides.
    ///
    /// # Safety
    /// Every element `ptr + i*rs + j*cs` for i < rows, j < cols must be readable for `'a`.
    pub unsafe fn from_raw(
        ptr: *const T,
        rows: usize,
        cols: usize,
        rs: isize,
        cs: isize,
    ) -> MatRef<'a, T> {
        MatRef {
            ptr,
            rows,
            cols,
            rs,
            cs,
            _life: Default::default(),
        }
    }

    /// Element (i, j).
    #[inline(always)]
    pub fn at(&self, i: usize, j: usize) -> T {
        debug_assert!(i < self.rows && j < self.cols);
        unsafe { *self.ptr.offset(i as isize * self.rs + j as isize * self.cs) }
    }

    /// The address of element (i, 0) (row `i` must lie inside the view).
    #[inline(always)]
    pub fn row_ptr(&self, i: usize) -> *const T {
        debug_assert!(i < self.rows);
        self.ptr.wrapping_offset(i as isize * self.rs)
    }

    /// The first `n` columns as a view.
    pub fn cols_range(&self, n: usize) -> MatRef<'a, T> {
        assert!(n <= self.cols);
        MatRef { cols: n, ..*self }
    }

    /// Rows `r0..r0+n` as a view.
    pub fn rows_range(&self, r0: usize, n: usize) -> MatRef<'a, T> {
        assert!(r0 + n <= self.rows);
        let ptr = if n == 0 {
            self.ptr
        } else {
            unsafe { self.ptr.offset(r0 as isize * self.rs) }
        };
        MatRef {
            ptr,
            rows: n,
            ..*self
        }
    }
}
