//! Fresh identifiers (random UUID v4, time-ordered v7) and secret bytes. They come from
//! [`palisade_raft::runtime::random_bytes`]: the OS-seeded generator, except
//! in the deterministic simulation (`palisade chaos run --sim`), where the
//! seed makes them, so that a seed's run is the same run.

/// A new random (version 4) UUID.
pub fn new_uuid() -> uuid::Uuid {
    uuid::Builder::from_random_bytes(palisade_raft::runtime::random_bytes()).into_uuid()
}

/// A new time-ordered (version 7) UUID for `unix_time_ms`: the request
/// id of a write that came without one (see `palisade_proto::new_request_id`
/// for why request ids are time-ordered).
pub fn new_time_ordered_uuid(unix_time_ms: i64) -> uuid::Uuid {
    let random: [u8; 10] = palisade_raft::runtime::random_bytes();
    uuid::Builder::from_unix_timestamp_millis(unix_time_ms.max(0) as u64, &random).into_uuid()
}

/// `N` new random bytes.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    palisade_raft::runtime::random_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_id_the_gateway_makes_sorts_by_its_time() {
        let earlier = new_time_ordered_uuid(1_764_000_000_000);
        let later = new_time_ordered_uuid(1_764_000_000_001);
        assert_eq!(earlier.get_version_num(), 7);
        assert_eq!(
            earlier.get_timestamp().map(|t| t.to_unix().0),
            Some(1_764_000_000),
            "the id carries its time"
        );
        assert!(earlier.to_string() < later.to_string());
    }
}
