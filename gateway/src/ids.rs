//! Fresh random identifiers (UUID v4) and secret bytes. They come from
//! [`palisade_raft::runtime::random_bytes`]: the OS-seeded generator, except
//! in the deterministic simulation (`palisade chaos run --sim`), where the
//! seed makes them, so that a seed's run is the same run.

/// A new random (version 4) UUID.
pub fn new_uuid() -> uuid::Uuid {
    uuid::Builder::from_random_bytes(palisade_raft::runtime::random_bytes()).into_uuid()
}

/// `N` new random bytes.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    palisade_raft::runtime::random_bytes()
}
