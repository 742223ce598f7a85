//! The checksummed record format shared by every value this crate writes to
//! the log database.
//!
//! A stored record is `[crc32: u32 little-endian][payload]`. The checksum
//! covers the record's *key* followed by the payload, so a record that is
//! intact but sits under the wrong key (a misdirected write, a bug in a
//! compaction) fails the check just like a flipped bit does.
//!
//! redb commits are atomic, so a torn record cannot be produced by a crash:
//! after a crash a transaction is either wholly present or wholly absent. A
//! record that fails its checksum is therefore never "the clean end of the
//! log"; it is corruption, and is always reported.

use crate::error::Corruption;

/// Size of the checksum that prefixes every record.
pub(crate) const CHECKSUM_BYTES: usize = 4;

/// Frames `payload` stored under `key` into a record.
pub(crate) fn encode(key: &[u8], payload: &[u8]) -> Vec<u8> {
    let checksum = checksum(key, payload);
    let mut record = Vec::with_capacity(CHECKSUM_BYTES + payload.len());
    record.extend_from_slice(&checksum.to_le_bytes());
    record.extend_from_slice(payload);
    record
}

/// Verifies a record stored under `key` and returns its payload.
pub(crate) fn decode<'a>(key: &[u8], record: &'a [u8]) -> Result<&'a [u8], Corruption> {
    let Some((stored, payload)) = record.split_first_chunk::<CHECKSUM_BYTES>() else {
        return Err(Corruption::Truncated {
            record_bytes: record.len(),
        });
    };
    let stored = u32::from_le_bytes(*stored);
    let computed = checksum(key, payload);
    if stored != computed {
        return Err(Corruption::Checksum { stored, computed });
    }
    Ok(payload)
}

fn checksum(key: &[u8], payload: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(key);
    hasher.update(payload);
    hasher.finalize()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let record = encode(b"key", b"payload");
        assert_eq!(decode(b"key", &record).unwrap(), b"payload");
    }

    #[test]
    fn empty_payload_round_trips() {
        let record = encode(b"key", b"");
        assert_eq!(record.len(), CHECKSUM_BYTES);
        assert_eq!(decode(b"key", &record).unwrap(), b"");
    }

    #[test]
    fn every_flipped_bit_is_detected() {
        let record = encode(b"key", b"some payload");
        for byte in 0..record.len() {
            for bit in 0..8 {
                let mut corrupt = record.clone();
                corrupt[byte] ^= 1 << bit;
                assert!(
                    matches!(decode(b"key", &corrupt), Err(Corruption::Checksum { .. })),
                    "flip of bit {bit} in byte {byte} went unnoticed"
                );
            }
        }
    }

    #[test]
    fn record_under_another_key_is_detected() {
        let record = encode(&7u64.to_be_bytes(), b"entry seven");
        assert!(matches!(
            decode(&8u64.to_be_bytes(), &record),
            Err(Corruption::Checksum { .. })
        ));
    }

    #[test]
    fn short_record_is_detected() {
        assert!(matches!(
            decode(b"key", &[1, 2, 3]),
            Err(Corruption::Truncated { record_bytes: 3 })
        ));
    }
}
