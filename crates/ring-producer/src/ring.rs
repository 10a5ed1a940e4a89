//! [`Ring`]: a ring's two device buffers, the typed launch builders of its
//! four producers (each grid from the geometry), the host's flow control, and
//! the reads a consumer makes. [`ChunkTable`]: the device table of a chunked
//! producer, checked on the host before it is uploaded.
//!
//! Nothing here enqueues work unless asked to ([`Ring::enqueue`],
//! [`Ring::reset`]) or waits except in the reads ([`Ring::read_control`],
//! [`Ring::download`]), which wait as `Driver::download` does.

use std::ops::Range;

use lbm_core::kernels::KernelArgs;
use lbm_core::kernels::producer::{
    CHUNK_ENTRY_BYTES, CONTROL_BYTES, CONTROL_TAIL, ProduceChunked, ProducePrefix, ProduceRecord, ProduceStatic,
    RECORD_ALIGN, RECORD_HEADER_BYTES, RingControl, RingTarget, record_bytes,
};
use lbm_core::{BufferId, BufferRef, Driver, Kernel, Launch};

use crate::{PRODUCER_MAX_CHUNKS, RingError, producer_chunked_grid_blocks, producer_grid_blocks};

/// A device ring: its data buffer, its control block, and the host's bound
/// on its head (see the crate documentation for both layouts).
#[derive(Debug)]
pub struct Ring {
    data: BufferId,
    control: BufferId,
    capacity: u64,
    /// The head after every producer reserved for: the published head once
    /// they have all run, or more where a prefix moved fewer rows than its bound.
    reserved_head: u64,
}

impl Ring {
    /// A ring of `capacity` bytes on `driver`: buffers `"{label}.data"` and
    /// `"{label}.control"`, zeroed as every allocation is, so the ring is
    /// empty with head, tail and sequence 0.
    pub fn new<D: Driver + ?Sized>(driver: &mut D, label: &str, capacity: u64) -> Result<Ring, RingError> {
        let bytes = usize::try_from(capacity)
            .ok()
            .filter(|b| *b > 0)
            .ok_or(RingError::Capacity {
                capacity,
                max: usize::MAX as u64,
            })?;
        let data = driver.alloc(&format!("{label}.data"), bytes)?;
        let control = match driver.alloc(&format!("{label}.control"), CONTROL_BYTES) {
            Ok(control) => control,
            Err(e) => {
                // The allocation error is the one to report; the data buffer
                // is released as best it can be.
                let _ = driver.free(data);
                return Err(e.into());
            }
        };
        Ok(Ring {
            data,
            control,
            capacity,
            reserved_head: 0,
        })
    }

    pub fn data(&self) -> BufferId {
        self.data
    }

