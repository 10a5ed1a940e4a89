// reflux.cu: mass bookkeeping at the coarse-fine interface (reflux).
//
// `accumulate_fine_flux` adds, for every parent ring cell around a fine patch
// (beyond its interface sides only, as a side on a domain wall has no ring; in
// lbm_core::domain::order::ring_cell order, in "fine allocation, parent resolution"
// coordinates), a quarter of the mass its ghost cells send into the
// active region minus the mass the active region sends back, for the coming
// fine hop. One thread per ring cell; the flux slots accumulate over both fine
// hops.
//
// `correct_interface_mass` sums, over the ring, the mass the parent moved
// between the ring and the covered cells during its hop (read from `coarse_t`)
// plus the fine flux, takes that sum out of the ring cells of `coarse_t1` in
// equal shares spread over the populations by weight, and zeroes the flux
// slots. One thread per ring cell computes its cell's excess and leaves it in
// its flux slot; the last of the blocks to arrive (an arrival counter, as in
// exchange.cu) sums the slots as one block of 256 threads would have: each
// thread its strided slots in f64, then a fixed tree, so the result is the
// same run to run and whatever the number of blocks. A ring of one block is
// corrected by that block in the same launch (`phase` LBM_REFLUX_WHOLE); a
// longer one in two launches, the sum (LBM_REFLUX_SUM: the last block leaves
// the share in the arrival buffer's second word) and the share taken out by
// one thread per ring cell (LBM_REFLUX_APPLY). Why: the last block alone
// applying a 2600-cell ring took 42 us at 640 cells per diameter.
//
// Both mirror lbm_core::kernels::reflux::{accumulate_fine_flux, correct_interface_mass}
// per cell, and the CPU sums the ring in this kernel's order
// (lbm_core::kernels::reduce), so the share is the CPU's bit for bit. What they
// do not do: they do not check the geometry (the host validates it) and do
// not touch the covered cells' populations.
#include "common.cuh"

// Whether side `side` of the patch is a coarse-fine interface (1) or a wall (0).
__device__ __forceinline__ unsigned int open_side(unsigned int kinds, int side) {
    return side_kind(kinds, side) == LBM_PATCH_SIDE_INTERFACE ? 1u : 0u;
}

// lbm_core::domain::order::ring_cell: the k-th parent cell at Chebyshev distance one
// from `covered` beyond an interface side: the row below (corners included),
// the row above, then the left and right columns between them.
__device__ __forceinline__ void ring_cell(unsigned int x0, unsigned int y0, unsigned int x1, unsigned int y1,
                                          unsigned int kinds, unsigned int k, unsigned int* x, unsigned int* y) {
    const unsigned int w = x1 - x0;
    const unsigned int h = y1 - y0;
    const unsigned int row = w + open_side(kinds, 0) + open_side(kinds, 1);
    const unsigned int bottom = open_side(kinds, 2) * row;
    const unsigned int top = bottom + open_side(kinds, 3) * row;
    const unsigned int left = top + open_side(kinds, 0) * h;
    const unsigned int first_x = x0 - open_side(kinds, 0);
    if (k < bottom) {
        *x = first_x + k;
        *y = y0 - 1;
    } else if (k < top) {
        *x = first_x + k - bottom;
        *y = y1;
    } else if (k < left) {
        *x = x0 - 1;
        *y = y0 + k - top;
    } else {
        *x = x1;
        *y = y0 + k - left;
    }
}

// lbm_core::domain::order::ring_cells.
__device__ __forceinline__ unsigned int ring_cells(unsigned int w, unsigned int h, unsigned int kinds) {
    const unsigned int row = w + open_side(kinds, 0) + open_side(kinds, 1);
    return (open_side(kinds, 2) + open_side(kinds, 3)) * row + (open_side(kinds, 0) + open_side(kinds, 1)) * h;
}

