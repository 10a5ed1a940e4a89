//! NPY version 1.0 files of little-endian f32 arrays, as `numpy.load` reads
//! them: the magic, a header dict padded so the data starts at a multiple of
//! 64 bytes, then the values in C order.
//!
//! It writes arrays only; names and the index are the caller's.

/// The bytes of an NPY file holding `values` with `shape` (C order).
pub fn encode(shape: &[usize], values: &[f32]) -> Vec<u8> {
    debug_assert_eq!(shape.iter().product::<usize>(), values.len());
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}");
    // magic (6) + version (2) + header length (2) + header + '\n'.
    let unpadded = 10 + header.len() + 1;
    header.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + 4 * values.len());
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    super::extend_le(&mut out, values);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_is_padded_to_64_bytes_and_the_data_follows_in_order() {
        let bytes = encode(&[2, 3], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
        assert_eq!((10 + header_len) % 64, 0);
        let header = std::str::from_utf8(&bytes[10..10 + header_len]).unwrap();
        assert!(header.contains("'shape': (2, 3)") && header.ends_with('\n'), "{header}");
        let data = &bytes[10 + header_len..];
        assert_eq!(data.len(), 24);
        assert_eq!(f32::from_le_bytes(data[20..24].try_into().unwrap()), 5.0);
        assert!(
            std::str::from_utf8(&encode(&[4], &[0.0; 4])[10..])
                .unwrap()
                .contains("(4,)")
        );
    }
}
