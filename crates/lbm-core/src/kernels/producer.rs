//! `kernels/producer.cu`: the four ring producers, `produce_static`,
//! `produce_prefix`, `produce_chunked` and `produce_record`, which copy bytes
//! from device buffers into a device ring and publish them. Launch structs,
//! the ring's control block and record header layouts, and the CPU references.
//!
//! # The ring
//!
//! A byte buffer of `capacity` bytes (any size of at least one byte) and a
//! control block of [`CONTROL_BYTES`] in its own buffer, little-endian:
//!
//! | bytes   | field      | written by | meaning |
//! | ------- | ---------- | ---------- | ------- |
//! | 0..8    | `head`     | producers  | bytes ever published (u64, monotonic); the next write lands at `head % capacity` |
//! | 8..16   | `tail`     | the host   | bytes the consumer has taken (u64); no kernel reads it |
//! | 16..24  | `sequence` | producers  | launches published (u64) |
//! | 24..28  | `arrival`  | producers  | blocks of the running launch that have arrived (u32), 0 between launches |
//! | 28..32  | `flags`    | producers  | sticky [`FLAG_PREFIX_CLAMPED`], [`FLAG_BAD_CHUNKS`] (u32); only the host clears them |
//!
//! Positions wrap modulo the capacity, so a capacity need not be a power of
//! two or a multiple of anything; a capacity and sizes that are multiples of
//! 16 keep every copy on the 16-byte path of the kernel, which is faster.
//!
//! # The protocol
//!
//! Every block of a producer copies its share with a grid-stride loop, fences,
//! and signals arrival with one `atomicAdd` on `arrival`; the block that sees
//! `grid - 1` there is the last, and publishes alone: `head += bytes moved`,
//! `sequence += 1`, its flags into `flags`, and `arrival = 0`. Because the
//! counter is back at 0 after each launch, launches of any grid size share it.
//! Every launch publishes, even one that moves nothing (a prefix of 0 rows, a
//! refused chunk table), so `sequence` counts launches.
//!
//! A launch that starts with `arrival` not 0 (one that faulted half-way left
//! it so) does not publish as intended: the CPU reference models what the
//! blocks then do ([`arrive`]); the host resets the control block to recover.
//!
//! What this module does not do: choose grids (the producer geometry of the
//! `ring-producer` crate does, the launch structs carry it), allocate rings,
//! or keep the host from overwriting bytes the consumer has not taken (the
//! host's flow control, also in `ring-producer`; no kernel reads `tail`).

use crate::device::{Arg, BLOCK_THREADS, BufferRef, Kernel, Launch};
use crate::error::{Error, LaunchProblem, Result};

use super::{ArgReader, BufferUse, HostViews, KernelArgs};

/// Byte offset of `head` in the control block.
pub const CONTROL_HEAD: usize = 0;
/// Byte offset of `tail` in the control block.
pub const CONTROL_TAIL: usize = 8;
/// Byte offset of `sequence` in the control block.
pub const CONTROL_SEQUENCE: usize = 16;
/// Byte offset of `arrival` in the control block.
pub const CONTROL_ARRIVAL: usize = 24;
/// Byte offset of `flags` in the control block.
pub const CONTROL_FLAGS: usize = 28;
/// Bytes of the control block.
pub const CONTROL_BYTES: usize = 32;

/// Set when a prefix producer found more rows than its `max_rows` and moved
/// `max_rows` rows: rows were left behind, which the consumer must report.
pub const FLAG_PREFIX_CLAMPED: u32 = 1;
/// Set when a chunked producer's table reached past its source or did not add
/// up to its `total_bytes`; that launch moved nothing.
pub const FLAG_BAD_CHUNKS: u32 = 2;

/// Most sources one chunked producer takes (its table lives in shared memory).
pub const MAX_CHUNKS: u32 = 64;
/// Bytes of one chunk table entry: source byte offset and byte count, u64 each.
pub const CHUNK_ENTRY_BYTES: usize = 16;

