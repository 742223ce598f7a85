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
//!
//! Ports are drawn outside the kernel's ephemeral range
//! (`/proc/sys/net/ipv4/ip_local_port_range`), from which `connect()` takes
//! the local port of every outgoing connection on the machine. A replica
//! that is killed and started again on its ports (the chaos harness, `palisade
//! up`'s supervisor, failover tests) leaves them unbound meanwhile; inside
//! the ephemeral range any connection opened in that window, by any process,
//! could take one, and the replica could not listen again for as long as
//! that connection lived. `up_restarts_a_killed_leader_and_prints_the_new_one`
//! failed that way in CI (its replica exited at every restart until the test
//! gave up), and does so reliably beside a process that keeps thousands of
//! outgoing connections open. Outside the range only an explicit `bind` can
//! take a port, and every test binds what it was handed.

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::ops::RangeInclusive;
use std::sync::Mutex;
use std::sync::PoisonError;

use rand::Rng;

use crate::TestkitError;

/// How many random starting points are tried before giving up.
const SEARCH_ATTEMPTS_MAX: usize = 200;
/// The lowest port handed out: below it are the well-known and the
/// commonly configured service ports (PostgreSQL's 5432, `palisade up`'s
/// default 7001 and its neighbours).
const LOWEST_PORT: u16 = 10_000;
/// Where the kernel says its ephemeral range is.
const EPHEMERAL_RANGE_FILE: &str = "/proc/sys/net/ipv4/ip_local_port_range";
/// The ephemeral range of kernels without [`EPHEMERAL_RANGE_FILE`] (IANA's
/// dynamic ports, which the BSDs and macOS use).
const IANA_EPHEMERAL_RANGE: RangeInclusive<u16> = 49_152..=65_535;

