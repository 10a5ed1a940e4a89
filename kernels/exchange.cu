// exchange.cu: `accumulate_exchange`, the momentum exchange on body links.
//
// One thread per link of the link table (lbm_core::launch::LINK_WORDS words per
// link: storage cell index, direction plus 16 x body slot, lever arm x and y as
// f32 bits). Each link gives its body 2 c_i f_i* (f_i* the post-collision
// population, un-shifted by its weight) and the torque r x F about the body
// centre; the contributions are added in f64 with atomicAdd to the interval
// accumulator and, when `window_on`, to the window accumulator
// (lbm_core::launch::EXCHANGE_WORDS doubles per body: Fx, Fy, torque, unused).
//
// It mirrors lbm_core::cpu::accumulate_exchange per link. What it does not do:
// it does not sum in link order (atomics land in any order, so sums agree with
// the CPU to rounding, not bit for bit), it does not zero the accumulators (the
// plan's memset does), and it does not check that a body slot fits the
// accumulator (the link table is built by lbm_core::geometry::links).
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
    const int dir = (int)(link[1] & 15u);
    const unsigned int body = link[1] >> 4;
    if (cell >= plane_cells || dir >= LBM_Q) {
        // A malformed link would read outside the population planes; the CPU
        // reference panics on it, here it contributes nothing.
        return;
    }
    const double rx = (double)__uint_as_float(link[2]);
    const double ry = (double)__uint_as_float(link[3]);
    const double population = (double)(f[(size_t)dir * plane_cells + cell] + lbm_w(dir));
    const double fx = 2.0 * (double)lbm_cx(dir) * population;
    const double fy = 2.0 * (double)lbm_cy(dir) * population;
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