/// First word of every record: "LBMR" in memory order.
pub const RECORD_MAGIC: u32 = u32::from_le_bytes(*b"LBMR");
/// Bytes of a record header; the payload follows it.
pub const RECORD_HEADER_BYTES: u64 = 48;
/// A record, header and payload, is padded with zero bytes to a multiple of this.
pub const RECORD_ALIGN: u64 = 16;
/// Byte offsets of the record header's fields: magic (u32), kind (u32),
/// sequence (u64, the control block's `sequence` this record's launch
/// publishes), step (u64), payload bytes (u64), record bytes (u64, header,
/// payload and padding), check (u64, [`header_check`] of the 40 bytes before).
pub const RECORD_KIND_AT: usize = 4;
pub const RECORD_SEQUENCE_AT: usize = 8;
pub const RECORD_STEP_AT: usize = 16;
pub const RECORD_PAYLOAD_AT: usize = 24;
pub const RECORD_BYTES_AT: usize = 32;
pub const RECORD_CHECK_AT: usize = 40;

/// FNV-1a 64 offset basis and prime: the record header check.
pub const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
pub const FNV_PRIME: u64 = 0x0100_0000_01b3;

/// The control block, decoded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingControl {
    pub head: u64,
    pub tail: u64,
    pub sequence: u64,
    pub arrival: u32,
    pub flags: u32,
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("eight bytes"))
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("four bytes"))
}

impl RingControl {
    /// The control block from its first [`CONTROL_BYTES`] bytes.
    ///
    /// # Panics
    /// When `bytes` is shorter than that.
    pub fn from_bytes(bytes: &[u8]) -> RingControl {
        RingControl {
            head: u64_at(bytes, CONTROL_HEAD),
            tail: u64_at(bytes, CONTROL_TAIL),
            sequence: u64_at(bytes, CONTROL_SEQUENCE),
            arrival: u32_at(bytes, CONTROL_ARRIVAL),
            flags: u32_at(bytes, CONTROL_FLAGS),
        }
    }

    pub fn to_bytes(&self) -> [u8; CONTROL_BYTES] {
        let mut out = [0u8; CONTROL_BYTES];
        out[CONTROL_HEAD..CONTROL_HEAD + 8].copy_from_slice(&self.head.to_le_bytes());
        out[CONTROL_TAIL..CONTROL_TAIL + 8].copy_from_slice(&self.tail.to_le_bytes());
        out[CONTROL_SEQUENCE..CONTROL_SEQUENCE + 8].copy_from_slice(&self.sequence.to_le_bytes());
        out[CONTROL_ARRIVAL..CONTROL_ARRIVAL + 4].copy_from_slice(&self.arrival.to_le_bytes());
        out[CONTROL_FLAGS..CONTROL_FLAGS + 4].copy_from_slice(&self.flags.to_le_bytes());
        out
    }
}

/// Bytes of a record with `payload_bytes` of payload: header, payload and
/// padding to [`RECORD_ALIGN`]; `None` where that overflows a u64.
pub fn record_bytes(payload_bytes: u64) -> Option<u64> {
    let unpadded = payload_bytes.checked_add(RECORD_HEADER_BYTES)?;
    unpadded.checked_next_multiple_of(RECORD_ALIGN)
}

/// FNV-1a 64 of the header's first 40 bytes (every field before the check):
/// cheap enough for one device thread, and any single changed byte changes it.
pub fn header_check(fields: &[u8]) -> u64 {
    fields[..RECORD_CHECK_AT]
        .iter()
        .fold(FNV_OFFSET, |hash, b| (hash ^ u64::from(*b)).wrapping_mul(FNV_PRIME))
}

