// host_emu.cpp: every kernel of all.cu compiled for the host, for checking the
// kernels against the CPU reference on a machine without a GPU.
//
// `cargo xtask kernel-emu` builds this file with g++ into a shared library and
// runs lbm-cuda's GPU tests on it (LBM_KERNEL_EMU names the library). It maps
// the few CUDA built-ins the kernels use onto the host: a launch runs its
// blocks one after another, and the threads of a block one after another, or,
// for a kernel that synchronises its block, as real threads meeting at a
// barrier. Kernel parameters arrive as cuLaunchKernel takes them: an array of
// pointers to the values, a buffer argument being a pointer-sized address.
// Math functions (sinf, fminf) are the host libm's, the very ones Rust's f32
// methods call, so the sine amplitude of boundary.cu matches the CPU bit for
// bit here, though CUDA's sinf on the GPU need not.
// Built without FMA contraction, it rounds every f32 operation exactly as the
// GPU build (-fmad=false) and the Rust reference do.
//
// What it does not do: it is no CUDA emulator (no warps, no shared memory
// beyond what `__shared__` means for one block at a time, no concurrency
// between blocks), it is never part of lbm.ptx, and nothing in the engine uses it.
#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

struct EmuIndex {
    unsigned int x, y, z;
};
static thread_local EmuIndex threadIdx, blockIdx, blockDim, gridDim;
static thread_local std::barrier<>* emu_block_barrier = nullptr;
static thread_local bool emu_sync_missing = false;

static inline void __syncthreads() {
    if (emu_block_barrier == nullptr) {
        emu_sync_missing = true;  // Reported by the launch: the kernel needs threads.
        return;
    }
    emu_block_barrier->arrive_and_wait();
}
static inline float __uint_as_float(unsigned int u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}
static inline unsigned int __float_as_uint(float f) {
    unsigned int u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}
static inline unsigned int atomicMin(unsigned int* address, unsigned int value) {
    const unsigned int old = *address;
    *address = old < value ? old : value;
    return old;
}
// The arrival counters of the producers and of accumulate_exchange: only
// thread 0 of the one block in flight touches them, so plain reads and writes
// stand in for the atomics.
static inline unsigned int atomicAdd(unsigned int* address, unsigned int value) {
    const unsigned int old = *address;
    *address = old + value;
    return old;
}
static inline unsigned int atomicExch(unsigned int* address, unsigned int value) {
    const unsigned int old = *address;
    *address = value;
    return old;
}
// Blocks run one after another and a block's threads meet at a real barrier,
// so there is nothing further to order.
static inline void __threadfence() {}
// Launches run one after another, each to completion, so a kernel's
// programmatic dependency on the previous launch (lbm_prologue) always holds.
static inline void cudaTriggerProgrammaticLaunchCompletion() {}
static inline void cudaGridDependencySynchronize() {}
// CUDA's built-in vector type, as the producers copy 16-byte words.
struct uint4 {
    unsigned int x, y, z, w;
};

#define __device__
#define __forceinline__ inline
#define __global__
#define __launch_bounds__(threads, blocks)
#define __restrict__ __restrict
// One block at a time (see emu_run), so a function-level static is the block's memory.
#define __shared__ static

static inline double __longlong_as_double(long long v) {
    double d;
    std::memcpy(&d, &v, sizeof d);
    return d;
}
static inline long long __double_as_longlong(double d) {
    long long v;
    std::memcpy(&v, &d, sizeof v);
    return v;
}
// CUDA's count of leading zeros, 64 for 0.
static inline int __clzll(long long v) {
    return v == 0 ? 64 : __builtin_clzll((unsigned long long)v);
}
// The host's conversion rounds to nearest, ties to even, as the _rn intrinsic.
static inline double __ull2double_rn(unsigned long long v) {
    return (double)v;
}

#include "all.cu"
using namespace lbm_plain;

// Calls `kernel` with its parameters read from `params`, as cuLaunchKernel does.
template <typename... Args, std::size_t... I>
static void emu_call(void (*kernel)(Args...), void** params, std::index_sequence<I...>) {
    kernel(*static_cast<std::remove_reference_t<Args>*>(params[I])...);
}
template <typename... Args>
static void emu_call(void (*kernel)(Args...), void** params) {
    emu_call(kernel, params, std::index_sequence_for<Args...>{});
}

struct EmuKernel {
    const char* name;
    void (*call)(void**);
    // Whether the kernel synchronises its block and so needs one host thread per GPU thread.
    bool threaded;
};

