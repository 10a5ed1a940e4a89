// exchange.cu: `accumulate_exchange`, the momentum exchange on body links.
//
// One thread per link of the link table (lbm_core::domain::geometry::LINK_WORDS words per
// link: the fluid cell's storage index; the direction d pointing into the body
// plus 16 x the body slot; the lever arm x and y as f32 bits; the wall distance
// q as f32 bits; the storage index of the fluid cell behind, or LBM_NO_CELL).
// `f` holds the post-collision populations that the hop's streaming reads. Each
// link gives its body c_d (f*_d + f_in) in real populations (un-shifted by their
// weights, hence the 2 w_d), f_in being what `bouzidi` returns along opp(d), and
// the torque r x F about the body centre; the contributions are added in f64
// with atomicAdd to the interval accumulator and, when `window_on`, to the
// window accumulator (lbm_core::kernels::exchange::EXCHANGE_WORDS doubles per body: Fx, Fy,
// torque, unused).
//
// It mirrors lbm_core::kernels::exchange::accumulate_exchange per link, each contribution bit
// for bit. What it does not do: it does not sum in link order (atomics land in
// any order, so sums agree with the CPU to rounding, not bit for bit), it does
// not zero the accumulators (the plan's memset does), and it does not check that
// a body slot fits the accumulator (the link table is built by
// lbm_core::geometry::wall_tables).
#include "common.cuh"

extern "C" __global__ void accumulate_exchange(const float* __restrict__ f, unsigned int plane_cells,
                                               const unsigned int* __restrict__ links, unsigned int n_links,
                                               double* interval, double* window, unsigned int window_on) {
    const unsigned long long t = thread_index();
    if (t >= n_links) {
        return;
    }
    const unsigned int* link = links + t * LBM_LINK_WORDS;
    const unsigned int cell = link[0];
    const int d = (int)(link[1] & 15u);
    const unsigned int body = link[1] >> 4;
    const unsigned int behind = link[5];
    const bool has_behind = behind != LBM_NO_CELL;
    if (cell >= plane_cells || d >= LBM_Q || (has_behind && behind >= plane_cells)) {
        // A malformed link would read outside the population planes; the CPU
        // reference panics on it, here it contributes nothing.
        return;
    }
    const double rx = (double)__uint_as_float(link[2]);
    const double ry = (double)__uint_as_float(link[3]);
    const float q = __uint_as_float(link[4]);
    const float returned = bouzidi(f, plane_cells, cell, has_behind, behind, lbm_opp(d), q);
    const double both = (double)(f[(size_t)d * plane_cells + cell] + returned + 2.0f * lbm_w(d));
    const double fx = (double)lbm_cx(d) * both;
    const double fy = (double)lbm_cy(d) * both;
    const double torque = rx * fy - ry * fx;
    double* out = interval + (size_t)body * LBM_EXCHANGE_WORDS;
    atomicAdd(out + 0, fx);
    atomicAdd(out + 1, fy);
    atomicAdd(out + 2, torque);
    if (window_on != 0) {
        double* w = window + (size_t)body * LBM_EXCHANGE_WORDS;
        atomicAdd(w + 0, fx);
        atomicAdd(w + 1, fy);
        atomicAdd(w + 2, torque);
    }
}
