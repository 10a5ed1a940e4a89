//! Launch geometry of the producers: how many blocks a launch gets for the
//! bytes it moves. Exact host arithmetic, testable without a device.
//!
//! Grids scale with the bytes moved, one block per 16 KiB, capped at 264
//! blocks (about two resident 256-thread blocks per SM on 128- and 132-SM
//! parts: a bounded heuristic, not a promise of one wave; no kernel relies
//! on residency). A chunked producer splits its grid evenly among its K
//! sources, so its grid is a multiple of K. The four fixed tiers that came
//! before are here only for the benchmark that compares the two.

use crate::RingError;

/// Bytes one producer block is sized for.
pub const PRODUCER_BYTES_PER_BLOCK: u64 = 16 * 1024;
/// Most blocks any producer launch uses.
pub const PRODUCER_MAX_BLOCKS: u32 = 264;
/// Most sources one chunked producer launch takes (the kernel's table of
/// chunk offsets lives in shared memory).
pub const PRODUCER_MAX_CHUNKS: u32 = lbm_core::kernels::producer::MAX_CHUNKS;

/// `min(264, ceil(nbytes / 16 KiB))`, at least 1; the ceiling is taken as
/// `(n - 1) / B + 1` so that `u64::MAX` cannot overflow.
pub fn producer_grid_blocks(nbytes: u64) -> u32 {
    if nbytes == 0 {
        return 1;
    }
    let blocks = (nbytes - 1) / PRODUCER_BYTES_PER_BLOCK + 1;
    blocks.min(PRODUCER_MAX_BLOCKS as u64) as u32
}

/// The proportional grid rounded up to a multiple of `chunks` while that stays
/// within the cap, else the largest multiple of `chunks` under the cap: always a
/// multiple of `chunks` in `[chunks, 264]`.
pub fn producer_chunked_grid_blocks(nbytes: u64, chunks: u32) -> Result<u32, RingError> {
    if !(1..=PRODUCER_MAX_CHUNKS).contains(&chunks) {
        return Err(RingError::ChunkCount {
            chunks,
            max: PRODUCER_MAX_CHUNKS,
        });
    }
    let rounded = producer_grid_blocks(nbytes).div_ceil(chunks) * chunks;
    Ok(if rounded <= PRODUCER_MAX_BLOCKS {
        rounded
    } else {
        PRODUCER_MAX_BLOCKS / chunks * chunks
    })
}

