// producer.cu: the ring producers `produce_static`, `produce_prefix`,
// `produce_chunked` and `produce_record`, which copy bytes from device buffers
// into a device ring and publish them through its control block.
//
// The layouts (control block, record header) and the protocol are documented
// once, in lbm_core::kernels::producer; the offsets come from constants.cuh.
// Each kernel is a grid-stride copy that wraps at the ring's end and is right
// for any one-dimensional grid: the grid only decides how fast it goes. After
// its copies every thread fences, the block meets at a barrier, and thread 0
// signals the block's arrival with one atomicAdd; the block that reads
// gridDim.x - 1 is the last, so every other block's bytes are visible, and it
// alone publishes (head += bytes moved, sequence += 1, flags) and puts the
// counter back to 0 for the next launch, whatever its grid. head and sequence
// are read by every block before it arrives and written only after all have,
// so no block sees a half-published ring.
//
// It mirrors lbm_core::kernels::producer::{produce_static, produce_prefix,
// produce_chunked, produce_record} byte for byte. What it does not do: read
// the consumer's tail (the host keeps producers from overwriting unconsumed
// bytes), choose its grid (ring-producer's geometry does), or cope with a
// counter that is not 0 on entry (see lbm_core::kernels::producer::arrive).
#include "constants.cuh"

// Byte counts and ring positions: u64 as on the host.
typedef unsigned long long ull;

__device__ __forceinline__ ull ring_min(ull a, ull b) {
    return a < b ? a : b;
}

__device__ __forceinline__ volatile ull* ring_word(unsigned char* control, unsigned int at) {
    return (volatile ull*)(control + at);
}