/// The header `produce_record` writes for a record of `kind` at simulation
/// `step` with `payload_bytes` of payload, published as `sequence`. The
/// record's length must fit a u64 (the launch check makes sure).
pub fn record_header(kind: u32, sequence: u64, step: u64, payload_bytes: u64) -> [u8; RECORD_HEADER_BYTES as usize] {
    let mut h = [0u8; RECORD_HEADER_BYTES as usize];
    let total = record_bytes(payload_bytes).expect("the launch check bounds the record");
    h[..4].copy_from_slice(&RECORD_MAGIC.to_le_bytes());
    h[RECORD_KIND_AT..RECORD_KIND_AT + 4].copy_from_slice(&kind.to_le_bytes());
    h[RECORD_SEQUENCE_AT..RECORD_SEQUENCE_AT + 8].copy_from_slice(&sequence.to_le_bytes());
    h[RECORD_STEP_AT..RECORD_STEP_AT + 8].copy_from_slice(&step.to_le_bytes());
    h[RECORD_PAYLOAD_AT..RECORD_PAYLOAD_AT + 8].copy_from_slice(&payload_bytes.to_le_bytes());
    h[RECORD_BYTES_AT..RECORD_BYTES_AT + 8].copy_from_slice(&total.to_le_bytes());
    let check = header_check(&h);
    h[RECORD_CHECK_AT..].copy_from_slice(&check.to_le_bytes());
    h
}

/// The ring a producer writes into: its byte buffer, control block and capacity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingTarget {
    /// `capacity` bytes of ring.
    pub data: BufferRef,
    /// [`CONTROL_BYTES`] of control block, 8-byte aligned.
    pub control: BufferRef,
    pub capacity: u64,
}

impl RingTarget {
    fn push(&self, args: &mut Vec<Arg>) {
        args.extend([self.data.into(), self.control.into(), Arg::U64(self.capacity)]);
    }

    fn read(r: &mut ArgReader) -> Result<RingTarget> {
        Ok(RingTarget {
            data: r.buffer()?,
            control: r.buffer()?,
            capacity: r.u64()?,
        })
    }

    /// Refuses an empty ring and a launch that may move more than the ring
    /// holds (it would overwrite its own first bytes).
    fn check(&self, what: &str, max_bytes: Option<u64>) -> std::result::Result<(), LaunchProblem> {
        if self.capacity == 0 {
            return Err(LaunchProblem::Shape(
                "a ring of capacity 0: a ring holds at least 1 byte".into(),
            ));
        }
        match max_bytes {
            Some(bytes) if bytes <= self.capacity => Ok(()),
            bytes => Err(LaunchProblem::Shape(format!(
                "{what} may move {} bytes, more than the ring's capacity of {}: a launch moves at most the capacity",
                bytes.map_or("over 2^64".into(), |b| b.to_string()),
                self.capacity
            ))),
        }
    }

    fn uses(&self) -> [BufferUse; 2] {
        [
            BufferUse::write("ring", self.data, self.capacity as usize, 1),
            BufferUse::read_write("control", self.control, CONTROL_BYTES, 8),
        ]
    }
}

/// A producer launch: `blocks` one-dimensional blocks of [`BLOCK_THREADS`].
fn producer_launch(kernel: Kernel, blocks: u32, args: Vec<Arg>) -> Launch {
    Launch {
        kernel,
        grid: [blocks, 1, 1],
        block: [BLOCK_THREADS, 1, 1],
        args,
    }
}

/// The grid's block count; producers count arrivals in x only, so a grid or
/// block with a y or z extent is refused.
fn producer_blocks(launch: &Launch) -> Result<u32> {
    if launch.grid[1..] != [1, 1] || launch.block[1..] != [1, 1] {
        return Err(Error::Launch {
            kernel: launch.kernel,
            problem: LaunchProblem::Shape(format!(
                "grid {:?} x block {:?}: producers run one-dimensional grids and blocks",
                launch.grid, launch.block
            )),
        });
    }
    Ok(launch.grid[0])
}

/// `produce_static`: copies `nbytes` from `src` into the ring.
#[derive(Clone, Debug, PartialEq)]
pub struct ProduceStatic {
    pub src: BufferRef,
    pub ring: RingTarget,
    pub nbytes: u64,
    /// The grid; any count of at least 1 copies the same bytes.
    pub blocks: u32,
}

