//! The type config shared by the integration tests (a test fixture, not
//! Palisade's: that one lives in `palisade-raft`).

// Each test binary compiles this module and uses a different part of it.
#![allow(dead_code)]

use openraft::RaftTypeConfig;
use openraft::alias::LogIdOf;
use openraft::entry::RaftEntry;

openraft::declare_raft_types!(
    /// String commands and responses, `u64` node ids, and the standard
    /// leader id (one leader per term), as in Palisade.
    pub TestConfig:
        LeaderId = openraft::impls::leader_id_std::LeaderId<u64, u64>,
);

/// A log entry of the test config.
pub type Entry = <TestConfig as RaftTypeConfig>::Entry;

/// The log id at `index` proposed in `term`.
pub fn log_id(term: u64, index: u64) -> LogIdOf<TestConfig> {
    LogIdOf::<TestConfig>::new(term.into(), index)
}

/// A normal entry carrying `command`.
pub fn command_entry(term: u64, index: u64, command: String) -> Entry {
    Entry::new_normal(log_id(term, index), command)
}