/// Every port this process was handed (see the module doc).
static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// One free loopback port, outside the ephemeral range.
pub fn free_port() -> Result<u16, TestkitError> {
    let ranges = candidate_ranges(&ephemeral_range()?, 1)?;
    free_port_from(|| bindable_port(&ranges))
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

/// A random port of `ranges` that can be bound now (not yet marked handed
/// out).
fn bindable_port(ranges: &[RangeInclusive<u16>]) -> Result<u16, TestkitError> {
    for _ in 0..SEARCH_ATTEMPTS_MAX {
        let port = random_base(ranges);
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Err(TestkitError::Ports(format!(
        "no free loopback port in {ranges:?} found in {SEARCH_ATTEMPTS_MAX} attempts"
    )))
}

/// The kernel's ephemeral port range.
pub(crate) fn ephemeral_range() -> Result<RangeInclusive<u16>, TestkitError> {
    match std::fs::read_to_string(EPHEMERAL_RANGE_FILE) {
        Ok(text) => parse_ephemeral_range(&text),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(IANA_EPHEMERAL_RANGE),
        Err(error) => Err(TestkitError::Ports(format!(
            "cannot read {EPHEMERAL_RANGE_FILE}: {error}"
        ))),
    }
}

/// Parses `ip_local_port_range` ("32768\t60999\n").
fn parse_ephemeral_range(text: &str) -> Result<RangeInclusive<u16>, TestkitError> {
    let bounds: Vec<u16> = text
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .map_err(|error| {
            TestkitError::Ports(format!("{EPHEMERAL_RANGE_FILE}: {text:?}: {error}"))
        })?;
    match bounds[..] {
        [low, high] if low <= high => Ok(low..=high),
        _ => Err(TestkitError::Ports(format!(
            "{EPHEMERAL_RANGE_FILE}: {text:?} is not two ports, low then high"
        ))),
    }
}

/// The ranges a block spanning `span` ports may start in: from
/// [`LOWEST_PORT`] up to the ephemeral range, and above it, each with room
/// for the whole span.
fn candidate_ranges(
    ephemeral: &RangeInclusive<u16>,
    span: u16,
) -> Result<Vec<RangeInclusive<u16>>, TestkitError> {
    let span = span.max(1);
    let below = ephemeral
        .start()
        .checked_sub(span)
        .map(|last| LOWEST_PORT..=last);
    let above = ephemeral
        .end()
        .checked_add(1)
        .zip(u16::MAX.checked_sub(span - 1))
        .map(|(first, last)| first..=last);
    let ranges: Vec<_> = [below, above]
        .into_iter()
        .flatten()
        .filter(|range| !range.is_empty())
        .collect();
    if ranges.is_empty() {
        return Err(TestkitError::Ports(format!(
            "the ephemeral port range {}-{} leaves no room for {span} port(s) from {LOWEST_PORT} up outside it",
            ephemeral.start(),
            ephemeral.end()
        )));
    }
    Ok(ranges)
}

/// A uniformly random port of `ranges` (not empty, none empty).
fn random_base(ranges: &[RangeInclusive<u16>]) -> u16 {
    let sizes: Vec<u32> = ranges
        .iter()
        .map(|range| u32::from(*range.end()) - u32::from(*range.start()) + 1)
        .collect();
    let mut pick = rand::rng().random_range(0..sizes.iter().sum::<u32>());
    for (range, size) in ranges.iter().zip(sizes) {
        if pick < size {
            return range.start() + pick as u16;
        }
        pick -= size;
    }
    unreachable!("pick is below the sum of the sizes")
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
    let ranges = candidate_ranges(&ephemeral_range()?, span)?;
    'search: for _ in 0..SEARCH_ATTEMPTS_MAX {
        let base = random_base(&ranges);
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
        let ranges = candidate_ranges(&ephemeral_range().unwrap(), 1).unwrap();
        let fresh = std::iter::repeat_with(|| bindable_port(&ranges).unwrap())
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

    /// Every port handed out lies outside the kernel's ephemeral range, where
    /// no outgoing connection can take it while its replica is down.
    #[test]
    fn ports_are_handed_out_outside_the_ephemeral_range() {
        let ephemeral = ephemeral_range().unwrap();
        for _ in 0..20 {
            let single = free_port().unwrap();
            assert!(!ephemeral.contains(&single), "{single} in {ephemeral:?}");
            let base = free_port_blocks(3, &[0, 100, 200]).unwrap();
            for port in [base, base + 2, base + 100, base + 202] {
                assert!(!ephemeral.contains(&port), "{port} in {ephemeral:?}");
                assert!(port >= LOWEST_PORT, "{port}");
            }
        }
    }

    #[test]
    fn the_ephemeral_range_is_parsed_or_refused_with_the_reason() {
        assert_eq!(
            parse_ephemeral_range("32768\t60999\n").unwrap(),
            32768..=60999
        );
        for bad in ["", "32768", "60999 32768", "a b", "1 2 3", "1 70000"] {
            let error = parse_ephemeral_range(bad).unwrap_err().to_string();
            assert!(error.contains("ip_local_port_range"), "{bad:?}: {error}");
        }
    }

    /// A block's every port stays outside the range: it starts at least
    /// `span` below it, or above it with room to the top.
    #[test]
    fn candidate_ranges_leave_room_for_the_whole_block() {
        assert_eq!(
            candidate_ranges(&(32768..=60999), 203).unwrap(),
            vec![LOWEST_PORT..=32565, 61000..=65333]
        );
        assert_eq!(
            candidate_ranges(&(LOWEST_PORT..=65535), 1)
                .unwrap_err()
                .to_string(),
            "ports: the ephemeral port range 10000-65535 leaves no room for 1 port(s) from 10000 up outside it"
        );
        assert!(candidate_ranges(&(1024..=65000), 600).is_err());
        assert_eq!(
            candidate_ranges(&(1024..=65000), 100).unwrap(),
            vec![65001..=65436]
        );
    }
}
