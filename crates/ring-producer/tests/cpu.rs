//! The producers on the CPU backend: every case of `ring_producer::fixtures`
//! against its byte-by-byte expectation, the properties each case is there
//! for, records read back and refused, flow control, and the launch
//! builders' refusals. Rings start poisoned ([`fixtures::pattern`]), never
//! zeroed.

use lbm_core::{CpuDriver, Driver, Kernel};
use ring_producer::fixtures::{Produced, ProducerCase, pattern, producer_cases};
use ring_producer::{
    Chunk, ChunkTable, FLAG_BAD_CHUNKS, FLAG_PREFIX_CLAMPED, Ring, RingControl, RingError, max_bytes, parse_records,
};

fn case(name: &str) -> ProducerCase {
    producer_cases()
        .into_iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no case {name:?}"))
}

/// Runs `case` on the CPU and checks every step against the expectation;
/// returns what each step left.
fn check(case: &ProducerCase) -> Vec<Produced> {
    let produced = case.run(&mut CpuDriver::new()).unwrap();
    let expected = case.expected();
    assert_eq!(produced.len(), case.steps.len());
    for (k, (got, (control, data))) in produced.iter().zip(&expected).enumerate() {
        let what = format!("{}, step {k} ({:?})", case.name, case.steps[k]);
        assert_eq!(got.control, *control, "{what}: control block");
        if let Some(at) = got.data.iter().zip(data).position(|(g, w)| g != w) {
            panic!("{what}: ring byte {at} is {}, expected {}", got.data[at], data[at]);
        }
    }
    produced
}

fn controls(produced: &[Produced]) -> Vec<RingControl> {
    produced.iter().map(|p| p.control).collect()
}

#[test]
fn every_case_matches_its_expectation() {
    for case in producer_cases() {
        check(&case);
    }
}

#[test]
fn static_copies_at_the_16_kib_boundaries_publish_their_sizes() {
    let c = case("static copies at the 16 KiB boundaries");
    let produced = check(&c);
    let heads: Vec<u64> = controls(&produced).iter().map(|c| c.head).collect();
    let sizes = [0, 1, 16383, 16384, 16385, 32769, 65535, 65537];
    let mut head = 0;
    for (k, size) in sizes.iter().enumerate() {
        head += size;
        assert_eq!(heads[k], head, "after {size} bytes");
    }
    let grids: Vec<u32> = produced.iter().map(|p| p.launch.grid[0]).collect();
    assert_eq!(grids, [1, 1, 1, 1, 2, 3, 4, 5]);
}

#[test]
fn a_copy_wraps_at_the_ring_end() {
    let c = case("static copies wrapping at the ring's end");
    let produced = check(&c);
    // 5000 bytes from position 99 000 of 100 000: 1000 at the end, 4000 from the start.
    let src = pattern(1, 5000);
    let data = &produced[0].data;
    assert_eq!(&data[99_000..], &src[..1000]);
    assert_eq!(&data[..4000], &src[1000..]);
    assert_eq!(
        &data[4000..99_000],
        &pattern(0, 100_000)[4000..99_000],
        "the rest is untouched"
    );
    // A copy of exactly the capacity overwrites all of it, from position 4000.
    let whole = pattern(2, 100_000);
    assert_eq!(&produced[1].data[4000..], &whole[..96_000]);
    assert_eq!(&produced[1].data[..4000], &whole[96_000..]);
    assert_eq!(produced[2].control.head, 799_000 + 5000 + 100_000 + 1);
}

