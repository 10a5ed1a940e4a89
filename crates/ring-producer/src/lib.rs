//! Launch geometry of the device-to-device ring producers: how many blocks a
//! producer launch gets for the bytes it moves.
//!
//! Grids scale with the bytes moved, one block per 16 KiB, capped at 264 blocks;
//! a chunked producer splits its grid evenly among its K sources, so its grid is
//! a multiple of K. Everything here is exact host arithmetic, testable without a
//! device. The old fixed tiers stay only for the benchmark that compares them.
//! The ring buffer, its control block and the launch builders are not here
//! yet (DESIGN.md §5).
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

mod geometry;

use thiserror::Error;

pub use geometry::{
    PRODUCER_BYTES_PER_BLOCK, PRODUCER_MAX_BLOCKS, PRODUCER_MAX_CHUNKS, legacy_tier_blocks,
    producer_chunked_grid_blocks, producer_grid_blocks,
};

#[derive(Debug, Error)]
pub enum RingError {
    #[error("chunked producer with {chunks} sources: accepted 1..={max}")]
    ChunkCount { chunks: u32, max: u32 },
}