static const EmuKernel EMU_KERNELS[] = {
    {"stream_collide", [](void** p) { emu_call(stream_collide, p); }, false},
    {"stream_collide_spread", [](void** p) { emu_call(stream_collide_spread, p); }, true},
    {"stream_collide_bulk", [](void** p) { emu_call(stream_collide_bulk, p); }, false},
    {"stream_collide_bulk_walled", [](void** p) { emu_call(stream_collide_bulk_walled, p); }, false},
    {"fill_ghost", [](void** p) { emu_call(fill_ghost, p); }, true},
    {"restrict_to_parent", [](void** p) { emu_call(restrict_to_parent, p); }, true},
    {"accumulate_fine_flux", [](void** p) { emu_call(accumulate_fine_flux, p); }, true},
    {"correct_interface_mass", [](void** p) { emu_call(correct_interface_mass, p); }, true},
    {"accumulate_exchange", [](void** p) { emu_call(accumulate_exchange, p); }, true},
    {"update_boundary_state", [](void** p) { emu_call(update_boundary_state, p); }, false},
    {"pack_halo", [](void** p) { emu_call(pack_halo, p); }, false},
    {"unpack_halo", [](void** p) { emu_call(unpack_halo, p); }, false},
    {"check_health", [](void** p) { emu_call(check_health, p); }, false},
    {"save_moments", [](void** p) { emu_call(save_moments, p); }, false},
    {"produce_static", [](void** p) { emu_call(produce_static, p); }, true},
    {"produce_prefix", [](void** p) { emu_call(produce_prefix, p); }, true},
    {"produce_chunked", [](void** p) { emu_call(produce_chunked, p); }, true},
    {"produce_record", [](void** p) { emu_call(produce_record, p); }, true},
    // The `_batch` entries: one table of member arguments, the z index the member.
    {"stream_collide_batch", [](void** p) { emu_call(stream_collide_batch, p); }, false},
    {"stream_collide_bulk_batch", [](void** p) { emu_call(stream_collide_bulk_batch, p); }, false},
    {"stream_collide_bulk_walled_batch", [](void** p) { emu_call(stream_collide_bulk_walled_batch, p); }, false},
    {"fill_ghost_batch", [](void** p) { emu_call(fill_ghost_batch, p); }, true},
    {"restrict_to_parent_batch", [](void** p) { emu_call(restrict_to_parent_batch, p); }, true},
    {"accumulate_fine_flux_batch", [](void** p) { emu_call(accumulate_fine_flux_batch, p); }, true},
    {"correct_interface_mass_batch", [](void** p) { emu_call(correct_interface_mass_batch, p); }, true},
    {"accumulate_exchange_batch", [](void** p) { emu_call(accumulate_exchange_batch, p); }, true},
    {"update_boundary_state_batch", [](void** p) { emu_call(update_boundary_state_batch, p); }, false},
};

// `__shared__` statics and the block barrier allow one block in flight.
static std::mutex emu_lock;

// Runs a launch of `name` on a grid of grid_x x grid_y x grid_z blocks
// (z layer after z layer: a batch's members) of block_x x block_y threads:
// 0 on success, 1 for an unknown kernel, 2 for a kernel that synchronises but
// is not marked threaded.
extern "C" int lbm_emu_launch(const char* name, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,
                              unsigned int block_x, unsigned int block_y, void** params) {
    const unsigned int block = block_x * block_y;
    const EmuKernel* kernel = nullptr;
    for (const EmuKernel& k : EMU_KERNELS) {
        if (std::strcmp(k.name, name) == 0) {
            kernel = &k;
        }
    }
    if (kernel == nullptr) {
        return 1;
    }
    std::lock_guard<std::mutex> guard(emu_lock);
    bool sync_missing = false;
    for (unsigned int bz = 0; bz < grid_z; ++bz) {
        for (unsigned int by = 0; by < grid_y; ++by) {
            for (unsigned int b = 0; b < grid_x; ++b) {
                if (!kernel->threaded) {
                    for (unsigned int t = 0; t < block; ++t) {
                        blockIdx = {b, by, bz};
                        threadIdx = {t % block_x, t / block_x, 0};
                        blockDim = {block_x, block_y, 1};
                        gridDim = {grid_x, grid_y, grid_z};
                        emu_sync_missing = false;
                        kernel->call(params);
                        sync_missing = sync_missing || emu_sync_missing;
                    }
                    continue;
                }
                std::barrier<> barrier((std::ptrdiff_t)block);
                std::vector<std::thread> threads;
                threads.reserve(block);
                for (unsigned int t = 0; t < block; ++t) {
                    threads.emplace_back([&, t, b, by, bz] {
                        blockIdx = {b, by, bz};
                        threadIdx = {t % block_x, t / block_x, 0};
                        blockDim = {block_x, block_y, 1};
                        gridDim = {grid_x, grid_y, grid_z};
                        emu_block_barrier = &barrier;
                        kernel->call(params);
                    });
                }
                for (std::thread& thread : threads) {
                    thread.join();
                }
            }
        }
    }
    return sync_missing ? 2 : 0;
}
