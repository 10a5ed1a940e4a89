//! The fixed summation order of the kernels that reduce inside a block of
//! [`BLOCK_THREADS`] threads in f64 (`correct_interface_mass`; the
//! exchange sums in fixed point, whose order does not matter),
//! for their CPU references to mirror: thread `t` sums its items `t`, `t + T`,
//! `t + 2T`, ... in that order in f64, starting from 0.0; then a tree in
//! shared memory combines the partial sums (for `s = T/2, T/4, ..., 1`:
//! `p[i] += p[i + s]` for every `i < s`), and `p[0]` is the block's total.
//! Floating-point addition is not associative, so a reference that summed in
//! item order would differ from the kernel in the last bits; this order gives
//! the same bits on the CPU, on every GPU run and in the host emulation.
//!
//! Only the order lives here; what is summed is each family's business.

use crate::device::BLOCK_THREADS;

const T: usize = BLOCK_THREADS as usize;

// The tree halves the block at every level.
const _: () = assert!(BLOCK_THREADS.is_power_of_two());

/// The partial sums of one block's threads, `N` f64 components each.
pub(super) struct BlockSum<const N: usize> {
    partial: Vec<[f64; N]>,
}

impl<const N: usize> BlockSum<N> {
    pub(super) fn new() -> Self {
        BlockSum {
            partial: vec![[0.0; N]; T],
        }
    }

    /// Adds `value` to the partial sum of the thread that takes item `item`
    /// on the device. Each thread's items must come in increasing order, as
    /// its loop meets them.
    pub(super) fn add(&mut self, item: usize, value: [f64; N]) {
        for (sum, v) in self.partial[item % T].iter_mut().zip(value) {
            *sum += v;
        }
    }

    /// The block's total, by the kernel's tree.
    pub(super) fn total(mut self) -> [f64; N] {
        let mut stride = T / 2;
        while stride > 0 {
            for i in 0..stride {
                let upper = self.partial[i + stride];
                for (sum, v) in self.partial[i].iter_mut().zip(upper) {
                    *sum += v;
                }
            }
            stride /= 2;
        }
        self.partial[0]
    }
}