    pub fn control(&self) -> BufferId {
        self.control
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    fn target(&self) -> RingTarget {
        RingTarget {
            data: self.data.into(),
            control: self.control.into(),
            capacity: self.capacity,
        }
    }

    fn fits(&self, producer: &'static str, bytes: u128) -> Result<(), RingError> {
        match bytes <= u128::from(self.capacity) {
            true => Ok(()),
            false => Err(RingError::TooLarge {
                producer,
                bytes,
                capacity: self.capacity,
            }),
        }
    }

    /// `nbytes` from `src` into the ring, on [`producer_grid_blocks`]`(nbytes)`.
    pub fn static_launch(&self, src: BufferRef, nbytes: u64) -> Result<Launch, RingError> {
        self.fits("static", nbytes.into())?;
        Ok(ProduceStatic {
            src,
            ring: self.target(),
            nbytes,
            blocks: producer_grid_blocks(nbytes),
        }
        .launch())
    }

    /// The first rows of `src`, `row_bytes` each, as many as the u32 at
    /// `row_count` says when the launch runs, at most `max_rows` (more are
    /// clamped and flagged). The grid is sized from the upper bound,
    /// [`producer_grid_blocks`]`(max_rows * row_bytes)`.
    pub fn prefix_launch(
        &self,
        src: BufferRef,
        row_count: BufferRef,
        row_bytes: u64,
        max_rows: u32,
    ) -> Result<Launch, RingError> {
        let bound = u128::from(row_bytes) * u128::from(max_rows);
        self.fits("prefix", bound)?;
        Ok(ProducePrefix {
            src,
            row_count,
            ring: self.target(),
            row_bytes,
            max_rows,
            blocks: producer_grid_blocks(bound as u64),
        }
        .launch())
    }

    /// The chunks of `table`, byte ranges of `src`, back to back, on
    /// [`producer_chunked_grid_blocks`] of their total and count.
    pub fn chunked_launch(&self, src: BufferRef, table: &ChunkTable) -> Result<Launch, RingError> {
        self.fits("chunked", table.total_bytes)?;
        let total_bytes = table.total_bytes as u64;
        let n_chunks = table.chunks.len() as u32;
        Ok(ProduceChunked {
            src,
            chunks: table.buffer.into(),
            ring: self.target(),
            src_bytes: table.src_bytes,
            n_chunks,
            total_bytes,
            blocks: producer_chunked_grid_blocks(total_bytes, n_chunks)?,
        }
        .launch())
    }

    /// One record of `kind` at simulation `step` with `payload_bytes` from
    /// `payload`, on [`producer_grid_blocks`] of the whole record's bytes.
    pub fn record_launch(
        &self,
        payload: BufferRef,
        payload_bytes: u64,
        kind: u32,
        step: u64,
    ) -> Result<Launch, RingError> {
        let total = (u128::from(payload_bytes) + u128::from(RECORD_HEADER_BYTES)).next_multiple_of(RECORD_ALIGN.into());
        self.fits("record", total)?;
        Ok(ProduceRecord {
            payload,
            ring: self.target(),
            payload_bytes,
            kind,
            step,
            blocks: producer_grid_blocks(total as u64),
        }
        .launch())
    }

    /// The head after every producer reserved so far (see [`Ring::reserve`]).
    pub fn reserved_head(&self) -> u64 {
        self.reserved_head
    }

    /// Bytes that can still be reserved while the consumer has taken
    /// everything before `consumed_tail` (at most the reserved head).
    pub fn free_bytes(&self, consumed_tail: u64) -> u64 {
        let unconsumed = self.reserved_head.saturating_sub(consumed_tail);
        self.capacity.saturating_sub(unconsumed)
    }

    /// Whether a producer of up to `bytes` enqueued now could overwrite bytes
    /// the consumer, at `consumed_tail`, has not taken.
    pub fn would_overwrite(&self, bytes: u64, consumed_tail: u64) -> bool {
        bytes > self.free_bytes(consumed_tail)
    }

    /// Makes room for a producer of up to `bytes`, or refuses with
    /// [`RingError::Full`] (the caller waits for the consumer and tries
    /// again; nothing is dropped).
    pub fn reserve(&mut self, bytes: u64, consumed_tail: u64) -> Result<(), RingError> {
        if self.would_overwrite(bytes, consumed_tail) {
            return Err(RingError::Full {
                capacity: self.capacity,
                requested: bytes,
                free: self.free_bytes(consumed_tail),
            });
        }
        self.reserved_head += bytes;
        Ok(())
    }

    /// Takes the published head read back with no producer in flight as the
    /// bound: a prefix producer may have moved fewer rows than it reserved.
    /// A head past the bound means a producer moved more than was reserved,
    /// and is refused.
    pub fn settle(&mut self, published_head: u64) -> Result<(), RingError> {
        if published_head > self.reserved_head {
            return Err(RingError::Overrun {
                published: published_head,
                reserved: self.reserved_head,
            });
        }
        self.reserved_head = published_head;
        Ok(())
    }

    /// Reserves room for `launch`, a producer into this ring (its
    /// [`max_bytes`]), and enqueues it; a launch the driver refuses gives its
    /// room back.
    pub fn enqueue<D: Driver + ?Sized>(
        &mut self,
        driver: &mut D,
        launch: &Launch,
        consumed_tail: u64,
    ) -> Result<(), RingError> {
        let (target, bytes) = produced(launch)?;
        if target.data.id != self.data || target.control.id != self.control {
            return Err(RingError::OtherRing {
                expected: self.data,
                found: target.data.id,
            });
        }
        self.reserve(bytes, consumed_tail)?;
        driver.launch(launch).inspect_err(|_| self.reserved_head -= bytes)?;
        Ok(())
    }

    /// The control block, read back (a download, so it waits for the main stream).
    pub fn read_control<D: Driver + ?Sized>(&self, driver: &mut D) -> Result<RingControl, RingError> {
        let mut bytes = [0u8; CONTROL_BYTES];
        driver.download(self.control, 0, &mut bytes)?;
        Ok(RingControl::from_bytes(&bytes))
    }

    /// Writes the consumer's tail into the control block, for whoever reads
    /// the block whole; no kernel reads it.
    pub fn set_tail<D: Driver + ?Sized>(&self, driver: &mut D, tail: u64) -> Result<(), RingError> {
        driver.upload(self.control, CONTROL_TAIL, &tail.to_le_bytes())?;
        Ok(())
    }

    /// Empties the ring after a producer failed part-way: the control block
    /// goes back to zeros (enqueued, so it lands before any later producer)
    /// and so does the reserved head. The data bytes are left as they are.
    pub fn reset<D: Driver + ?Sized>(&mut self, driver: &mut D) -> Result<(), RingError> {
        driver.memset_async(self.control, 0, CONTROL_BYTES, 0)?;
        self.reserved_head = 0;
        Ok(())
    }

    /// Where the published bytes `[tail, head)` lie in the data buffer: one
    /// range, or two when they wrap at the end (the second is empty otherwise).
    pub fn spans(&self, tail: u64, head: u64) -> Result<[Range<u64>; 2], RingError> {
        let len = head.checked_sub(tail).filter(|len| *len <= self.capacity);
        let len = len.ok_or(RingError::Span {
            tail,
            head,
            capacity: self.capacity,
        })?;
        let from = tail % self.capacity;
        let first = len.min(self.capacity - from);
        Ok([from..from + first, 0..len - first])
    }

    /// The published bytes `[tail, head)` in order, downloaded in one piece or
    /// two at the wrap.
    pub fn download<D: Driver + ?Sized>(&self, driver: &mut D, tail: u64, head: u64) -> Result<Vec<u8>, RingError> {
        let spans = self.spans(tail, head)?;
        let mut out = vec![0u8; (head - tail) as usize];
        let mut at = 0;
        for span in spans.into_iter().filter(|s| !s.is_empty()) {
            let len = (span.end - span.start) as usize;
            driver.download(self.data, span.start as usize, &mut out[at..at + len])?;
            at += len;
        }
        Ok(out)
    }

    /// Frees both buffers, the control block even when freeing the data
    /// buffer fails; the first failure is reported.
    pub fn free<D: Driver + ?Sized>(self, driver: &mut D) -> Result<(), RingError> {
        let data = driver.free(self.data);
        let control = driver.free(self.control);
        data.and(control)?;
        Ok(())
    }
}

/// The ring a producer launch writes and the most bytes it may move.
fn produced(launch: &Launch) -> Result<(RingTarget, u64), RingError> {
    Ok(match launch.kernel {
        Kernel::ProduceStatic => {
            let k = ProduceStatic::decode(launch)?;
            (k.ring, k.nbytes)
        }
        Kernel::ProducePrefix => {
            let k = ProducePrefix::decode(launch)?;
            (k.ring, k.max_bytes().unwrap_or(u64::MAX))
        }
        Kernel::ProduceChunked => {
            let k = ProduceChunked::decode(launch)?;
            (k.ring, k.total_bytes)
        }
        Kernel::ProduceRecord => {
            let k = ProduceRecord::decode(launch)?;
            (k.ring, record_bytes(k.payload_bytes).unwrap_or(u64::MAX))
        }
        kernel => return Err(RingError::NotAProducer { kernel }),
    })
}

/// The most bytes a producer launch may publish: what [`Ring::reserve`]
/// needs for it (a prefix producer's upper bound; a launch a driver would
/// refuse may claim more than any ring holds).
pub fn max_bytes(launch: &Launch) -> Result<u64, RingError> {
    produced(launch).map(|(_, bytes)| bytes)
}

/// One source range of a chunked producer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// Byte offset in the source.
    pub offset: u64,
    pub bytes: u64,
}

