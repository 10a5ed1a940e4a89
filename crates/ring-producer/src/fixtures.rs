//! Producer cases that every backend runs: a ring, the control block it
//! starts from (poisoned data around it), and producer launches in order;
//! with what each launch must leave, worked out on the host byte by byte
//! ([`ProducerCase::expected`], written from the contract apart from the CPU
//! reference). This crate's CPU tests hold `CpuDriver` to it; lbm-cuda's GPU
//! tests hold the device to `CpuDriver` and to it.
//!
//! Nothing here is used by a run.

use lbm_core::{BufferRef, Driver, Launch};

use crate::{
    Chunk, ChunkTable, PRODUCER_BYTES_PER_BLOCK, Ring, RingControl, RingError, producer_chunked_grid_blocks,
    producer_grid_blocks, record_bytes,
};
use lbm_core::kernels::producer::{FLAG_BAD_CHUNKS, FLAG_PREFIX_CLAMPED, record_header};

/// One producer launch of a case.
#[derive(Clone, Debug)]
pub enum Step {
    /// `nbytes` from a source that starts `src_offset` bytes into its buffer.
    Static {
        nbytes: u64,
        src_offset: u64,
    },
    /// `rows` rows in device memory when the launch runs, of `row_bytes`
    /// each, at most `max_rows`.
    Prefix {
        rows: u32,
        row_bytes: u64,
        max_rows: u32,
    },
    /// `chunks` of a `src_bytes` source. With `spoil`, the table's last entry
    /// is overwritten on the device after the launch is built with one
    /// reaching a byte past the source, as corrupted memory would be.
    Chunked {
        src_bytes: u64,
        chunks: Vec<Chunk>,
        spoil: bool,
    },
    Record {
        payload_bytes: u64,
        kind: u32,
        step: u64,
    },
}

/// A ring, its starting control block and the launches run on it in order.
#[derive(Clone, Debug)]
pub struct ProducerCase {
    pub name: &'static str,
    pub capacity: u64,
    pub start: RingControl,
    pub steps: Vec<Step>,
}

/// What one launch of a case left: the launch, the control block, and the
/// whole data buffer.
#[derive(Clone, Debug)]
pub struct Produced {
    pub launch: Launch,
    pub control: RingControl,
    pub data: Vec<u8>,
}

/// Deterministic bytes of stream `seed`: the ring's poison is stream 0, the
/// source of step k stream k + 1.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| {
            // splitmix64 of (seed, i): neighbouring bytes and streams differ.
            let mut z = ((seed << 40) ^ i).wrapping_add(0x9E37_79B9_7F4A_7C15);
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            (z ^ (z >> 31)) as u8
        })
        .collect()
}

fn at(head: u64) -> RingControl {
    RingControl {
        head,
        tail: head,
        ..RingControl::default()
    }
}

fn statics(sizes: &[u64]) -> Vec<Step> {
    sizes
        .iter()
        .enumerate()
        .map(|(k, &nbytes)| Step::Static {
            nbytes,
            // Sources at 0, 3 and 16 bytes into their buffers.
            src_offset: [0, 3, 16][k % 3],
        })
        .collect()
}

fn chunks(pairs: &[(u64, u64)]) -> Vec<Chunk> {
    pairs.iter().map(|&(offset, bytes)| Chunk { offset, bytes }).collect()
}

