//! [`LinkTable`]: the state of the in-process peer network, consulted by
//! every replica's transport before each message (through
//! [`palisade_raft::hooks::LinkFaults`]).
//!
//! It holds the *cut* links (a partition is the set of directed links
//! between its sides; both directions are cut, since each side's transport
//! asks about its own sends), and *noise* applied to every other message:
//! a loss rate, a random delay, a duplication rate and a rate of lost
//! answers. Random choices come from a seeded RNG; which message draws
//! which number depends on thread timing, so only the schedule, not the
//! exact fate of each message, is reproducible.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

use palisade_raft::NodeId;
use palisade_raft::hooks::{LinkFaults, LinkVerdict, PeerRpc};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Random faults applied to every message on an uncut link.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Noise {
    /// Probability that a message is dropped.
    pub loss: f64,
    /// Probability that a message is delivered twice.
    pub duplicate: f64,
    /// Probability that a message is delivered and its answer lost.
    pub lost_answer: f64,
    /// Upper bound of a uniformly random delay (zero: none).
    pub delay_max: Duration,
}

#[derive(Debug)]
struct Links {
    cut: BTreeSet<(NodeId, NodeId)>,
    noise: Noise,
    rng: StdRng,
    counts: BTreeMap<&'static str, u64>,
}

/// The peer network's faults. See the module docs.
#[derive(Debug)]
pub struct LinkTable {
    /// `std` mutex: held for one verdict, never across an await.
    links: Mutex<Links>,
}

impl LinkTable {
    /// A healthy network whose noise draws from `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            links: Mutex::new(Links {
                cut: BTreeSet::new(),
                noise: Noise::default(),
                rng: StdRng::seed_from_u64(seed),
                counts: BTreeMap::new(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Links> {
        self.links
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Cuts every link between different sides, both ways.
    pub fn partition(&self, sides: &[BTreeSet<NodeId>]) {
        let mut links = self.lock();
        for (position, side) in sides.iter().enumerate() {
            for other in &sides[position + 1..] {
                for from in side {
                    for to in other {
                        links.cut.insert((*from, *to));
                        links.cut.insert((*to, *from));
                    }
                }
            }
        }
    }

    /// Cuts every link of `node` to and from `others`.
    pub fn isolate(&self, node: NodeId, others: &[NodeId]) {
        let mut links = self.lock();
        for other in others.iter().filter(|other| **other != node) {
            links.cut.insert((node, *other));
            links.cut.insert((*other, node));
        }
    }

    /// Sets the noise on every uncut link.
    pub fn set_noise(&self, noise: Noise) {
        self.lock().noise = noise;
    }

    /// Restores every link and removes the noise.
    pub fn heal(&self) {
        let mut links = self.lock();
        links.cut.clear();
        links.noise = Noise::default();
    }

    /// Messages affected so far, by fault.
    pub fn counts(&self) -> BTreeMap<&'static str, u64> {
        self.lock().counts.clone()
    }
}

impl LinkFaults for LinkTable {
    fn verdict(&self, from: NodeId, to: NodeId, rpc: PeerRpc) -> LinkVerdict {
        let mut guard = self.lock();
        let links = &mut *guard;
        let verdict = if links.cut.contains(&(from, to)) {
            LinkVerdict::Drop
        } else {
            let noise = links.noise;
            let roll: f64 = links.rng.random();
            if roll < noise.loss {
                LinkVerdict::Drop
            } else if roll < noise.loss + noise.duplicate {
                LinkVerdict::Duplicate
            } else if roll < noise.loss + noise.duplicate + noise.lost_answer {
                LinkVerdict::DropReply
            } else if !noise.delay_max.is_zero() {
                let millis = links
                    .rng
                    .random_range(0..=noise.delay_max.as_millis() as u64);
                LinkVerdict::Delay(Duration::from_millis(millis))
            } else {
                LinkVerdict::Deliver
            }
        };
        let counted = match verdict {
            LinkVerdict::Deliver => None,
            LinkVerdict::Drop if links.cut.contains(&(from, to)) => Some("partitioned"),
            LinkVerdict::Drop => Some("lost"),
            LinkVerdict::Delay(_) => Some("delayed"),
            LinkVerdict::Duplicate => Some("duplicated"),
            LinkVerdict::DropReply => Some("answer-lost"),
        };
        if let Some(counted) = counted {
            *links.counts.entry(counted).or_default() += 1;
        }
        if rpc == PeerRpc::ForwardWrite && verdict != LinkVerdict::Deliver {
            *links.counts.entry("forward-affected").or_default() += 1;
        }
        verdict
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_cuts_both_ways_and_heals() {
        let table = LinkTable::new(1);
        table.partition(&[BTreeSet::from([1]), BTreeSet::from([2, 3])]);
        assert_eq!(table.verdict(1, 2, PeerRpc::Vote), LinkVerdict::Drop);
        assert_eq!(table.verdict(3, 1, PeerRpc::Vote), LinkVerdict::Drop);
        assert_eq!(table.verdict(2, 3, PeerRpc::Vote), LinkVerdict::Deliver);
        table.heal();
        assert_eq!(table.verdict(1, 2, PeerRpc::Vote), LinkVerdict::Deliver);
        assert_eq!(table.counts()["partitioned"], 2);
    }
}
