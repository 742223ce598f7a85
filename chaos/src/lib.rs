//! Palisade's chaos harness (DESIGN.md section 8): a cluster with real
//! openraft and real storage, nemeses that inject faults (leader handoffs
//! inside a request, kills, pauses, partitions, failing drivers), a
//! concurrent workload, and a history checker.
//!
//! Not built yet: this crate only reserves its place at the end of the
//! dependency arrows (`proto <- lifecycle <- storage <- raft <- gateway <-
//! chaos`). Until it lands, fault tests live in `gateway/tests/` and drive
//! real `palisade gateway run` processes.
#![deny(missing_docs)]
