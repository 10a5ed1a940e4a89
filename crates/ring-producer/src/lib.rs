//! The device ring and its producers, above the device seam: launch geometry
//! ([`producer_grid_blocks`], [`producer_chunked_grid_blocks`]), the [`Ring`]
//! (two device buffers and the host's flow control), the typed launch
//! builders of the four producers, and the host side of what a consumer reads
//! back ([`RingControl`], [`Ring::spans`], [`RecordHeader::parse`]).
//!
//! # The ring
//!
//! A byte buffer of any capacity of at least one byte, written at
//! `head % capacity` and wrapping at its end, and a 32-byte control block in
//! a buffer of its own (little-endian):
//!
//! | bytes  | field      | written by | meaning |
//! | ------ | ---------- | ---------- | ------- |
//! | 0..8   | `head`     | producers  | bytes ever published, monotonic |
//! | 8..16  | `tail`     | the host   | bytes the consumer has taken; no kernel reads it |
//! | 16..24 | `sequence` | producers  | launches published |
//! | 24..28 | `arrival`  | producers  | blocks of the running launch arrived, 0 between launches |
//! | 28..32 | `flags`    | producers  | sticky: 1 a prefix was clamped, 2 a chunk table was refused |
//!
//! Every producer launch copies with a grid-stride loop, each block signals
//! its arrival, and the last block to arrive publishes (`head` += bytes moved,
//! `sequence` += 1) and resets the counter, so launches of different grid
//! sizes share it; a launch that moves nothing still publishes. The protocol
//! and the kernels' contracts are documented with the launch structs in
//! [`lbm_core::kernels::producer`].
//!
//! # A record
//!
//! A record producer writes a 48-byte header, then the payload, then zero
//! bytes up to a multiple of 16:
//!
//! | bytes  | field           |
//! | ------ | --------------- |
//! | 0..4   | magic `"LBMR"`  |
//! | 4..8   | kind (u32)      |
//! | 8..16  | sequence (u64): the control block's `sequence` once this record is published |
//! | 16..24 | simulation step (u64) |
//! | 24..32 | payload bytes (u64) |
//! | 32..40 | record bytes (u64): header, payload and padding |
//! | 40..48 | check (u64): FNV-1a 64 of bytes 0..40 |
//!
//! The header is written on the device, with the sequence number read from
//! the control block, so a consumer can check each record it takes:
//! [`parse_records`] refuses a wrong magic, a failed check, a length that does
//! not match, and a record out of sequence, each naming the record's sequence
//! number.
//!
//! # Flow control
//!
//! The host never enqueues a producer that would overwrite bytes the consumer
//! has not taken; it waits instead ([`Ring::reserve`] refuses with
//! [`RingError::Full`]). The ring keeps a bound on its head, the head after
//! every producer reserved for (exact but for prefix producers, which may move
//! fewer rows than their bound), and [`Ring::settle`] tightens it to the
//! published head read back when no producer is in flight.
//!
//! ```
//! use lbm_core::{CpuDriver, Driver};
//! use ring_producer::{Ring, producer_grid_blocks};
//!
//! let mut driver = CpuDriver::new();
//! let mut ring = Ring::new(&mut driver, "out", 1 << 20)?;
//! let src = driver.alloc("src", 100_000)?;
//! let launch = ring.static_launch(src.into(), 100_000)?;
//! assert_eq!(launch.grid[0], producer_grid_blocks(100_000));
//! ring.enqueue(&mut driver, &launch, 0)?;
//! driver.synchronize()?;
//! let control = ring.read_control(&mut driver)?;
//! assert_eq!((control.head, control.sequence), (100_000, 1));
//! let taken = ring.download(&mut driver, 0, control.head)?;
//! assert_eq!(taken.len(), 100_000);
//! # Ok::<(), ring_producer::RingError>(())
//! ```
//!
//! What this crate does not do: run a consumer thread or decide what the
//! engine streams at a save point (the engine's wiring), or choose a ring's
//! capacity.
#![forbid(unsafe_code)]