// This thread's index among the launch's threads, and how many there are.
__device__ __forceinline__ ull worker_index() {
    return (ull)blockIdx.x * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ ull worker_count() {
    return (ull)gridDim.x * blockDim.x;
}

// Copies n bytes from src to dst, split among `workers` threads of which this
// is `worker`. When both addresses agree modulo 16 the middle goes in 16-byte
// words (the bytes before dst's next 16-byte boundary and after the last whole
// word one by one); otherwise byte by byte.
__device__ void copy_span(unsigned char* dst, const unsigned char* src, ull n, ull worker, ull workers) {
    ull lead = n;
    ull words = 0;
    if ((((ull)dst ^ (ull)src) & 15u) == 0) {
        lead = ring_min(n, (16u - ((ull)dst & 15u)) & 15u);
        words = (n - lead) / 16u;
    }
    for (ull i = worker; i < lead; i += workers) {
        dst[i] = src[i];
    }
    uint4* dst4 = (uint4*)(dst + lead);
    const uint4* src4 = (const uint4*)(src + lead);
    for (ull i = worker; i < words; i += workers) {
        dst4[i] = src4[i];
    }
    for (ull i = lead + 16u * words + worker; i < n; i += workers) {
        dst[i] = src[i];
    }
}

// Copies n bytes (at most the capacity) into the ring from position `at`
// (below the capacity), wrapping at the end.
__device__ void ring_copy(unsigned char* ring, ull capacity, ull at, const unsigned char* src, ull n, ull worker,
                          ull workers) {
    const ull first = ring_min(n, capacity - at);
    copy_span(ring + at, src, first, worker, workers);
    copy_span(ring, src + first, n - first, worker, workers);
}

// Every thread of every block calls this once, after its copies and with no
// thread having returned early: the arrival, and the publication by the last
// block of `bytes` moved from `head` as sequence number `sequence + 1`.
__device__ void arrive_and_publish(unsigned char* control, ull head, ull sequence, ull bytes, unsigned int flags) {
    __threadfence();
    __syncthreads();
    if (threadIdx.x != 0) {
        return;
    }
    unsigned int* arrival = (unsigned int*)(control + LBM_RING_ARRIVAL);
    if (atomicAdd(arrival, 1u) != gridDim.x - 1) {
        return;
    }
    // Every other block fenced before it arrived, so its bytes are visible;
    // this fence orders the publication after them for whoever reads it.
    __threadfence();
    *ring_word(control, LBM_RING_HEAD) = head + bytes;
    *ring_word(control, LBM_RING_SEQUENCE) = sequence + 1;
    volatile unsigned int* flag_word = (volatile unsigned int*)(control + LBM_RING_FLAGS);
    *flag_word = *flag_word | flags;
    atomicExch(arrival, 0u);
}

LBM_KERNEL(produce_static)(const unsigned char* src, unsigned char* ring, unsigned char* control,
                                          unsigned long long capacity, unsigned long long nbytes) {
    LBM_PROLOGUE();
    const ull head = *ring_word(control, LBM_RING_HEAD);
    const ull sequence = *ring_word(control, LBM_RING_SEQUENCE);
    ring_copy(ring, capacity, head % capacity, src, nbytes, worker_index(), worker_count());
    arrive_and_publish(control, head, sequence, nbytes, 0u);
}

LBM_KERNEL(produce_prefix)(const unsigned char* src, const unsigned int* row_count,
                                          unsigned char* ring, unsigned char* control, unsigned long long capacity,
                                          unsigned long long row_bytes, unsigned int max_rows) {
    LBM_PROLOGUE();
    const ull head = *ring_word(control, LBM_RING_HEAD);
    const ull sequence = *ring_word(control, LBM_RING_SEQUENCE);
    const unsigned int rows = *row_count;
    const unsigned int moved_rows = rows < max_rows ? rows : max_rows;
    const ull bytes = (ull)moved_rows * row_bytes;
    ring_copy(ring, capacity, head % capacity, src, bytes, worker_index(), worker_count());
    arrive_and_publish(control, head, sequence, bytes, rows > max_rows ? LBM_RING_FLAG_PREFIX_CLAMPED : 0u);
}

// Each chunk's ring offset from the launch's start, and whether the table is
// valid (every entry inside the source, the entries adding up to
// total_bytes, summed so that nothing overflows): thread 0 works them out
// into shared memory for its block.
__device__ bool chunk_offsets(const ull* chunks, unsigned int n_chunks, ull src_bytes, ull total_bytes,
                              ull* offsets) {
    ull sum = 0;
    for (unsigned int c = 0; c < n_chunks; ++c) {
        const ull offset = chunks[2 * c];
        const ull bytes = chunks[2 * c + 1];
        if (offset > src_bytes || bytes > src_bytes - offset || bytes > total_bytes - sum) {
            return false;
        }
        offsets[c] = sum;
        sum += bytes;
    }
    return sum == total_bytes;
}

LBM_KERNEL(produce_chunked)(const unsigned char* src, const unsigned long long* chunks,
                                           unsigned char* ring, unsigned char* control, unsigned long long capacity,
                                           unsigned long long src_bytes, unsigned int n_chunks,
                                           unsigned long long total_bytes) {
    LBM_PROLOGUE();
    __shared__ ull offsets[LBM_RING_MAX_CHUNKS];
    __shared__ bool valid;
    const ull head = *ring_word(control, LBM_RING_HEAD);
    const ull sequence = *ring_word(control, LBM_RING_SEQUENCE);
    if (threadIdx.x == 0) {
        valid = chunk_offsets(chunks, n_chunks, src_bytes, total_bytes, offsets);
    }
    __syncthreads();
    // Chunk c belongs to blocks [c * per_chunk, (c + 1) * per_chunk); with
    // fewer blocks than chunks each block takes every gridDim.x-th chunk, and
    // blocks past the last whole group only arrive.
    const unsigned int per_chunk = gridDim.x / n_chunks > 0 ? gridDim.x / n_chunks : 1u;
    const unsigned int groups = gridDim.x / per_chunk;
    const ull workers = (ull)per_chunk * blockDim.x;
    const ull worker = (ull)(blockIdx.x % per_chunk) * blockDim.x + threadIdx.x;
    const ull at = head % capacity;
    for (unsigned int c = blockIdx.x / per_chunk; valid && c < n_chunks; c += groups) {
        const ull to = at + offsets[c];
        ring_copy(ring, capacity, to < capacity ? to : to - capacity, src + chunks[2 * c], chunks[2 * c + 1], worker,
                  workers);
    }
    arrive_and_publish(control, head, sequence, valid ? total_bytes : 0u, valid ? 0u : LBM_RING_FLAG_BAD_CHUNKS);
}

// The record header of lbm_core::kernels::producer::record_header, written
// byte by byte from ring position `at` with the wrap.
__device__ void write_header(unsigned char* ring, ull capacity, ull at, unsigned int kind, ull sequence, ull step,
                             ull payload_bytes, ull record_bytes) {
    unsigned char h[LBM_RECORD_HEADER_BYTES];
    const ull fields[5] = {sequence, step, payload_bytes, record_bytes, 0};
    const unsigned int words[2] = {LBM_RECORD_MAGIC, kind};
    for (int i = 0; i < 8; ++i) {
        h[i] = (unsigned char)(words[i / 4] >> (8 * (i % 4)));
    }
    for (int i = LBM_RECORD_SEQUENCE_AT; i < (int)LBM_RECORD_CHECK_AT; ++i) {
        h[i] = (unsigned char)(fields[(i - LBM_RECORD_SEQUENCE_AT) / 8] >> (8 * (i % 8)));
    }
    ull check = LBM_FNV_OFFSET;
    for (int i = 0; i < (int)LBM_RECORD_CHECK_AT; ++i) {
        check = (check ^ h[i]) * LBM_FNV_PRIME;
    }
    for (int i = LBM_RECORD_CHECK_AT; i < (int)LBM_RECORD_HEADER_BYTES; ++i) {
        h[i] = (unsigned char)(check >> (8 * (i % 8)));
    }
    for (int i = 0; i < (int)LBM_RECORD_HEADER_BYTES; ++i) {
        const ull to = at + i;
        ring[to < capacity ? to : to - capacity] = h[i];
    }
}

LBM_KERNEL(produce_record)(const unsigned char* payload, unsigned char* ring, unsigned char* control,
                                          unsigned long long capacity, unsigned long long payload_bytes,
                                          unsigned int kind, unsigned long long step) {
    LBM_PROLOGUE();
    const ull head = *ring_word(control, LBM_RING_HEAD);
    const ull sequence = *ring_word(control, LBM_RING_SEQUENCE);
    const ull unpadded = LBM_RECORD_HEADER_BYTES + payload_bytes;
    const ull record_bytes = (unpadded + LBM_RECORD_ALIGN - 1) / LBM_RECORD_ALIGN * LBM_RECORD_ALIGN;
    const ull at = head % capacity;
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        write_header(ring, capacity, at, kind, sequence + 1, step, payload_bytes, record_bytes);
        for (ull i = unpadded; i < record_bytes; ++i) {
            const ull to = at + i;
            ring[to % capacity] = 0;
        }
    }
    const ull payload_at = at + LBM_RECORD_HEADER_BYTES;
    ring_copy(ring, capacity, payload_at % capacity, payload, payload_bytes, worker_index(), worker_count());
    arrive_and_publish(control, head, sequence, record_bytes, 0u);
}