impl KernelArgs for ProduceStatic {
    const KERNEL: Kernel = Kernel::ProduceStatic;
    const PARAMS: &'static [&'static str] = &["src", "ring", "control", "capacity", "nbytes"];

    fn launch(&self) -> Launch {
        let mut args = vec![self.src.into()];
        self.ring.push(&mut args);
        args.push(Arg::U64(self.nbytes));
        producer_launch(Self::KERNEL, self.blocks, args)
    }

    fn decode(launch: &Launch) -> Result<Self> {
        let mut r = ArgReader::new(launch, Self::KERNEL, Self::PARAMS)?;
        Ok(ProduceStatic {
            src: r.buffer()?,
            ring: RingTarget::read(&mut r)?,
            nbytes: r.u64()?,
            blocks: producer_blocks(launch)?,
        })
    }

    /// Grid-stride: one thread covers any number of bytes.
    fn work_items(&self) -> usize {
        1
    }

    fn check_shape(&self) -> std::result::Result<(), LaunchProblem> {
        self.ring.check("a static producer", Some(self.nbytes))
    }

    fn buffer_uses(&self) -> Vec<BufferUse> {
        let mut uses = vec![BufferUse::read("src", self.src, self.nbytes as usize, 1)];
        uses.extend(self.ring.uses());
        uses
    }

    fn run_on_host(&self, views: &mut HostViews) {
        let src = views.reads.get::<u8>("src");
        let (ring, control) = views.writes.get2::<u8>("ring", "control");
        produce_static(self, src, ring, control);
    }
}

/// `produce_prefix`: copies the first `rows` rows of `row_bytes` each from
/// `src`, `rows` read from device memory when the launch runs. More than
/// `max_rows` rows are clamped to `max_rows` and flagged
/// ([`FLAG_PREFIX_CLAMPED`]): moving them would overrun what the host
/// reserved, and leaving the flag lets the consumer say rows were lost.
#[derive(Clone, Debug, PartialEq)]
pub struct ProducePrefix {
    /// At least `max_rows * row_bytes` bytes.
    pub src: BufferRef,
    /// One u32: the row count.
    pub row_count: BufferRef,
    pub ring: RingTarget,
    pub row_bytes: u64,
    pub max_rows: u32,
    pub blocks: u32,
}

impl ProducePrefix {
    /// Bytes of `max_rows` rows, `None` past a u64.
    pub fn max_bytes(&self) -> Option<u64> {
        self.row_bytes.checked_mul(u64::from(self.max_rows))
    }
}

impl KernelArgs for ProducePrefix {
    const KERNEL: Kernel = Kernel::ProducePrefix;
    const PARAMS: &'static [&'static str] = &[
        "src",
        "row_count",
        "ring",
        "control",
        "capacity",
        "row_bytes",
        "max_rows",
    ];

    fn launch(&self) -> Launch {
        let mut args = vec![self.src.into(), self.row_count.into()];
        self.ring.push(&mut args);
        args.extend([Arg::U64(self.row_bytes), Arg::U32(self.max_rows)]);
        producer_launch(Self::KERNEL, self.blocks, args)
    }

    fn decode(launch: &Launch) -> Result<Self> {
        let mut r = ArgReader::new(launch, Self::KERNEL, Self::PARAMS)?;
        Ok(ProducePrefix {
            src: r.buffer()?,
            row_count: r.buffer()?,
            ring: RingTarget::read(&mut r)?,
            row_bytes: r.u64()?,
            max_rows: r.u32()?,
            blocks: producer_blocks(launch)?,
        })
    }

    /// Grid-stride: one thread covers any number of bytes.
    fn work_items(&self) -> usize {
        1
    }

    fn check_shape(&self) -> std::result::Result<(), LaunchProblem> {
        self.ring.check("a prefix producer", self.max_bytes())
    }

    fn buffer_uses(&self) -> Vec<BufferUse> {
        let bytes = self.max_bytes().expect("check_shape bounds it") as usize;
        let mut uses = vec![
            BufferUse::read("src", self.src, bytes, 1),
            BufferUse::read("row_count", self.row_count, 4, 4),
        ];
        uses.extend(self.ring.uses());
        uses
    }

    fn run_on_host(&self, views: &mut HostViews) {
        let src = views.reads.get::<u8>("src");
        let row_count = views.reads.get::<u32>("row_count")[0];
        let (ring, control) = views.writes.get2::<u8>("ring", "control");
        produce_prefix(self, src, row_count, ring, control);
    }
}