/// The matrix: static copies at the 16 KiB boundaries, wrapping at the
/// ring's end, on the widest grid and past a 2^32 head; prefixes of 0, 1 and
/// a few rows under a large bound, and one over it; 1, 3, 7 and 64 chunks and
/// a spoiled table; records whose header straddles the end; mixed grid sizes
/// on one counter; and a counter a broken launch left behind.
pub fn producer_cases() -> Vec<ProducerCase> {
    const B: u64 = PRODUCER_BYTES_PER_BLOCK;
    const KIB: u64 = 1024;
    let many: Vec<(u64, u64)> = (0..64).map(|i| (i * 2203 % 100_000, i * 131 % 1500)).collect();
    vec![
        ProducerCase {
            name: "static copies at the 16 KiB boundaries",
            capacity: 400_009,
            start: at(0),
            steps: statics(&[0, 1, B - 1, B, B + 1, 2 * B + 1, 64 * KIB - 1, 64 * KIB + 1]),
        },
        ProducerCase {
            name: "static copies wrapping at the ring's end",
            capacity: 100_000,
            start: at(7 * 100_000 + 99_000),
            steps: statics(&[5000, 100_000, 1]),
        },
        ProducerCase {
            name: "a static copy on the widest grid, 16-byte words, wrapping",
            capacity: 264 * B + 1024,
            start: at(264 * B),
            steps: vec![
                Step::Static {
                    nbytes: 264 * B + 16,
                    src_offset: 0,
                },
                Step::Static {
                    nbytes: 48,
                    src_offset: 16,
                },
            ],
        },
        ProducerCase {
            name: "a head past 2^32",
            capacity: 1_000_003,
            start: RingControl {
                sequence: u64::from(u32::MAX),
                ..at((1 << 34) + 5)
            },
            steps: vec![
                Step::Static {
                    nbytes: B + 1,
                    src_offset: 0,
                },
                Step::Record {
                    payload_bytes: 100,
                    kind: 1,
                    step: 1 << 33,
                },
            ],
        },
        ProducerCase {
            name: "prefix rows under a large upper bound",
            capacity: 262_151,
            start: at(262_151 - 10),
            steps: [0, 1, 3, 10_000, 12_345]
                .into_iter()
                .map(|rows| Step::Prefix {
                    rows,
                    row_bytes: 24,
                    max_rows: 10_000,
                })
                .collect(),
        },
        ProducerCase {
            name: "chunked in 1, 3 and 64 chunks, and a spoiled table",
            capacity: 200_003,
            start: at(150_000),
            steps: vec![
                Step::Chunked {
                    src_bytes: 150_000,
                    chunks: chunks(&[(5, 40_000)]),
                    spoil: false,
                },
                Step::Chunked {
                    src_bytes: 150_000,
                    chunks: chunks(&[(0, 1), (100, 17_000), (60_000, 0)]),
                    spoil: false,
                },
                Step::Chunked {
                    src_bytes: 150_000,
                    chunks: chunks(&many),
                    spoil: false,
                },
                Step::Chunked {
                    src_bytes: 150_000,
                    chunks: chunks(&[(0, 10), (20, 30), (7, 7)]),
                    spoil: true,
                },
                Step::Chunked {
                    src_bytes: 150_000,
                    chunks: chunks(&[(149_999, 1)]),
                    spoil: false,
                },
            ],
        },
        ProducerCase {
            name: "records with a header across the ring's end",
            capacity: 4096 + 48,
            start: RingControl {
                sequence: 41,
                ..at(4096 + 48 - 20)
            },
            steps: [0, 1, 17, 3000, 4096 - 48]
                .into_iter()
                .enumerate()
                .map(|(k, payload_bytes)| Step::Record {
                    payload_bytes,
                    kind: 7 + k as u32,
                    step: 1000 * k as u64,
                })
                .collect(),
        },
        ProducerCase {
            name: "mixed grid sizes sharing one counter",
            capacity: 5 << 20,
            start: at(0),
            steps: vec![
                Step::Static {
                    nbytes: 1,
                    src_offset: 0,
                },
                Step::Static {
                    nbytes: 264 * B,
                    src_offset: 0,
                },
                Step::Chunked {
                    src_bytes: 800_000,
                    chunks: chunks(&[(0, 100_000), (100_000, 300_000), (50, 300_000)]),
                    spoil: false,
                },
                Step::Record {
                    payload_bytes: 100_000,
                    kind: 3,
                    step: 77,
                },
                Step::Prefix {
                    rows: 3,
                    row_bytes: 512,
                    max_rows: 1000,
                },
                Step::Static {
                    nbytes: 17 * B,
                    src_offset: 3,
                },
            ],
        },
        ProducerCase {
            name: "a counter left behind by a broken launch",
            capacity: 1000,
            start: RingControl {
                arrival: 1000,
                ..at(10)
            },
            steps: statics(&[100, 100]),
        },
    ]
}

/// The grid a step's launch gets from the geometry.
fn blocks(step: &Step) -> u32 {
    match step {
        Step::Static { nbytes, .. } => producer_grid_blocks(*nbytes),
        Step::Prefix {
            row_bytes, max_rows, ..
        } => producer_grid_blocks(row_bytes * u64::from(*max_rows)),
        Step::Chunked { chunks, .. } => {
            let total = chunks.iter().map(|c| c.bytes).sum();
            producer_chunked_grid_blocks(total, chunks.len() as u32).expect("cases have 1 to 64 chunks")
        }
        Step::Record { payload_bytes, .. } => producer_grid_blocks(record_bytes(*payload_bytes).expect("small")),
    }
}