pub mod fixtures;
mod geometry;
mod record;
mod ring;

use lbm_core::{BufferId, Kernel};
use thiserror::Error;

pub use geometry::{
    PRODUCER_BYTES_PER_BLOCK, PRODUCER_MAX_BLOCKS, PRODUCER_MAX_CHUNKS, legacy_tier_blocks,
    producer_chunked_grid_blocks, producer_grid_blocks,
};
pub use lbm_core::kernels::producer::{
    CONTROL_BYTES, FLAG_BAD_CHUNKS, FLAG_PREFIX_CLAMPED, RECORD_ALIGN, RECORD_HEADER_BYTES, RECORD_MAGIC, RingControl,
    record_bytes,
};
pub use record::{Record, RecordHeader, parse_records};
pub use ring::{Chunk, ChunkTable, Ring, max_bytes};

/// Everything that goes wrong with a ring, its producers and its records.
#[derive(Debug, Error)]
pub enum RingError {
    #[error("chunked producer with {chunks} sources: accepted 1..={max}")]
    ChunkCount { chunks: u32, max: u32 },

    #[error("ring capacity of {capacity} bytes: accepted 1..={max}")]
    Capacity { capacity: u64, max: u64 },

    /// One launch that would move more than the ring holds, overwriting its
    /// own first bytes (a prefix producer counts its upper bound).
    #[error("{producer} producer of {bytes} bytes into a ring of {capacity}: a launch moves at most the capacity")]
    TooLarge {
        producer: &'static str,
        bytes: u128,
        capacity: u64,
    },

    /// Not enough room: the consumer has not taken enough bytes yet.
    #[error("ring full: {requested} bytes requested, {free} of {capacity} free until the consumer takes more")]
    Full { capacity: u64, requested: u64, free: u64 },

    #[error("chunk {chunk} at byte {offset} of {bytes} bytes: accepted inside the {src_bytes}-byte source")]
    ChunkRange {
        chunk: usize,
        offset: u64,
        bytes: u64,
        src_bytes: u64,
    },

    #[error("span [{tail}, {head}) of a {capacity}-byte ring: accepted tail <= head <= tail + capacity")]
    Span { tail: u64, head: u64, capacity: u64 },

    /// The device published more than the host made room for.
    #[error("published head {published} is past the reserved head {reserved}: a producer moved more than was reserved")]
    Overrun { published: u64, reserved: u64 },

    #[error("the launch writes the ring of {found}, not this ring's {expected}")]
    OtherRing { expected: BufferId, found: BufferId },

    #[error("{kernel} is not a ring producer")]
    NotAProducer { kernel: Kernel },

    #[error("{available} bytes where a record header of {needed} bytes was due")]
    HeaderTruncated { needed: u64, available: u64 },

    #[error("record claiming sequence {sequence}: magic {found:#010x}, accepted {expected:#010x} (\"LBMR\")")]
    Magic { sequence: u64, found: u32, expected: u32 },

    #[error("record {sequence}: header check {stored:#018x}, its fields give {computed:#018x}")]
    HeaderCheck { sequence: u64, stored: u64, computed: u64 },

    #[error("record {sequence}: {record_bytes} record bytes for {payload_bytes} payload bytes, accepted {expected}")]
    RecordLength {
        sequence: u64,
        payload_bytes: u64,
        record_bytes: u64,
        expected: u128,
    },

    #[error("record {sequence} of {record_bytes} bytes: only {available} bytes left")]
    RecordTruncated {
        sequence: u64,
        record_bytes: u64,
        available: u64,
    },

    #[error("record {found} where record {expected} was due")]
    Sequence { expected: u64, found: u64 },

    #[error(transparent)]
    Driver(#[from] lbm_core::Error),
}