#[test]
fn a_prefix_moves_the_rows_found_and_flags_a_count_over_the_bound() {
    let produced = check(&case("prefix rows under a large upper bound"));
    let c = controls(&produced);
    let start = 262_151 - 10;
    let moved: Vec<u64> = c.iter().map(|c| c.head - start).collect();
    assert_eq!(moved, [0, 24, 24 + 72, 96 + 240_000, 96 + 480_000]);
    assert_eq!(c.iter().map(|c| c.sequence).collect::<Vec<_>>(), [1, 2, 3, 4, 5]);
    let flags: Vec<u32> = c.iter().map(|c| c.flags).collect();
    assert_eq!(flags, [0, 0, 0, 0, FLAG_PREFIX_CLAMPED]);
    // Every launch gets the grid of the bound, whatever the rows.
    assert!(produced.iter().all(|p| p.launch.grid[0] == 15));
    // Zero rows publish nothing but still count.
    assert_eq!(produced[0].data, pattern(0, 262_151));
}

#[test]
fn chunks_land_back_to_back_and_a_spoiled_table_moves_nothing() {
    let produced = check(&case("chunked in 1, 3 and 64 chunks, and a spoiled table"));
    let c = controls(&produced);
    let heads: Vec<u64> = c.iter().map(|c| c.head - 150_000).collect();
    let many: u64 = (0..64).map(|i| i * 131 % 1500).sum();
    let after_64 = 40_000 + 17_001 + many;
    assert_eq!(heads, [40_000, 40_000 + 17_001, after_64, after_64, after_64 + 1]);
    assert_eq!(c.iter().map(|c| c.sequence).collect::<Vec<_>>(), [1, 2, 3, 4, 5]);
    let bad = FLAG_BAD_CHUNKS;
    assert_eq!(c.iter().map(|c| c.flags).collect::<Vec<_>>(), [0, 0, 0, bad, bad]);
    assert_eq!(produced[3].data, produced[2].data, "the spoiled table moved bytes");
    let grids: Vec<u32> = produced.iter().map(|p| p.launch.grid[0]).collect();
    assert_eq!(grids, [3, 3, 64, 3, 1]);
}

#[test]
fn launches_of_mixed_grids_share_one_counter() {
    let produced = check(&case("mixed grid sizes sharing one counter"));
    let grids: Vec<u32> = produced.iter().map(|p| p.launch.grid[0]).collect();
    assert_eq!(grids, [1, 264, 45, 7, 32, 17]);
    for (k, c) in controls(&produced).iter().enumerate() {
        assert_eq!(
            (c.arrival, c.sequence, c.flags),
            (0, k as u64 + 1, 0),
            "after launch {k}"
        );
    }
}

#[test]
fn a_counter_left_behind_keeps_launches_from_publishing_until_reset() {
    let produced = check(&case("a counter left behind by a broken launch"));
    let c = controls(&produced);
    assert_eq!(
        c.iter().map(|c| (c.head, c.sequence, c.arrival)).collect::<Vec<_>>(),
        [(10, 0, 1001), (10, 0, 1002)]
    );
    // A reset control block publishes again.
    let mut driver = CpuDriver::new();
    let mut ring = Ring::new(&mut driver, "ring", 1000).unwrap();
    driver
        .upload(ring.control(), 0, &RingControl { arrival: 7, ..c[1] }.to_bytes())
        .unwrap();
    let src = driver.alloc("src", 100).unwrap();
    let launch = ring.static_launch(src.into(), 100).unwrap();
    driver.launch(&launch).unwrap();
    assert_eq!(ring.read_control(&mut driver).unwrap().sequence, 0);
    ring.reset(&mut driver).unwrap();
    ring.enqueue(&mut driver, &launch, 0).unwrap();
    let after = ring.read_control(&mut driver).unwrap();
    assert_eq!((after.head, after.sequence, after.arrival), (100, 1, 0));
}

