// halo.cu: `pack_halo` and `unpack_halo`, the two ends of the halo exchange
// between the slabs of a run split over several devices.
//
// One thread per crossing population of each cell of a one-cell-wide column
// `[x0, x1) x [y0, y1)` of a patch: the three directions whose x component is
// -1 (`towards` 0) or +1 (`towards` 1), in increasing order. `pack_halo`
// copies them from the populations into `halo` (three planes of the column's
// rows, bottom up); `unpack_halo` copies them back into another patch's
// column. It mirrors lbm_core::kernels::halo: a copy, so the bytes equal the
// CPU's.
//
// What it does not do: move `halo` between devices, or touch any other
// population.
#include "common.cuh"

// The k-th direction (0..3) crossing towards x-min (0) or x-max (1): 3 6 7 or 1 5 8.
__device__ __forceinline__ int halo_direction(unsigned int towards, unsigned int k) {
    return towards == 0u ? (k == 0u ? 3 : (k == 1u ? 6 : 7)) : (k == 0u ? 1 : (k == 1u ? 5 : 8));
}

// The storage index of the population that `halo` slot `t` holds, or -1.
__device__ __forceinline__ long long halo_slot(unsigned int nx, unsigned int ny, unsigned int tile_x,
                                               unsigned int tile_y, unsigned int x0, unsigned int y0,
                                               unsigned int y1, unsigned int towards, unsigned long long t) {
    const unsigned int rows = y1 - y0;
    if (t >= 3ull * rows) {
        return -1;
    }
    const Layout layout = make_layout(nx, ny, tile_x, tile_y);
    const unsigned int k = (unsigned int)t / rows;
    const unsigned int row = (unsigned int)t % rows;
    return (long long)((size_t)halo_direction(towards, k) * plane_cells(layout) + cell_index(layout, x0, y0 + row));
}

LBM_KERNEL(pack_halo)(const float* __restrict__ f, float* __restrict__ halo, unsigned int nx, unsigned int ny,
                      unsigned int tile_x, unsigned int tile_y, unsigned int x0, unsigned int y0,
                      unsigned int x1, unsigned int y1, unsigned int towards) {
    LBM_PROLOGUE();
    (void)x1;
    const unsigned long long t = thread_index();
    const long long i = halo_slot(nx, ny, tile_x, tile_y, x0, y0, y1, towards, t);
    if (i >= 0) {
        halo[t] = f[i];
    }
}

LBM_KERNEL(unpack_halo)(float* __restrict__ f, const float* __restrict__ halo, unsigned int nx, unsigned int ny,
                        unsigned int tile_x, unsigned int tile_y, unsigned int x0, unsigned int y0,
                        unsigned int x1, unsigned int y1, unsigned int towards) {
    LBM_PROLOGUE();
    (void)x1;
    const unsigned long long t = thread_index();
    const long long i = halo_slot(nx, ny, tile_x, tile_y, x0, y0, y1, towards, t);
    if (i >= 0) {
        f[i] = halo[t];
    }
}