impl ProducerCase {
    /// Runs the case on `driver`: the ring poisoned with [`pattern`] 0 and
    /// its control block set to `start`, then each step's launch, waited
    /// for and read back whole. Buffers are allocated in the same order on
    /// every driver, so the same case gives the same launches everywhere.
    pub fn run<D: Driver + ?Sized>(&self, driver: &mut D) -> Result<Vec<Produced>, RingError> {
        let ring = Ring::new(driver, "ring", self.capacity)?;
        driver.upload(ring.data(), 0, &pattern(0, self.capacity as usize))?;
        driver.upload(ring.control(), 0, &self.start.to_bytes())?;
        let mut out = Vec::with_capacity(self.steps.len());
        for (k, step) in self.steps.iter().enumerate() {
            let source = |driver: &mut D, label: &str, offset: u64, bytes: u64| -> Result<_, RingError> {
                let id = driver.alloc(label, (offset + bytes) as usize)?;
                driver.upload(id, offset as usize, &pattern(k as u64 + 1, bytes as usize))?;
                Ok(id)
            };
            let mut buffers = Vec::new();
            let launch = match step {
                Step::Static { nbytes, src_offset } => {
                    let src = source(driver, "src", *src_offset, *nbytes)?;
                    buffers.push(src);
                    let at = BufferRef {
                        id: src,
                        byte_offset: *src_offset,
                    };
                    ring.static_launch(at, *nbytes)?
                }
                Step::Prefix {
                    rows,
                    row_bytes,
                    max_rows,
                } => {
                    let src = source(driver, "rows", 0, row_bytes * u64::from(*max_rows))?;
                    let count = driver.alloc("row_count", 4)?;
                    driver.upload(count, 0, &rows.to_le_bytes())?;
                    buffers.extend([src, count]);
                    ring.prefix_launch(src.into(), count.into(), *row_bytes, *max_rows)?
                }
                Step::Chunked {
                    src_bytes,
                    chunks,
                    spoil,
                } => {
                    let src = source(driver, "src", 0, *src_bytes)?;
                    let table = ChunkTable::new(driver, "chunks", *src_bytes, chunks)?;
                    buffers.extend([src, table.buffer()]);
                    let launch = ring.chunked_launch(src.into(), &table)?;
                    if *spoil {
                        let last = (chunks.len() - 1) * 16;
                        let entry: Vec<u8> = [*src_bytes, 1].iter().flat_map(|v| v.to_le_bytes()).collect();
                        driver.upload(table.buffer(), last, &entry)?;
                    }
                    launch
                }
                Step::Record {
                    payload_bytes,
                    kind,
                    step,
                } => {
                    let payload = source(driver, "payload", 0, *payload_bytes)?;
                    buffers.push(payload);
                    ring.record_launch(payload.into(), *payload_bytes, *kind, *step)?
                }
            };
            driver.launch(&launch)?;
            driver.synchronize()?;
            let control = ring.read_control(driver)?;
            let mut data = vec![0u8; self.capacity as usize];
            driver.download(ring.data(), 0, &mut data)?;
            for id in buffers {
                driver.free(id)?;
            }
            out.push(Produced { launch, control, data });
        }
        ring.free(driver)?;
        Ok(out)
    }

    /// What each step must leave (control block and data), from the
    /// contract: the bytes moved land one by one at `(head + i) % capacity`,
    /// and the launch publishes when the arrival counter it finds is below
    /// its block count (else the counter grows by the block count).
    pub fn expected(&self) -> Vec<(RingControl, Vec<u8>)> {
        let capacity = self.capacity;
        let mut data = pattern(0, capacity as usize);
        let mut c = self.start;
        let mut out = Vec::with_capacity(self.steps.len());
        for (k, step) in self.steps.iter().enumerate() {
            let seed = k as u64 + 1;
            let (moved, flags): (Vec<u8>, u32) = match step {
                Step::Static { nbytes, .. } => (pattern(seed, *nbytes as usize), 0),
                Step::Prefix {
                    rows,
                    row_bytes,
                    max_rows,
                } => {
                    let src = pattern(seed, (row_bytes * u64::from(*max_rows)) as usize);
                    let taken = (*rows).min(*max_rows) as usize * *row_bytes as usize;
                    let flags = if rows > max_rows { FLAG_PREFIX_CLAMPED } else { 0 };
                    (src[..taken].to_vec(), flags)
                }
                Step::Chunked {
                    src_bytes,
                    chunks,
                    spoil,
                } => {
                    let src = pattern(seed, *src_bytes as usize);
                    match spoil {
                        true => (Vec::new(), FLAG_BAD_CHUNKS),
                        false => (
                            chunks
                                .iter()
                                .flat_map(|c| &src[c.offset as usize..(c.offset + c.bytes) as usize])
                                .copied()
                                .collect(),
                            0,
                        ),
                    }
                }
                Step::Record {
                    payload_bytes,
                    kind,
                    step,
                } => {
                    let mut record = record_header(*kind, c.sequence + 1, *step, *payload_bytes).to_vec();
                    record.extend(pattern(seed, *payload_bytes as usize));
                    record.resize(record_bytes(*payload_bytes).expect("small") as usize, 0);
                    (record, 0)
                }
            };
            for (i, byte) in moved.iter().enumerate() {
                data[((c.head + i as u64) % capacity) as usize] = *byte;
            }
            let grid = blocks(step);
            if c.arrival < grid {
                c.head += moved.len() as u64;
                c.sequence += 1;
                c.flags |= flags;
            } else {
                c.arrival += grid;
            }
            out.push((c, data.clone()));
        }
        out
    }
}
