//! A type config and entry builders for this crate's unit tests.

use openraft::RaftTypeConfig;
use openraft::alias::LogIdOf;
use openraft::entry::RaftEntry;

openraft::declare_raft_types!(
    /// The unit tests' type config: string commands, `u64` node ids and the
    /// standard leader id, like Palisade's.
    pub(crate) TestConfig:
        LeaderId = openraft::impls::leader_id_std::LeaderId<u64, u64>,
);

pub(crate) fn log_id(term: u64, index: u64) -> LogIdOf<TestConfig> {
    LogIdOf::<TestConfig>::new(term.into(), index)
}

pub(crate) fn blank(term: u64, index: u64) -> <TestConfig as RaftTypeConfig>::Entry {
    <TestConfig as RaftTypeConfig>::Entry::new_blank(log_id(term, index))
}