/// `produce_chunked`: `n_chunks` byte ranges of one source, listed in a
/// device table of (offset, bytes) u64 pairs, land back to back in the ring.
/// The grid is split evenly among the chunks (`grid / n_chunks` blocks each;
/// with fewer blocks than chunks each block takes every `grid`-th chunk).
/// A table with an entry reaching past `src_bytes` or not adding up to
/// `total_bytes` moves nothing and is flagged ([`FLAG_BAD_CHUNKS`]): the
/// launch check cannot read the table, so the kernel refuses it itself and
/// never reads outside the source it was given.
#[derive(Clone, Debug, PartialEq)]
pub struct ProduceChunked {
    /// `src_bytes` bytes that every chunk lies in.
    pub src: BufferRef,
    /// `n_chunks` entries of [`CHUNK_ENTRY_BYTES`].
    pub chunks: BufferRef,
    pub ring: RingTarget,
    pub src_bytes: u64,
    pub n_chunks: u32,
    /// What the chunks add up to: the bytes the launch moves.
    pub total_bytes: u64,
    pub blocks: u32,
}

impl KernelArgs for ProduceChunked {
    const KERNEL: Kernel = Kernel::ProduceChunked;
    const PARAMS: &'static [&'static str] = &[
        "src",
        "chunks",
        "ring",
        "control",
        "capacity",
        "src_bytes",
        "n_chunks",
        "total_bytes",
    ];

    fn launch(&self) -> Launch {
        let mut args = vec![self.src.into(), self.chunks.into()];
        self.ring.push(&mut args);
        args.extend([
            Arg::U64(self.src_bytes),
            Arg::U32(self.n_chunks),
            Arg::U64(self.total_bytes),
        ]);
        producer_launch(Self::KERNEL, self.blocks, args)
    }

    fn decode(launch: &Launch) -> Result<Self> {
        let mut r = ArgReader::new(launch, Self::KERNEL, Self::PARAMS)?;
        Ok(ProduceChunked {
            src: r.buffer()?,
            chunks: r.buffer()?,
            ring: RingTarget::read(&mut r)?,
            src_bytes: r.u64()?,
            n_chunks: r.u32()?,
            total_bytes: r.u64()?,
            blocks: producer_blocks(launch)?,
        })
    }

    /// Grid-stride: one thread covers any number of bytes and chunks.
    fn work_items(&self) -> usize {
        1
    }

    fn check_shape(&self) -> std::result::Result<(), LaunchProblem> {
        if !(1..=MAX_CHUNKS).contains(&self.n_chunks) {
            return Err(LaunchProblem::Shape(format!(
                "a chunked producer of {} chunks: accepted 1..={MAX_CHUNKS}",
                self.n_chunks
            )));
        }
        self.ring.check("a chunked producer", Some(self.total_bytes))
    }

    fn buffer_uses(&self) -> Vec<BufferUse> {
        let table = self.n_chunks as usize * CHUNK_ENTRY_BYTES;
        let mut uses = vec![
            BufferUse::read("src", self.src, self.src_bytes as usize, 1),
            BufferUse::read("chunks", self.chunks, table, 8),
        ];
        uses.extend(self.ring.uses());
        uses
    }

    fn run_on_host(&self, views: &mut HostViews) {
        let src = views.reads.get::<u8>("src");
        let table = views.reads.get::<u64>("chunks");
        let (ring, control) = views.writes.get2::<u8>("ring", "control");
        produce_chunked(self, src, table, ring, control);
    }
}

