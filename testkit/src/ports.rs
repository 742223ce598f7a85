//! Free loopback ports. A port found free can be taken by someone else
//! before the replica binds it; callers that cannot tolerate that retry with
//! new ports (the replica then fails to start and says why in its log).
//!
//! A port is never handed out twice by one process: the ports found are
//! released at once (the replica binds them later), and the kernel's next
//! free port may be one of them. `palisade-scale` gave three replicas a
//! block of ports, then each a metrics port, and one metrics port was the
//! third replica's public port: that replica could not listen, and the
//! run waited 15 minutes for it.

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::sync::Mutex;
use std::sync::PoisonError;

use crate::TestkitError;

/// How many random starting points are tried before giving up.
const SEARCH_ATTEMPTS_MAX: usize = 200;

/// Every port this process was handed (see the module doc).
static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// One free loopback port.
pub fn free_port() -> Result<u16, TestkitError> {
    free_port_from(kernel_free_port)
}

/// One port from `candidates` (asked again while it answers a port this
/// process was handed already), now handed out.
fn free_port_from(
    mut candidates: impl FnMut() -> Result<u16, TestkitError>,
) -> Result<u16, TestkitError> {
    for _ in 0..SEARCH_ATTEMPTS_MAX {
        let port = candidates()?;
        if handed_out().insert(port) {
            return Ok(port);
        }
    }
    Err(TestkitError::Ports(format!(
        "no port not handed out already found in {SEARCH_ATTEMPTS_MAX} attempts"
    )))
}

fn handed_out() -> std::sync::MutexGuard<'static, BTreeSet<u16>> {
    HANDED_OUT.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A port the kernel finds free (not yet marked handed out).
fn kernel_free_port() -> Result<u16, TestkitError> {
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
        let base = kernel_free_port()?;
        if base > u16::MAX - span {
            continue;
        }
        let ports: Vec<u16> = offsets
            .iter()
            .flat_map(|offset| base + offset..base + offset + count)
            .collect();
        let mut held = Vec::new();
        for port in &ports {
            match TcpListener::bind(("127.0.0.1", *port)) {
                Ok(listener) => held.push(listener),
                Err(_) => continue 'search,
            }
        }
        let mut handed = handed_out();
        if ports.iter().any(|port| handed.contains(port)) {
            continue;
        }
        handed.extend(ports);
        return Ok(base);
    }
    Err(TestkitError::Ports(format!(
        "no base with {count} free ports at each of the offsets {offsets:?} found in {SEARCH_ATTEMPTS_MAX} attempts"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A port of a block handed out before is skipped though the kernel
    /// answers it again.
    #[test]
    fn a_port_is_never_handed_out_twice() {
        let base = free_ports(3).unwrap();
        let mut answers = vec![base + 2, base, base + 1].into_iter();
        let fresh = std::iter::repeat_with(|| kernel_free_port().unwrap())
            .find(|port| !handed_out().contains(port))
            .unwrap();
        let port = free_port_from(|| Ok(answers.next().unwrap_or(fresh))).unwrap();
        assert!(
            !(base..base + 3).contains(&port),
            "{port} of {base}..{}",
            base + 3
        );
        assert_eq!(port, fresh);
        // And the one handed out now is not handed out again either.
        assert!(free_port_from(|| Ok(port)).is_err());
    }
}
