// exchange.cu: `accumulate_exchange`, the momentum exchange on body links.
//
// The link table has lbm_core::domain::geometry::LINK_WORDS words per link:
// the fluid cell's storage index; the direction d pointing into the body plus
// 16 x the body slot; the lever arm x and y as f32 bits; the wall distance q
// as f32 bits; the storage index of the fluid cell behind, or LBM_NO_CELL.
// `f` holds the post-collision populations that the hop's streaming reads. Each
// link gives its body c_d (f*_d + f_in) in real populations (un-shifted by their
// weights, hence the 2 w_d), f_in being what `bouzidi` returns along opp(d), and
// the torque r x F about the body centre; the interval accumulator and, when
// `window_on`, the window accumulator get the sums
// (lbm_core::kernels::exchange::EXCHANGE_WORDS doubles per body slot: Fx, Fy,
// torque, unused).
//
// The sums are the same bit for bit on every run, across a checkpoint and
// resume, and on the CPU, because their order is fixed: the launch is one
// block of LBM_BLOCK_THREADS (T) threads per body slot of the level (bodies on
// one level share the accumulators, one slot each, named in the link table);
// thread t of block s sums in f64 registers the contributions of the links of
// slot s among links t, t + T, t + 2T, ... in that order; a tree in shared
// memory (for h = T/2, ..., 1: p[i] += p[i + h] for i < h) combines the
// threads' sums; thread 0 adds the total to the slot's words, no atomics
// (atomicAdd lands in whatever order the threads arrive, which changed the
// last bits from run to run). Why this shape: each block reads the whole
// table but computes only its own slot's links, so the slots are summed side
// by side and a level with many bodies takes about the time of one; shared
// memory is 3 x T doubles per block whatever the number of slots, so the only
// limit on slots is the 2^28 a link can name (MAX_BODY_SLOTS beside the launch
// struct; the launch check refuses more); one launch per patch and hop, as
// before, and no scratch buffer. A table of 16k links is 64 iterations per
// thread.
//
// It mirrors lbm_core::kernels::exchange::accumulate_exchange bit for bit,
// each contribution and the order of the sums (lbm_core::kernels::reduce).
// What it does not do: it does not zero the accumulators (the plan's memset
// does), and it does not check the slots in the table against `n_slots` (the
// table is built by lbm_core::domain::geometry::wall_tables; a link of a slot
// without a block contributes nothing, as on the CPU).
#include "common.cuh"

extern "C" __global__ void accumulate_exchange(const float* __restrict__ f, unsigned int plane_cells,
                                               const unsigned int* __restrict__ links, unsigned int n_links,
                                               unsigned int n_slots, double* interval, double* window,
                                               unsigned int window_on) {
    __shared__ double partial[3][LBM_BLOCK_THREADS];
    const unsigned int slot = blockIdx.x;
    // The host launches exactly n_slots blocks of LBM_BLOCK_THREADS threads
    // (uniform branch: the whole block leaves or none of it).
    if (blockDim.x != LBM_BLOCK_THREADS || slot >= n_slots) {
        return;
    }
    const unsigned int tid = threadIdx.x;
    double sum_fx = 0.0;
    double sum_fy = 0.0;
    double sum_torque = 0.0;
    for (size_t k = tid; k < n_links; k += LBM_BLOCK_THREADS) {
        const unsigned int* link = links + k * LBM_LINK_WORDS;
        if (link[1] >> 4 != slot) {
            continue;
        }
        const unsigned int cell = link[0];
        const int d = (int)(link[1] & 15u);
        const unsigned int behind = link[5];
        const bool has_behind = behind != LBM_NO_CELL;
        if (cell >= plane_cells || d >= LBM_Q || (has_behind && behind >= plane_cells)) {
            // A malformed link would read outside the population planes; the CPU
            // reference panics on it, here it contributes nothing.
            continue;
        }
        const double rx = (double)__uint_as_float(link[2]);
        const double ry = (double)__uint_as_float(link[3]);
        const float q = __uint_as_float(link[4]);
        const float returned = bouzidi(f, plane_cells, cell, has_behind, behind, lbm_opp(d), q);
        const double both = (double)(f[(size_t)d * plane_cells + cell] + returned + 2.0f * lbm_w(d));
        const double fx = (double)lbm_cx(d) * both;
        const double fy = (double)lbm_cy(d) * both;
        sum_fx += fx;
        sum_fy += fy;
        sum_torque += rx * fy - ry * fx;
    }
    partial[0][tid] = sum_fx;
    partial[1][tid] = sum_fy;
    partial[2][tid] = sum_torque;
    __syncthreads();
#pragma unroll
    for (unsigned int stride = LBM_BLOCK_THREADS / 2; stride > 0; stride >>= 1) {
        if (tid < stride) {
            for (int j = 0; j < 3; ++j) {
                partial[j][tid] += partial[j][tid + stride];
            }
        }
        __syncthreads();
    }
    if (tid == 0) {
        double* out = interval + (size_t)slot * LBM_EXCHANGE_WORDS;
        for (int j = 0; j < 3; ++j) {
            out[j] += partial[j][0];
        }
        if (window_on != 0) {
            double* w = window + (size_t)slot * LBM_EXCHANGE_WORDS;
            for (int j = 0; j < 3; ++j) {
                w[j] += partial[j][0];
            }
        }
    }
}
