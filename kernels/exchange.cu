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
// resume, and on the CPU, because their order is fixed. The launch is
// n_slots x B blocks of LBM_BLOCK_THREADS (T) threads, B = `blocks_per_slot`
// (bodies on one level share the accumulators, one slot each, named in the
// link table); block b of slot s is blockIdx.x = s B + b. Thread t of that
// block sums in f64 registers the contributions of the links of slot s among
// links b T + t, b T + t + B T, b T + t + 2 B T, ... in that order; a tree in
// shared memory (for h = T/2, ..., 1: p[i] += p[i + h] for i < h) combines
// the threads' sums into the block's partial, which thread 0 writes to
// `partials` (3 doubles per block). It then fences and counts the block's
// arrival on the slot's u32 in `arrivals` (the pattern of producer.cu); the
// block that reads B - 1 is the slot's last, sees every other block's
// partial, and sums the B partials in block order b = 0, 1, ..., B - 1 (the
// order does not depend on which block came last), adds the total to the
// slot's words and sets the counter back to 0 for the next launch. No atomics
// on the doubles (atomicAdd lands in whatever order the threads arrive, which
// changed the last bits from run to run). Why this shape: one block per slot
// was latency-bound (56 us on 10k links); B, chosen on the host from the link
// count (lbm_core::kernels::exchange::blocks_per_slot: one block per 2048
// links, 1 to 64), spreads a slot over several SMs, and each block still
// reads its stride of the whole table but computes only its own slot's
// links, so the slots are summed side by side. Shared memory is 3 x T
// doubles per block whatever the number of slots; the only limit on slots is
// the 2^28 a link can name (MAX_BODY_SLOTS beside the launch struct; the
// launch check refuses more, and more than 64 blocks per slot).
//
// It mirrors lbm_core::kernels::exchange::accumulate_exchange bit for bit,
// each contribution, the partials and the order of the sums
// (lbm_core::kernels::reduce).
// What it does not do: it does not zero the accumulators (the plan's memset
// does) nor the counters (zero from the allocation on, left zero by every
// launch), and it does not check the slots in the table against `n_slots`
// (the table is built by lbm_core::domain::geometry::wall_tables; a link of a
// slot without blocks contributes nothing, as on the CPU).
#include "common.cuh"

LBM_KERNEL(accumulate_exchange)(const float* __restrict__ f, unsigned int plane_cells,
                                               const unsigned int* __restrict__ links, unsigned int n_links,
                                               unsigned int n_slots, unsigned int blocks_per_slot, double* partials,
                                               unsigned int* arrivals, double* interval, double* window,
                                               unsigned int window_on) {
    LBM_PROLOGUE();
    __shared__ double partial[3][LBM_BLOCK_THREADS];
    // The host launches exactly n_slots x blocks_per_slot blocks of
    // LBM_BLOCK_THREADS threads (uniform branch: the whole block leaves or
    // none of it).
    if (blockDim.x != LBM_BLOCK_THREADS || blocks_per_slot == 0 || blockIdx.x / blocks_per_slot >= n_slots) {
        return;
    }
    const unsigned int slot = blockIdx.x / blocks_per_slot;
    const unsigned int block = blockIdx.x % blocks_per_slot;
    const unsigned int tid = threadIdx.x;
    const size_t stride = (size_t)LBM_BLOCK_THREADS * blocks_per_slot;
    double sum_fx = 0.0;
    double sum_fy = 0.0;
    double sum_torque = 0.0;
    for (size_t k = (size_t)block * LBM_BLOCK_THREADS + tid; k < n_links; k += stride) {
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
    for (unsigned int h = LBM_BLOCK_THREADS / 2; h > 0; h >>= 1) {
        if (tid < h) {
            for (int j = 0; j < 3; ++j) {
                partial[j][tid] += partial[j][tid + h];
            }
        }
        __syncthreads();
    }
    if (tid != 0) {
        return;
    }
    // Volatile: the last block reads partials other SMs wrote during this
    // launch, which a line cached in its own L1 (a neighbour slot's read) must
    // not stand in for.
    volatile double* slot_partials = partials + (size_t)slot * blocks_per_slot * 3;
    for (int j = 0; j < 3; ++j) {
        slot_partials[(size_t)block * 3 + j] = partial[j][0];
    }
    // The partial is visible to every block before the arrival is counted.
    __threadfence();
    if (atomicAdd(arrivals + slot, 1u) != blocks_per_slot - 1) {
        return;
    }
    // Every other block of the slot fenced before it arrived, so its partial
    // is visible.
    __threadfence();
    double total[3];
    for (int j = 0; j < 3; ++j) {
        total[j] = slot_partials[j];
    }
    for (unsigned int b = 1; b < blocks_per_slot; ++b) {
        for (int j = 0; j < 3; ++j) {
            total[j] += slot_partials[(size_t)b * 3 + j];
        }
    }
    double* out = interval + (size_t)slot * LBM_EXCHANGE_WORDS;
    for (int j = 0; j < 3; ++j) {
        out[j] += total[j];
    }
    if (window_on != 0) {
        double* w = window + (size_t)slot * LBM_EXCHANGE_WORDS;
        for (int j = 0; j < 3; ++j) {
            w[j] += total[j];
        }
    }
    // Every block of the slot has arrived, so nothing else touches the
    // counter in this launch; the next launch finds it at 0.
    atomicExch(arrivals + slot, 0u);
}
