// all.cu: the one translation unit that `cargo xtask ptx` compiles into lbm.ptx.
//
// It includes every kernel family twice: first with LBM_KERNEL making each
// kernel an `extern "C" __global__` function, then the families a fused batch
// runs, inside namespace lbm_batch, with LBM_KERNEL making each kernel a
// device function that its `_batch` entry (batch.cuh) calls once per member.
// So every `__global__` lands in a single PTX module that lbm-cuda embeds and
// loads once, and a batch member runs the very code of the plain kernel.
// It defines no kernel body of its own and is not meant to be compiled
// together with the files it includes (their shared header would then be
// compiled twice).
#include "batch.cuh"

#include "common.cuh"

// Each pass in its own namespace, so that the two copies of a family's
// helpers never meet in one overload set (arguments of common.cuh's types
// would bring the global ones in).
#define LBM_KERNEL(name) extern "C" __global__ void name
// A kernel whose registers are capped so that `blocks` blocks of
// LBM_BLOCK_THREADS threads fit on one multiprocessor (its definition says
// why); its batch entry is capped only where it is declared with
// LBM_BOUNDED_BATCH_ENTRY below.
#define LBM_BOUNDED_KERNEL(name, blocks) \
    extern "C" __global__ void __launch_bounds__(LBM_BLOCK_THREADS, blocks) name
#define LBM_PROLOGUE() lbm_prologue()
// A kernel of the plain pass only, its entry `name`_spread (lbm.cu says why).
#define LBM_SPREAD_KERNEL(name) extern "C" __global__ void name##_spread
#define LBM_PLAIN_PASS
namespace lbm_plain {
#include "lbm.cu"
#include "refine.cu"
#include "reflux.cu"
#include "exchange.cu"
#include "boundary.cu"
#include "halo.cu"
#include "health.cu"
#include "moments.cu"
#include "producer.cu"
}  // namespace lbm_plain
#undef LBM_PLAIN_PASS
#undef LBM_SPREAD_KERNEL
#undef LBM_KERNEL
#undef LBM_BOUNDED_KERNEL
#undef LBM_PROLOGUE

// A `_batch` entry runs the prologue itself, before it reads its table.
#define LBM_KERNEL(name) __device__ __forceinline__ void name
#define LBM_BOUNDED_KERNEL(name, blocks) __device__ __forceinline__ void name
#define LBM_PROLOGUE()
namespace lbm_batch {
#include "lbm.cu"
#include "refine.cu"
#include "reflux.cu"
#include "exchange.cu"
#include "boundary.cu"
}  // namespace lbm_batch
#undef LBM_KERNEL
#undef LBM_BOUNDED_KERNEL
#undef LBM_PROLOGUE

LBM_BATCH_ENTRY(stream_collide)
LBM_BATCH_ENTRY(stream_collide_bulk)
LBM_BATCH_ENTRY(stream_collide_bulk_walled)
LBM_BOUNDED_BATCH_ENTRY(fill_ghost, 4)
LBM_BOUNDED_BATCH_ENTRY(restrict_to_parent, 5)
LBM_BATCH_ENTRY(accumulate_fine_flux)
LBM_BATCH_ENTRY(correct_interface_mass)
LBM_BATCH_ENTRY(accumulate_exchange)
LBM_BATCH_ENTRY(update_boundary_state)
