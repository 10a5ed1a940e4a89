//! Launch geometry of the device-to-device ring producers: how many blocks a
//! producer launch gets for the bytes it moves.
//!
//! Grids scale with the bytes moved, one block per 16 KiB, capped at 264 blocks;
//! a chunked producer splits its grid evenly among its K sources, so its grid is
//! a multiple of K. Everything here is exact host arithmetic, testable without a
//! device. The ring buffer, its control block and the producer kernels are not
//! here yet (DESIGN.md §5).
//!
//! ```
//! use ring_producer::{producer_chunked_grid_blocks, producer_grid_blocks};
//!
//! assert_eq!(producer_grid_blocks(1), 1);
//! assert_eq!(producer_grid_blocks(4 * 16384 + 1), 5);
//! assert_eq!(producer_grid_blocks(u64::MAX), 264);
//! // Split among 7 sources, the grid is a multiple of 7.
//! assert_eq!(producer_chunked_grid_blocks(100 * 16384, 7)? % 7, 0);
//! # Ok::<(), ring_producer::RingError>(())
//! ```
#![forbid(unsafe_code)]

use thiserror::Error;

/// Bytes one producer block is sized for.
pub const PRODUCER_BYTES_PER_BLOCK: u64 = 16 * 1024;
/// Most blocks any producer launch uses.
pub const PRODUCER_MAX_BLOCKS: u32 = 264;
/// Most sources one chunked producer launch takes.
pub const PRODUCER_MAX_CHUNKS: u32 = 64;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum RingError {
    #[error("chunked producer with {chunks} sources: accepted 1..={max}")]
    ChunkCount { chunks: u32, max: u32 },
}

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

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: u64 = 1024;

    #[test]
    fn grid_scales_with_bytes_up_to_the_cap() {
        for (nbytes, blocks) in [
            (0, 1),
            (1, 1),
            (16 * KIB, 1),
            (16 * KIB + 1, 2),
            (64 * KIB, 4),
            (264 * 16 * KIB, 264),
            (264 * 16 * KIB + 1, 264),
            (u64::MAX, 264),
        ] {
            assert_eq!(producer_grid_blocks(nbytes), blocks, "{nbytes} bytes");
        }
    }

    #[test]
    fn chunked_grids_are_multiples_of_k_within_the_cap() {
        for (nbytes, chunks, blocks) in [
            (1, 1, 1),
            (1, 3, 3),
            (5 * 16 * KIB, 4, 8),
            (u64::MAX, 64, 256),
            (u64::MAX, 7, 259),
            (260 * 16 * KIB, 8, 264),
            (263 * 16 * KIB, 64, 256),
        ] {
            assert_eq!(
                producer_chunked_grid_blocks(nbytes, chunks),
                Ok(blocks),
                "{nbytes} bytes, {chunks} chunks"
            );
        }
        for chunks in 1..=64 {
            for nbytes in [0, 1, 100 * KIB, 4096 * KIB, u64::MAX] {
                let blocks = producer_chunked_grid_blocks(nbytes, chunks).unwrap();
                assert!(blocks.is_multiple_of(chunks) && (chunks..=264).contains(&blocks));
            }
        }
    }

    #[test]
    fn chunk_counts_outside_1_to_64_are_refused() {
        for chunks in [0, 65] {
            let e = producer_chunked_grid_blocks(1, chunks).unwrap_err();
            assert!(e.to_string().contains("1..=64"), "{e}");
        }
    }
}
