//! Records as a consumer reads them back: [`RecordHeader::parse`] checks one
//! header (layout in the crate documentation), [`parse_records`] walks the
//! records of a downloaded span and checks their sequence.
//!
//! It reads host bytes only; getting them off the device is [`crate::Ring`]'s.

use lbm_core::kernels::producer::{RECORD_ALIGN, record_bytes};
use lbm_core::kernels::producer::{
    RECORD_BYTES_AT, RECORD_CHECK_AT, RECORD_HEADER_BYTES, RECORD_KIND_AT, RECORD_MAGIC, RECORD_PAYLOAD_AT,
    RECORD_SEQUENCE_AT, RECORD_STEP_AT, header_check,
};

use crate::RingError;

/// A record header that passed its checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    pub kind: u32,
    /// The control block's `sequence` once this record was published.
    pub sequence: u64,
    pub step: u64,
    pub payload_bytes: u64,
    /// Header, payload and padding: where the next record starts.
    pub record_bytes: u64,
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("eight bytes"))
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("four bytes"))
}

impl RecordHeader {
    /// The header at the start of `bytes`, refused when it is cut short, its
    /// magic or check is wrong, or its record length does not follow from its
    /// payload length. Each refusal names the sequence number the header
    /// claims (a spoiled one included: the check says it cannot be trusted).
    pub fn parse(bytes: &[u8]) -> Result<RecordHeader, RingError> {
        let header = bytes
            .get(..RECORD_HEADER_BYTES as usize)
            .ok_or(RingError::HeaderTruncated {
                needed: RECORD_HEADER_BYTES,
                available: bytes.len() as u64,
            })?;
        let sequence = u64_at(header, RECORD_SEQUENCE_AT);
        let magic = u32_at(header, 0);
        if magic != RECORD_MAGIC {
            return Err(RingError::Magic {
                sequence,
                found: magic,
                expected: RECORD_MAGIC,
            });
        }
        let (stored, computed) = (u64_at(header, RECORD_CHECK_AT), header_check(header));
        if stored != computed {
            return Err(RingError::HeaderCheck {
                sequence,
                stored,
                computed,
            });
        }
        let payload_bytes = u64_at(header, RECORD_PAYLOAD_AT);
        let total = u64_at(header, RECORD_BYTES_AT);
        if record_bytes(payload_bytes) != Some(total) {
            return Err(RingError::RecordLength {
                sequence,
                payload_bytes,
                record_bytes: total,
                expected: (u128::from(payload_bytes) + u128::from(RECORD_HEADER_BYTES))
                    .next_multiple_of(RECORD_ALIGN.into()),
            });
        }
        Ok(RecordHeader {
            kind: u32_at(header, RECORD_KIND_AT),
            sequence,
            step: u64_at(header, RECORD_STEP_AT),
            payload_bytes,
            record_bytes: total,
        })
    }
}

/// One record of a span, its payload borrowed from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    pub header: RecordHeader,
    pub payload: &'a [u8],
}

/// Every record of `bytes`, which holds whole records back to back (a span
/// of a ring that only records were produced into), the first numbered
/// `first_sequence` and each next one more; the first record that fails a
/// check refuses the span.
pub fn parse_records(bytes: &[u8], first_sequence: u64) -> Result<Vec<Record<'_>>, RingError> {
    let mut records = Vec::new();
    let mut rest = bytes;
    let mut expected = first_sequence;
    while !rest.is_empty() {
        let header = RecordHeader::parse(rest)?;
        if header.sequence != expected {
            return Err(RingError::Sequence {
                expected,
                found: header.sequence,
            });
        }
        if header.record_bytes > rest.len() as u64 {
            return Err(RingError::RecordTruncated {
                sequence: header.sequence,
                record_bytes: header.record_bytes,
                available: rest.len() as u64,
            });
        }
        let payload_at = RECORD_HEADER_BYTES as usize;
        records.push(Record {
            header,
            payload: &rest[payload_at..payload_at + header.payload_bytes as usize],
        });
        rest = &rest[header.record_bytes as usize..];
        expected = expected.wrapping_add(1);
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lbm_core::kernels::producer::record_header;

    /// Records of payloads `payloads` numbered from `first`, padded as the
    /// producer pads them.
    fn span(first: u64, payloads: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for (k, payload) in payloads.iter().enumerate() {
            let start = out.len();
            out.extend(record_header(9, first + k as u64, 100 + k as u64, payload.len() as u64));
            out.extend(*payload);
            out.resize(start + record_bytes(payload.len() as u64).unwrap() as usize, 0);
        }
        out
    }

    #[test]
    fn a_span_of_records_parses_back() {
        let bytes = span(5, &[b"", b"x", &[7; 40]]);
        assert_eq!(bytes.len(), 48 + 64 + 96);
        let records = parse_records(&bytes, 5).unwrap();
        let got: Vec<(u64, u64, &[u8])> = records
            .iter()
            .map(|r| (r.header.sequence, r.header.step, r.payload))
            .collect();
        assert_eq!(got, [(5, 100, &b""[..]), (6, 101, b"x"), (7, 102, &[7; 40])]);
        assert!(records.iter().all(|r| r.header.kind == 9));
    }

    /// `edit` applied to a span of three records numbered from 5; the
    /// refusal's message must contain `want`.
    fn refused(edit: impl FnOnce(&mut Vec<u8>), first: u64, want: &str) {
        let mut bytes = span(5, &[b"abc", &[1; 20], b""]);
        edit(&mut bytes);
        let e = parse_records(&bytes, first).unwrap_err().to_string();
        assert!(e.contains(want), "{want:?} not in {e:?}");
    }

    #[test]
    fn spoiled_records_are_refused_naming_their_sequence() {
        // The second record starts at byte 64.
        refused(|b| b[64 + RECORD_STEP_AT] ^= 1, 5, "record 6: header check");
        refused(|b| b[64 + RECORD_KIND_AT + 3] = 0xFF, 5, "record 6: header check");
        refused(|b| b[64] = b'X', 5, "record claiming sequence 6: magic");
        refused(|b| b[RECORD_CHECK_AT] ^= 0x80, 5, "record 5: header check");
        refused(
            |b| b.truncate(64 + 40),
            5,
            "40 bytes where a record header of 48 bytes was due",
        );
        refused(|b| b.truncate(64 + 60), 5, "record 6 of 80 bytes: only 60 bytes left");
        refused(|_| {}, 4, "record 5 where record 4 was due");
    }

    #[test]
    fn a_length_that_does_not_follow_from_the_payload_is_refused() {
        let mut h = record_header(1, 3, 0, 10);
        h[RECORD_BYTES_AT..RECORD_BYTES_AT + 8].copy_from_slice(&48u64.to_le_bytes());
        let check = header_check(&h);
        h[RECORD_CHECK_AT..].copy_from_slice(&check.to_le_bytes());
        let e = RecordHeader::parse(&h).unwrap_err().to_string();
        assert_eq!(e, "record 3: 48 record bytes for 10 payload bytes, accepted 64");
    }
}