/// Records of payloads 0, 1, 17 and 3000 bytes into a ring of 4144 bytes
/// that starts 20 bytes before its end; returns the driver, ring and the
/// published span's bytes.
fn records() -> (CpuDriver, Ring, RingControl) {
    let mut driver = CpuDriver::new();
    let ring = Ring::new(&mut driver, "records", 4144).unwrap();
    driver.upload(ring.data(), 0, &pattern(0, 4144)).unwrap();
    let start = RingControl {
        head: 4124,
        tail: 4124,
        sequence: 41,
        ..RingControl::default()
    };
    driver.upload(ring.control(), 0, &start.to_bytes()).unwrap();
    for (k, payload_bytes) in [0u64, 1, 17, 3000].into_iter().enumerate() {
        let payload = driver.alloc("payload", payload_bytes as usize).unwrap();
        driver
            .upload(payload, 0, &pattern(k as u64 + 1, payload_bytes as usize))
            .unwrap();
        let launch = ring
            .record_launch(payload.into(), payload_bytes, 7, 1000 * k as u64)
            .unwrap();
        driver.launch(&launch).unwrap();
    }
    let control = ring.read_control(&mut driver).unwrap();
    (driver, ring, control)
}

#[test]
fn records_read_back_in_two_pieces_at_the_wrap_and_check() {
    let (mut driver, ring, c) = records();
    assert_eq!((c.head - 4124, c.sequence), (48 + 64 + 80 + 3056, 45));
    let spans = ring.spans(4124, c.head).unwrap();
    assert_eq!(spans, [4124..4144, 0..48 + 64 + 80 + 3056 - 20]);
    let bytes = ring.download(&mut driver, 4124, c.head).unwrap();
    let records = parse_records(&bytes, 42).unwrap();
    let got: Vec<(u64, u64, usize)> = records
        .iter()
        .map(|r| (r.header.sequence, r.header.step, r.payload.len()))
        .collect();
    assert_eq!(got, [(42, 0, 0), (43, 1000, 1), (44, 2000, 17), (45, 3000, 3000)]);
    for (k, r) in records.iter().enumerate() {
        assert_eq!(r.payload, pattern(k as u64 + 1, r.payload.len()), "record {k}");
    }
}

#[test]
fn a_corrupted_record_header_is_refused_with_its_sequence_number() {
    let (mut driver, ring, c) = records();
    // Record 44 starts 48 + 64 = 112 bytes after the tail, past the wrap:
    // at ring position 92; its step field is 16 bytes in.
    driver.upload(ring.data(), 92 + 16, &[0xEE]).unwrap();
    let bytes = ring.download(&mut driver, 4124, c.head).unwrap();
    let e = parse_records(&bytes, 42).unwrap_err();
    assert!(matches!(e, RingError::HeaderCheck { sequence: 44, .. }), "{e:?}");
    assert!(e.to_string().starts_with("record 44: header check"), "{e}");
    // Taking only the two records before it still works.
    assert_eq!(parse_records(&bytes[..112], 42).unwrap().len(), 2);
}

#[test]
fn flow_control_refuses_what_would_overwrite_unconsumed_bytes() {
    let mut driver = CpuDriver::new();
    let mut ring = Ring::new(&mut driver, "ring", 1000).unwrap();
    let src = driver.alloc("src", 1000).unwrap();
    let count = driver.alloc("count", 4).unwrap();
    let big = ring.static_launch(src.into(), 600).unwrap();
    ring.enqueue(&mut driver, &big, 0).unwrap();
    assert!(ring.would_overwrite(401, 0) && !ring.would_overwrite(400, 0));
    let e = ring.enqueue(&mut driver, &big, 0).unwrap_err();
    assert!(
        matches!(
            e,
            RingError::Full {
                capacity: 1000,
                requested: 600,
                free: 400
            }
        ),
        "{e:?}"
    );
    assert_eq!(
        ring.read_control(&mut driver).unwrap().sequence,
        1,
        "the refused launch was not enqueued"
    );
    // Once the consumer has taken 200 bytes it fits.
    ring.enqueue(&mut driver, &big, 200).unwrap();
    assert_eq!(ring.reserved_head(), 1200);
    // A prefix reserves its bound and may publish less; settling takes the
    // published head.
    driver.upload(count, 0, &2u32.to_le_bytes()).unwrap();
    let prefix = ring.prefix_launch(src.into(), count.into(), 10, 30).unwrap();
    assert_eq!(max_bytes(&prefix).unwrap(), 300);
    ring.enqueue(&mut driver, &prefix, 1000).unwrap();
    let head = ring.read_control(&mut driver).unwrap().head;
    assert_eq!((ring.reserved_head(), head), (1500, 1220));
    ring.settle(head).unwrap();
    assert_eq!(ring.free_bytes(1000), 780);
    let e = ring.settle(head + 1).unwrap_err();
    assert!(
        matches!(
            e,
            RingError::Overrun {
                published: 1221,
                reserved: 1220
            }
        ),
        "{e:?}"
    );
    // Launches of another ring, and kernels that are no producers, are refused.
    let other = Ring::new(&mut driver, "other", 1000).unwrap();
    let e = ring
        .enqueue(&mut driver, &other.static_launch(src.into(), 1).unwrap(), 1000)
        .unwrap_err();
    assert!(matches!(e, RingError::OtherRing { .. }), "{e:?}");
    let sample = lbm_core::fixtures::sample_launches(|k| lbm_core::BufferId(k).into()).swap_remove(0);
    let e = max_bytes(&sample).unwrap_err();
    assert!(
        matches!(
            e,
            RingError::NotAProducer {
                kernel: Kernel::StreamCollide
            }
        ),
        "{e:?}"
    );
}

