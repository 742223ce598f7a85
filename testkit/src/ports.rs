//! Free loopback ports. A port found free can be taken by someone else
//! before the replica binds it; callers that cannot tolerate that retry with
//! new ports (the replica then fails to start and says why in its log).

use std::net::TcpListener;

use crate::TestkitError;

/// How many random starting points are tried before giving up.
const SEARCH_ATTEMPTS_MAX: usize = 200;

/// One free loopback port.
pub fn free_port() -> Result<u16, TestkitError> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .map_err(|error| TestkitError::Ports(format!("cannot bind 127.0.0.1:0: {error}")))?;
    listener
        .local_addr()
        .map(|address| address.port())
        .map_err(|error| TestkitError::Ports(error.to_string()))
}

/// `count` consecutive free loopback ports; returns the first.
pub fn free_ports(count: u16) -> Result<u16, TestkitError> {
    free_port_blocks(count, &[0])
}

/// A base port such that, for every offset in `offsets`, the `count` ports
/// from `base + offset` are free: `palisade up --base-port` lays out public,
/// peer and metrics ports at fixed offsets from one base.
pub fn free_port_blocks(count: u16, offsets: &[u16]) -> Result<u16, TestkitError> {
    let span = offsets
        .iter()
        .max()
        .copied()
        .unwrap_or(0)
        .saturating_add(count);
    'search: for _ in 0..SEARCH_ATTEMPTS_MAX {
        let base = free_port()?;
        if base > u16::MAX - span {
            continue;
        }
        let mut held = Vec::new();
        for offset in offsets {
            for port in base + offset..base + offset + count {
                match TcpListener::bind(("127.0.0.1", port)) {
                    Ok(listener) => held.push(listener),
                    Err(_) => continue 'search,
                }
            }
        }
        return Ok(base);
    }
    Err(TestkitError::Ports(format!(
        "no base with {count} free ports at each of the offsets {offsets:?} found in {SEARCH_ATTEMPTS_MAX} attempts"
    )))
}