LBM_KERNEL(accumulate_fine_flux)(const float* __restrict__ fine, float* __restrict__ flux,
                                                unsigned int nx, unsigned int ny, unsigned int tile_x,
                                                unsigned int tile_y, unsigned int side_kinds) {
    LBM_PROLOGUE();
    // Four threads per ring cell, one per fine cell of its 2x2 block (the
    // CPU's corner order: (0, 0), (1, 0), (0, 1), (1, 1)), each taking its
    // eight link differences; the first of the four then adds all 32 in the
    // CPU's order. One thread doing all 32 was a chain of ~800 dependent
    // instructions, the longest of a small patch's hop.
    __shared__ float terms[LBM_BLOCK_THREADS][LBM_Q - 1];
    __shared__ unsigned char linked[LBM_BLOCK_THREADS];
    // The host launches blocks of LBM_BLOCK_THREADS threads (uniform branch).
    if (blockDim.x != LBM_BLOCK_THREADS) {
        return;
    }
    // lbm_core::domain::order::fine_covered.
    const unsigned int g = LBM_GHOST / 2;
    const unsigned int cov_x0 = g;
    const unsigned int cov_y0 = g;
    const unsigned int cov_x1 = nx / 2 - g;
    const unsigned int cov_y1 = ny / 2 - g;
    const unsigned int n_ring = ring_cells(cov_x1 - cov_x0, cov_y1 - cov_y0, side_kinds);
    const unsigned int tid = threadIdx.x;
    const unsigned long long slot = thread_index() / 4;
    const unsigned int corner = tid % 4;
    if (slot < n_ring) {
        const Layout layout = make_layout(nx, ny, tile_x, tile_y);
        const size_t plane = plane_cells(layout);
        unsigned int cx;
        unsigned int cy;
        ring_cell(cov_x0, cov_y0, cov_x1, cov_y1, side_kinds, (unsigned int)slot, &cx, &cy);
        const unsigned int gx = 2 * cx + (corner & 1u);
        const unsigned int gy = 2 * cy + (corner >> 1);
        const size_t gi = cell_index(layout, gx, gy);
        unsigned int mask = 0;
#pragma unroll
        for (int j = 1; j < LBM_Q; ++j) {
            const int px = (int)gx + lbm_cx(j);
            const int py = (int)gy + lbm_cy(j);
            if (px < (int)LBM_GHOST || py < (int)LBM_GHOST || px >= (int)(nx - LBM_GHOST) ||
                py >= (int)(ny - LBM_GHOST)) {
                continue;
            }
            const size_t n = cell_index(layout, (unsigned int)px, (unsigned int)py);
            terms[tid][j - 1] = fine[(size_t)j * plane + gi] - fine[(size_t)lbm_opp(j) * plane + n];
            mask |= 1u << (j - 1);
        }
        linked[tid] = (unsigned char)mask;
    }
    __syncthreads();
    if (slot >= n_ring || corner != 0) {
        return;
    }
    // Only the links into the active region count, as on the CPU: a term
    // of +0 in place of a missing one could turn a sum of -0 into +0.
    float net = 0.0f;
#pragma unroll
    for (unsigned int c = 0; c < 4; ++c) {
        const unsigned int mask = linked[tid + c];
#pragma unroll
        for (int j = 0; j < LBM_Q - 1; ++j) {
            if ((mask >> j) & 1u) {
                net += terms[tid + c][j];
            }
        }
    }
    flux[slot] += 0.25f * net;
}

// `phase` of correct_interface_mass (lbm_core::kernels::reflux::RefluxPhase).
#define LBM_REFLUX_WHOLE 0u
#define LBM_REFLUX_SUM 1u
#define LBM_REFLUX_APPLY 2u