#[test]
fn spans_split_at_the_wrap_and_refuse_more_than_the_capacity() {
    let mut driver = CpuDriver::new();
    let ring = Ring::new(&mut driver, "ring", 100).unwrap();
    assert_eq!(ring.spans(250, 270).unwrap(), [50..70, 0..0]);
    assert_eq!(ring.spans(290, 330).unwrap(), [90..100, 0..30]);
    assert_eq!(ring.spans(300, 400).unwrap(), [0..100, 0..0]);
    assert_eq!(ring.spans(7, 7).unwrap(), [7..7, 0..0]);
    for (tail, head) in [(0, 101), (10, 9)] {
        let e = ring.spans(tail, head).unwrap_err().to_string();
        assert!(e.contains("accepted tail <= head <= tail + capacity"), "{e}");
    }
}

#[test]
fn builders_refuse_what_the_ring_cannot_hold() {
    let mut driver = CpuDriver::new();
    let ring = Ring::new(&mut driver, "ring", 1000).unwrap();
    let src = driver.alloc("src", 4000).unwrap().into();
    let message = |r: Result<lbm_core::Launch, RingError>| r.unwrap_err().to_string();
    assert_eq!(
        message(ring.static_launch(src, 1001)),
        "static producer of 1001 bytes into a ring of 1000: a launch moves at most the capacity"
    );
    assert!(message(ring.prefix_launch(src, src, u64::MAX, u32::MAX)).contains("79228162495817593515539431425"));
    assert!(message(ring.record_launch(src, 945, 0, 0)).contains("record producer of 1008 bytes"));
    assert!(ring.record_launch(src, 944, 0, 0).is_ok());
    let table = ChunkTable::new(&mut driver, "t", 4000, &[Chunk { offset: 0, bytes: 600 }; 2]).unwrap();
    assert!(message(ring.chunked_launch(src, &table)).contains("chunked producer of 1200 bytes"));
    let e = ChunkTable::new(&mut driver, "t", 4000, &[Chunk { offset: 3999, bytes: 2 }]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "chunk 0 at byte 3999 of 2 bytes: accepted inside the 4000-byte source"
    );
    for n in [0, 65] {
        let chunks = vec![Chunk { offset: 0, bytes: 1 }; n];
        let e = ChunkTable::new(&mut driver, "t", 4000, &chunks).unwrap_err();
        assert!(matches!(e, RingError::ChunkCount { max: 64, .. }), "{e:?}");
    }
    let e = Ring::new(&mut driver, "empty", 0).unwrap_err();
    assert!(
        e.to_string().starts_with("ring capacity of 0 bytes: accepted 1..="),
        "{e}"
    );
}