/// The grid producers had before grids scaled with their bytes: 1, 4, 16 or
/// 64 blocks, switching at 64 KiB, 4 MiB and 32 MiB. It exists only for the
/// benchmark that measures what the scaled grid gained
/// (`crates/lbm-cuda/benches/gpu_ring_producer.rs`); no launch builder uses it.
///
/// Each threshold belongs to the tier below it (exactly 64 KiB is 1 block,
/// 64 KiB + 1 is 4), the convention of [`producer_grid_blocks`], where exactly
/// 16 KiB is one block.
pub fn legacy_tier_blocks(nbytes: u64) -> u32 {
    const ONE_BLOCK_UP_TO: u64 = 64 << 10;
    const FOUR_BLOCKS_UP_TO: u64 = 4 << 20;
    const SIXTEEN_BLOCKS_UP_TO: u64 = 32 << 20;
    if nbytes <= ONE_BLOCK_UP_TO {
        1
    } else if nbytes <= FOUR_BLOCKS_UP_TO {
        4
    } else if nbytes <= SIXTEEN_BLOCKS_UP_TO {
        16
    } else {
        64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * KIB;
    const BLOCK: u64 = PRODUCER_BYTES_PER_BLOCK;

    /// Both geometries at `nbytes`: (scaled, legacy).
    fn check(cases: &[(u64, u32, u32)]) {
        for &(nbytes, scaled, legacy) in cases {
            assert_eq!(producer_grid_blocks(nbytes), scaled, "scaled grid of {nbytes} bytes");
            assert_eq!(legacy_tier_blocks(nbytes), legacy, "legacy grid of {nbytes} bytes");
        }
    }

    #[test]
    fn grids_at_the_16_kib_boundaries() {
        check(&[
            (0, 1, 1),
            (1, 1, 1),
            (BLOCK - 1, 1, 1),
            (BLOCK, 1, 1),
            (BLOCK + 1, 2, 1),
            (2 * BLOCK, 2, 1),
            (2 * BLOCK + 1, 3, 1),
        ]);
    }

    #[test]
    fn grids_at_the_old_tier_sizes() {
        check(&[
            (64 * KIB - 1, 4, 1),
            (64 * KIB, 4, 1),
            (64 * KIB + 1, 5, 4),
            (4 * MIB - 1, 256, 4),
            (4 * MIB, 256, 4),
            (4 * MIB + 1, 257, 16),
            (32 * MIB - 1, 264, 16),
            (32 * MIB, 264, 16),
            (32 * MIB + 1, 264, 64),
        ]);
    }

    #[test]
    fn grids_at_the_cap_and_beyond() {
        check(&[
            (263 * BLOCK, 263, 16),
            (263 * BLOCK + 1, 264, 16),
            (264 * BLOCK - 1, 264, 16),
            (264 * BLOCK, 264, 16),
            (264 * BLOCK + 1, 264, 16),
            (u64::MAX, 264, 64),
        ]);
    }

    #[test]
    fn chunked_grids_for_the_usual_chunk_counts() {
        // Columns: chunk counts 1, 3, 5, 7, 64.
        for (nbytes, blocks) in [
            (0, [1, 3, 5, 7, 64]),
            (1, [1, 3, 5, 7, 64]),
            (100 * BLOCK, [100, 102, 100, 105, 128]),
            (256 * BLOCK, [256, 258, 260, 259, 256]),
            (260 * BLOCK, [260, 261, 260, 259, 256]),
            (u64::MAX, [264, 264, 260, 259, 256]),
        ] {
            for (chunks, want) in [1, 3, 5, 7, 64].into_iter().zip(blocks) {
                assert_eq!(
                    producer_chunked_grid_blocks(nbytes, chunks).unwrap(),
                    want,
                    "{nbytes} bytes in {chunks} chunks"
                );
            }
        }
    }

    #[test]
    fn chunk_counts_outside_1_to_64_are_refused() {
        for chunks in [0, 65, 264] {
            let e = producer_chunked_grid_blocks(1, chunks).unwrap_err();
            assert!(
                matches!(e, RingError::ChunkCount { chunks: c, max: 64 } if c == chunks),
                "{e:?}"
            );
            assert!(e.to_string().contains("1..=64"), "{e}");
        }
    }

    /// Sizes around every block boundary up to past the cap, every power of
    /// two, and the extremes.
    fn size_sweep() -> Vec<u64> {
        let mut sizes = vec![0, 1, u64::MAX, u64::MAX - 1];
        for blocks in 1..=300u64 {
            sizes.extend([blocks * BLOCK - 1, blocks * BLOCK, blocks * BLOCK + 1]);
        }
        sizes.extend((0..64).map(|k| 1u64 << k));
        sizes
    }

    #[test]
    fn every_chunked_grid_is_a_multiple_of_k_within_k_and_the_cap() {
        for chunks in 1..=PRODUCER_MAX_CHUNKS {
            let largest = PRODUCER_MAX_BLOCKS / chunks * chunks;
            for nbytes in size_sweep() {
                let blocks = producer_chunked_grid_blocks(nbytes, chunks).unwrap();
                let at = format!("{nbytes} bytes in {chunks} chunks: {blocks} blocks");
                assert!(blocks.is_multiple_of(chunks), "{at}");
                assert!((chunks..=PRODUCER_MAX_BLOCKS).contains(&blocks), "{at}");
                // Rounding adds fewer than K blocks, and takes some away only
                // where the cap forces the largest multiple under it.
                let proportional = producer_grid_blocks(nbytes);
                assert!(blocks < proportional + chunks, "{at}");
                assert!(blocks >= proportional || blocks == largest, "{at}");
            }
        }
    }
}