LBM_KERNEL(correct_interface_mass)(const float* __restrict__ coarse_t, float* __restrict__ coarse_t1,
                                                  float* flux, unsigned int* arrivals, unsigned int nx,
                                                  unsigned int ny, unsigned int tile_x, unsigned int tile_y,
                                                  unsigned int x0, unsigned int y0, unsigned int x1,
                                                  unsigned int y1, unsigned int side_kinds, unsigned int phase) {
    LBM_PROLOGUE();
    __shared__ double partial[LBM_BLOCK_THREADS];
    __shared__ bool last;
    // The host launches ceil(ring / LBM_BLOCK_THREADS) blocks, at least one, of
    // LBM_BLOCK_THREADS threads (uniform branch).
    if (blockDim.x != LBM_BLOCK_THREADS) {
        return;
    }
    const Layout layout = make_layout(nx, ny, tile_x, tile_y);
    const size_t plane = plane_cells(layout);
    const unsigned int n_ring = ring_cells(x1 - x0, y1 - y0, side_kinds);
    const unsigned int tid = threadIdx.x;
    // A patch walled on every side has no interface to correct (uniform branch).
    if (n_ring == 0) {
        return;
    }

    const unsigned int own = blockIdx.x * LBM_BLOCK_THREADS + tid;
    // The share the sum left, taken out of this thread's ring cell (the
    // arithmetic of the whole launch's last block), and its slot zeroed.
    if (phase == LBM_REFLUX_APPLY) {
        if (own < n_ring) {
            const float share = __uint_as_float(arrivals[1]);
            unsigned int x;
            unsigned int y;
            ring_cell(x0, y0, x1, y1, side_kinds, own, &x, &y);
            const size_t index = cell_index(layout, x, y);
            float f[LBM_Q];
            read_cell(coarse_t1, plane, index, f);
#pragma unroll
            for (int i = 0; i < LBM_Q; ++i) {
                f[i] -= share * lbm_w(i);
            }
            write_cell(coarse_t1, plane, index, f);
            flux[own] = 0.0f;
        }
        return;
    }
    // Each ring cell's excess, left in its flux slot: the slot's f32 plus the
    // parent's net flux, the very f32 sum the one-block order adds in f64.
    if (own < n_ring) {
        unsigned int x;
        unsigned int y;
        ring_cell(x0, y0, x1, y1, side_kinds, own, &x, &y);
        const size_t index = cell_index(layout, x, y);
        float coarse_net = 0.0f;
#pragma unroll
        for (int j = 1; j < LBM_Q; ++j) {
            const int px = (int)x + lbm_cx(j);
            const int py = (int)y + lbm_cy(j);
            if (px < (int)x0 || py < (int)y0 || px >= (int)x1 || py >= (int)y1) {
                continue;
            }
            const size_t n = cell_index(layout, (unsigned int)px, (unsigned int)py);
            coarse_net += coarse_t[(size_t)lbm_opp(j) * plane + n] - coarse_t[(size_t)j * plane + index];
        }
        flux[own] = coarse_net + flux[own];
    }
    // The block's slots are visible to every block before its arrival counts
    // (the pattern of exchange.cu).
    __threadfence();
    __syncthreads();
    if (tid == 0) {
        last = atomicAdd(arrivals, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) {
        return;
    }
    // Every other block fenced before it arrived. Volatile: slots other SMs
    // wrote during this launch.
    __threadfence();
    volatile float* excess = flux;
    double local = 0.0;
#pragma unroll 4
    for (unsigned int slot = tid; slot < n_ring; slot += LBM_BLOCK_THREADS) {
        local += (double)excess[slot];
    }
    partial[tid] = local;
    __syncthreads();
#pragma unroll
    for (unsigned int stride = LBM_BLOCK_THREADS / 2; stride > 0; stride >>= 1) {
        if (tid < stride) {
            partial[tid] += partial[tid + stride];
        }
        __syncthreads();
    }
    const float share = (float)(partial[0] / (double)n_ring);
    if (phase == LBM_REFLUX_SUM) {
        if (tid == 0) {
            arrivals[1] = __float_as_uint(share);
            atomicExch(arrivals, 0u);
        }
        return;
    }

    // The flux slots are zeroed in a loop of their own: a volatile store
    // between the ring cells' updates would keep their loads from overlapping.
    for (unsigned int slot = tid; slot < n_ring; slot += LBM_BLOCK_THREADS) {
        excess[slot] = 0.0f;
    }
    // A few ring cells at a time, all their loads before any store: a store
    // may alias a later load as far as the compiler knows, so an update in
    // place would wait out one memory round trip per population.
    const unsigned int batch = 4 * LBM_BLOCK_THREADS;
    for (unsigned int first = tid; first < n_ring; first += batch) {
        size_t index[4];
        float f[4][LBM_Q];
#pragma unroll
        for (int b = 0; b < 4; ++b) {
            const unsigned int slot = first + (unsigned int)b * LBM_BLOCK_THREADS;
            if (slot < n_ring) {
                unsigned int x;
                unsigned int y;
                ring_cell(x0, y0, x1, y1, side_kinds, slot, &x, &y);
                index[b] = cell_index(layout, x, y);
                read_cell(coarse_t1, plane, index[b], f[b]);
            }
        }
#pragma unroll
        for (int b = 0; b < 4; ++b) {
            if (first + (unsigned int)b * LBM_BLOCK_THREADS < n_ring) {
#pragma unroll
                for (int i = 0; i < LBM_Q; ++i) {
                    f[b][i] -= share * lbm_w(i);
                }
                write_cell(coarse_t1, plane, index[b], f[b]);
            }
        }
    }
    // Every block has arrived; the next launch finds the counter at 0.
    if (tid == 0) {
        atomicExch(arrivals, 0u);
    }
}