/// `produce_record`: one self-describing record, a header (see
/// [`record_header`]; the sequence number is the one this launch publishes,
/// read from the control block on the device) followed by `payload_bytes`
/// from `payload` and zero padding to [`RECORD_ALIGN`].
#[derive(Clone, Debug, PartialEq)]
pub struct ProduceRecord {
    pub payload: BufferRef,
    pub ring: RingTarget,
    pub payload_bytes: u64,
    /// What the payload is, for the consumer; any value.
    pub kind: u32,
    /// The simulation step the payload belongs to.
    pub step: u64,
    pub blocks: u32,
}

impl KernelArgs for ProduceRecord {
    const KERNEL: Kernel = Kernel::ProduceRecord;
    const PARAMS: &'static [&'static str] = &[
        "payload",
        "ring",
        "control",
        "capacity",
        "payload_bytes",
        "kind",
        "step",
    ];

    fn launch(&self) -> Launch {
        let mut args = vec![self.payload.into()];
        self.ring.push(&mut args);
        args.extend([Arg::U64(self.payload_bytes), Arg::U32(self.kind), Arg::U64(self.step)]);
        producer_launch(Self::KERNEL, self.blocks, args)
    }

    fn decode(launch: &Launch) -> Result<Self> {
        let mut r = ArgReader::new(launch, Self::KERNEL, Self::PARAMS)?;
        Ok(ProduceRecord {
            payload: r.buffer()?,
            ring: RingTarget::read(&mut r)?,
            payload_bytes: r.u64()?,
            kind: r.u32()?,
            step: r.u64()?,
            blocks: producer_blocks(launch)?,
        })
    }

    /// Grid-stride: one thread covers any number of bytes.
    fn work_items(&self) -> usize {
        1
    }

    fn check_shape(&self) -> std::result::Result<(), LaunchProblem> {
        self.ring.check("a record producer", record_bytes(self.payload_bytes))
    }

    fn buffer_uses(&self) -> Vec<BufferUse> {
        let mut uses = vec![BufferUse::read("payload", self.payload, self.payload_bytes as usize, 1)];
        uses.extend(self.ring.uses());
        uses
    }

    fn run_on_host(&self, views: &mut HostViews) {
        let payload = views.reads.get::<u8>("payload");
        let (ring, control) = views.writes.get2::<u8>("ring", "control");
        produce_record(self, payload, ring, control);
    }
}

/// Arrival of a launch's `blocks` blocks on `control.arrival`, as the kernel
/// does it: each block adds 1 and the one that sees `blocks - 1` publishes and
/// puts the counter back to 0. From 0 that is the last block, and the counter
/// ends at 0; from a count `c` left behind by a broken launch, the launch
/// publishes after `blocks - c` arrivals (with some copies possibly not yet
/// done on a device) and leaves `c`, or, when `c >= blocks`, never publishes
/// and leaves `c + blocks`. Returns whether the launch publishes.
pub fn arrive(control: &mut RingControl, blocks: u32) -> bool {
    // The block that reads `blocks - 1` comes after `blocks - 1 - c` others
    // when c < blocks (and the remaining c leave c behind); otherwise no
    // block reads it, the counter wrapping included.
    if control.arrival < blocks {
        return true;
    }
    control.arrival = control.arrival.wrapping_add(blocks);
    false
}

/// Copies `data` into `ring` (its capacity) from position `at` (below the
/// capacity), wrapping at the end; `data` is no longer than the ring.
fn write_wrapped(ring: &mut [u8], at: u64, data: &[u8]) {
    let at = at as usize;
    let first = data.len().min(ring.len() - at);
    ring[at..at + first].copy_from_slice(&data[..first]);
    ring[..data.len() - first].copy_from_slice(&data[first..]);
}

