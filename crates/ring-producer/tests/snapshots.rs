//! Launch logs of each producer kind at boundary sizes, recorded by the mock
//! driver (which checks each launch as every driver does): the grids the
//! geometry gives and every argument by name. Review changes with
//! `cargo insta review`; nothing updates them on its own.

use lbm_core::{BufferRef, Driver};
use mock_driver::MockDriver;
use ring_producer::{Chunk, ChunkTable, PRODUCER_BYTES_PER_BLOCK, Ring};

const B: u64 = PRODUCER_BYTES_PER_BLOCK;

/// A mock with a ring of 264 blocks' bytes plus 16 and a source of as many
/// bytes; `launches` builds what to log after the setup, whose events are
/// left out.
fn log_of(launches: impl FnOnce(&mut MockDriver, &Ring, BufferRef) -> Vec<lbm_core::Launch>) -> String {
    let mut driver = MockDriver::new();
    let handle = driver.handle();
    let ring = Ring::new(&mut driver, "ring", 264 * B + 16).unwrap();
    let src = driver.alloc("src", (264 * B + 16) as usize).unwrap();
    let launches = launches(&mut driver, &ring, src.into());
    handle.clear_log();
    for launch in &launches {
        driver.launch(launch).unwrap();
    }
    handle.render()
}

#[test]
fn static_producers_at_boundary_sizes() {
    let log = log_of(|_, ring, src| {
        [0, 1, B, B + 1, 64 * 1024, 64 * 1024 + 1, 4 << 20, 264 * B, 264 * B + 1]
            .into_iter()
            .map(|n| ring.static_launch(src, n).unwrap())
            .collect()
    });
    insta::assert_snapshot!(log);
}

#[test]
fn prefix_producers_are_sized_by_their_bound() {
    let log = log_of(|driver, ring, src| {
        let count = BufferRef::from(driver.alloc("row_count", 4).unwrap());
        [
            (4096, 0),
            (4096, 4),
            (4096, 5),
            (24, 10_000),
            (4096, 1056),
            (1, 264 * 16384 + 16),
        ]
        .into_iter()
        .map(|(row_bytes, max_rows)| ring.prefix_launch(src, count, row_bytes, max_rows).unwrap())
        .collect()
    });
    insta::assert_snapshot!(log);
}

#[test]
fn chunked_producers_split_their_grid_evenly() {
    let log = log_of(|driver, ring, src| {
        let src_bytes = 264 * B + 16;
        let mut table = |chunks: u64, bytes: u64| {
            let chunks: Vec<Chunk> = (0..chunks)
                .map(|k| Chunk {
                    offset: k * bytes,
                    bytes,
                })
                .collect();
            ChunkTable::new(driver, "chunks", src_bytes, &chunks).unwrap()
        };
        [
            (1, 1),
            (3, 1),
            (3, B),
            (7, 10 * B),
            (64, 1),
            (64, 4 * B + 1),
            (5, 52 * B + 1),
        ]
        .into_iter()
        .map(|(chunks, bytes)| ring.chunked_launch(src, &table(chunks, bytes)).unwrap())
        .collect()
    });
    insta::assert_snapshot!(log);
}

#[test]
fn record_producers_count_their_header_and_padding() {
    let log = log_of(|_, ring, src| {
        [(0, 0), (B - 48, 1), (B - 47, 2), (264 * B - 48, 3)]
            .into_iter()
            .map(|(payload_bytes, step)| ring.record_launch(src, payload_bytes, 5, step).unwrap())
            .collect()
    });
    insta::assert_snapshot!(log);
}