/// The device table of a chunked producer: K (offset, bytes) u64 pairs, each
/// a range inside a source of `src_bytes` bytes.
#[derive(Debug)]
pub struct ChunkTable {
    buffer: BufferId,
    src_bytes: u64,
    chunks: Vec<Chunk>,
    /// Exact, so that a sum past a u64 is refused rather than wrapped.
    total_bytes: u128,
}

impl ChunkTable {
    /// Checks `chunks` (1 to 64, each inside `src_bytes`) and uploads them
    /// into a new buffer `label`.
    pub fn new<D: Driver + ?Sized>(
        driver: &mut D,
        label: &str,
        src_bytes: u64,
        chunks: &[Chunk],
    ) -> Result<ChunkTable, RingError> {
        if !(1..=PRODUCER_MAX_CHUNKS as usize).contains(&chunks.len()) {
            return Err(RingError::ChunkCount {
                chunks: chunks.len().try_into().unwrap_or(u32::MAX),
                max: PRODUCER_MAX_CHUNKS,
            });
        }
        for (chunk, c) in chunks.iter().enumerate() {
            if c.offset > src_bytes || c.bytes > src_bytes - c.offset {
                return Err(RingError::ChunkRange {
                    chunk,
                    offset: c.offset,
                    bytes: c.bytes,
                    src_bytes,
                });
            }
        }
        let mut encoded = Vec::with_capacity(chunks.len() * CHUNK_ENTRY_BYTES);
        for c in chunks {
            encoded.extend(c.offset.to_le_bytes());
            encoded.extend(c.bytes.to_le_bytes());
        }
        let buffer = driver.alloc(label, encoded.len())?;
        driver.upload(buffer, 0, &encoded)?;
        Ok(ChunkTable {
            buffer,
            src_bytes,
            chunks: chunks.to_vec(),
            total_bytes: chunks.iter().map(|c| u128::from(c.bytes)).sum(),
        })
    }

    pub fn buffer(&self) -> BufferId {
        self.buffer
    }

    pub fn chunks(&self) -> &[Chunk] {
        &self.chunks
    }

    pub fn src_bytes(&self) -> u64 {
        self.src_bytes
    }

    /// What the chunks add up to: the bytes the producer moves.
    pub fn total_bytes(&self) -> u128 {
        self.total_bytes
    }

    pub fn free<D: Driver + ?Sized>(self, driver: &mut D) -> Result<(), RingError> {
        driver.free(self.buffer)?;
        Ok(())
    }
}