/// The arrival of `blocks` blocks and, when it comes, the publication of
/// `bytes` with `flags`, written back to `control`.
fn publish(mut c: RingControl, control: &mut [u8], blocks: u32, bytes: u64, flags: u32) {
    if arrive(&mut c, blocks) {
        c.head = c.head.wrapping_add(bytes);
        c.sequence = c.sequence.wrapping_add(1);
        c.flags |= flags;
    }
    control[..CONTROL_BYTES].copy_from_slice(&c.to_bytes());
}

/// The ring's first `capacity` bytes and the position `head` writes at.
fn ring_at<'a>(ring: &'a mut [u8], target: &RingTarget, head: u64) -> (&'a mut [u8], u64) {
    (&mut ring[..target.capacity as usize], head % target.capacity)
}

/// CPU reference of `produce_static`.
pub fn produce_static(k: &ProduceStatic, src: &[u8], ring: &mut [u8], control: &mut [u8]) {
    let c = RingControl::from_bytes(control);
    let (ring, at) = ring_at(ring, &k.ring, c.head);
    write_wrapped(ring, at, &src[..k.nbytes as usize]);
    publish(c, control, k.blocks, k.nbytes, 0);
}

/// CPU reference of `produce_prefix`; `row_count` is what the device reads.
pub fn produce_prefix(k: &ProducePrefix, src: &[u8], row_count: u32, ring: &mut [u8], control: &mut [u8]) {
    let c = RingControl::from_bytes(control);
    let rows = row_count.min(k.max_rows);
    let flags = if row_count > k.max_rows { FLAG_PREFIX_CLAMPED } else { 0 };
    let bytes = u64::from(rows) * k.row_bytes;
    let (ring, at) = ring_at(ring, &k.ring, c.head);
    write_wrapped(ring, at, &src[..bytes as usize]);
    publish(c, control, k.blocks, bytes, flags);
}

/// Whether the chunk table (`n_chunks` pairs of `table`) lies inside
/// `src_bytes` and adds up to `total_bytes`, summed without overflow.
pub fn chunks_valid(table: &[u64], n_chunks: u32, src_bytes: u64, total_bytes: u64) -> bool {
    let mut sum = 0u64;
    for entry in table[..2 * n_chunks as usize].chunks_exact(2) {
        let (offset, bytes) = (entry[0], entry[1]);
        if offset > src_bytes || bytes > src_bytes - offset || bytes > total_bytes - sum {
            return false;
        }
        sum += bytes;
    }
    sum == total_bytes
}

/// CPU reference of `produce_chunked`; `table` holds the u64 pairs.
pub fn produce_chunked(k: &ProduceChunked, src: &[u8], table: &[u64], ring: &mut [u8], control: &mut [u8]) {
    let c = RingControl::from_bytes(control);
    if !chunks_valid(table, k.n_chunks, k.src_bytes, k.total_bytes) {
        publish(c, control, k.blocks, 0, FLAG_BAD_CHUNKS);
        return;
    }
    let (ring, at) = ring_at(ring, &k.ring, c.head);
    let mut moved = 0u64;
    for entry in table[..2 * k.n_chunks as usize].chunks_exact(2) {
        let (offset, bytes) = (entry[0] as usize, entry[1] as usize);
        write_wrapped(ring, (at + moved) % k.ring.capacity, &src[offset..offset + bytes]);
        moved += bytes as u64;
    }
    publish(c, control, k.blocks, k.total_bytes, 0);
}

/// CPU reference of `produce_record`.
pub fn produce_record(k: &ProduceRecord, payload: &[u8], ring: &mut [u8], control: &mut [u8]) {
    let c = RingControl::from_bytes(control);
    let total = record_bytes(k.payload_bytes).expect("the launch check bounds the record");
    let header = record_header(k.kind, c.sequence.wrapping_add(1), k.step, k.payload_bytes);
    let padding = [0u8; RECORD_ALIGN as usize];
    let pad = (total - RECORD_HEADER_BYTES - k.payload_bytes) as usize;
    let capacity = k.ring.capacity;
    let (ring, at) = ring_at(ring, &k.ring, c.head);
    write_wrapped(ring, at, &header);
    let payload_at = (at + RECORD_HEADER_BYTES) % capacity;
    write_wrapped(ring, payload_at, &payload[..k.payload_bytes as usize]);
    write_wrapped(ring, (payload_at + k.payload_bytes) % capacity, &padding[..pad]);
    publish(c, control, k.blocks, total, 0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrival_from_zero_publishes_once_and_ends_at_zero() {
        for blocks in [1, 2, 7, 264, u32::MAX] {
            let mut c = RingControl::default();
            assert!(arrive(&mut c, blocks), "{blocks} blocks");
            assert_eq!(c.arrival, 0, "{blocks} blocks");
        }
    }

    #[test]
    fn a_count_left_behind_publishes_early_or_never() {
        for (left, blocks, publishes, after) in [
            (2, 5, true, 2),
            (4, 5, true, 4),
            (5, 5, false, 10),
            (1000, 3, false, 1003),
            (u32::MAX, 2, false, 1),
        ] {
            let mut c = RingControl {
                arrival: left,
                ..RingControl::default()
            };
            assert_eq!(arrive(&mut c, blocks), publishes, "{left} left, {blocks} blocks");
            assert_eq!(c.arrival, after, "{left} left, {blocks} blocks");
        }
    }

    #[test]
    fn the_control_block_round_trips_its_fields_at_their_offsets() {
        let c = RingControl {
            head: 0x0102_0304_0506_0708,
            tail: 9,
            sequence: 1 << 40,
            arrival: 3,
            flags: FLAG_BAD_CHUNKS,
        };
        let bytes = c.to_bytes();
        assert_eq!(bytes[CONTROL_HEAD], 0x08);
        assert_eq!(bytes[CONTROL_TAIL], 9);
        assert_eq!(bytes[CONTROL_SEQUENCE + 5], 1);
        assert_eq!(bytes[CONTROL_ARRIVAL], 3);
        assert_eq!(bytes[CONTROL_FLAGS], 2);
        assert_eq!(RingControl::from_bytes(&bytes), c);
    }

    #[test]
    fn records_are_padded_to_sixteen_bytes() {
        for (payload, total) in [(0, 48), (1, 64), (16, 64), (17, 80), (u64::MAX - 63, u64::MAX - 15)] {
            assert_eq!(record_bytes(payload), Some(total), "{payload} payload bytes");
        }
        assert_eq!(record_bytes(u64::MAX - 47), None);
        assert_eq!(record_bytes(u64::MAX - 62), None);
    }

    #[test]
    fn the_header_check_covers_every_field() {
        let h = record_header(3, 7, 1000, 17);
        assert_eq!(&h[..4], b"LBMR");
        assert_eq!(u64_at(&h, RECORD_BYTES_AT), 80);
        assert_eq!(u64_at(&h, RECORD_CHECK_AT), header_check(&h));
        for at in 0..RECORD_CHECK_AT {
            let mut spoiled = h;
            spoiled[at] ^= 0x10;
            assert_ne!(header_check(&spoiled), header_check(&h), "byte {at}");
        }
    }

    #[test]
    fn chunk_tables_outside_the_source_or_off_the_total_are_invalid() {
        for (table, valid) in [
            (vec![0, 10, 10, 5], true),
            (vec![0, 0, 5, 15], true),
            (vec![0, 10, 10, 6], false),
            (vec![0, 10, 10, 4], false),
            (vec![21, 0, 0, 15], false),
            (vec![u64::MAX, 2, 0, 13], false),
            (vec![0, 15, 5, u64::MAX], false),
        ] {
            assert_eq!(chunks_valid(&table, 2, 20, 15), valid, "{table:?}");
        }
    }
}
