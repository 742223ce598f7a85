//! TCP proxies in front of each replica's peer address, for the process
//! mode's partitions.
//!
//! Each replica listens on its own port but *advertises* its proxy's port
//! (`palisade gateway run --advertise`), so every message another replica
//! sends it — Raft traffic, forwarded writes, read-index requests — goes
//! through its proxy. Clients of the workload use the real ports.
//!
//! A partition cuts directed links (from, to). The proxy of `to` must know
//! who connects: all replicas connect from 127.0.0.1, so it asks the
//! kernel. It looks the connecting socket up in `/proc/net/tcp` (local
//! port = the peer's port, remote port = the proxy's) to get its inode,
//! and finds which replica process holds that inode among its file
//! descriptors (`/proc/<pid>/fd`). A connection over a cut link is closed
//! at once; cutting a link also closes the connections already open over
//! it. A connection whose owner cannot be found (the harness's own, or a
//! process that just died) passes. Linux only.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use palisade_raft::NodeId;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{AbortHandle, JoinHandle};

/// Most connections one proxy tracks (a replica opens one per peer).
pub const CONNECTIONS_PER_PROXY_MAX: usize = 1_024;

#[derive(Debug, Default)]
struct Table {
    cut: BTreeSet<(NodeId, NodeId)>,
    /// Replica process ids, for attributing connections.
    pids: BTreeMap<u32, NodeId>,
    /// Open connections: (from, to) and the task copying them.
    connections: Vec<(Option<NodeId>, NodeId, AbortHandle)>,
    refused: u64,
    unattributed: u64,
}

/// The proxies of a process-mode cluster.
#[derive(Debug)]
pub struct Proxies {
    /// `std` mutex: held to read or change the table, never across an
    /// await.
    table: Arc<Mutex<Table>>,
    tasks: Vec<JoinHandle<()>>,
}

fn lock(table: &Mutex<Table>) -> std::sync::MutexGuard<'_, Table> {
    table
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Proxies {
    /// Starts one proxy per replica: `listeners[i]` forwards to
    /// `targets[i]` for node `nodes[i]`.
    pub fn start(routes: Vec<(NodeId, TcpListener, SocketAddr)>) -> Self {
        let table: Arc<Mutex<Table>> = Arc::default();
        let tasks = routes
            .into_iter()
            .map(|(node, listener, target)| {
                tokio::spawn(accept_loop(table.clone(), node, listener, target))
            })
            .collect();
        Self { table, tasks }
    }

    /// Records which process is which replica.
    pub fn set_pid(&self, pid: u32, node: NodeId) {
        let mut table = lock(&self.table);
        table.pids.retain(|_, known| *known != node);
        table.pids.insert(pid, node);
    }

    /// Cuts the links, both ways, between the sides; closes the connections
    /// already open across the cut.
    pub fn partition(&self, sides: &[BTreeSet<NodeId>]) {
        let mut table = lock(&self.table);
        for (position, side) in sides.iter().enumerate() {
            for other in &sides[position + 1..] {
                for from in side {
                    for to in other {
                        table.cut.insert((*from, *to));
                        table.cut.insert((*to, *from));
                    }
                }
            }
        }
        let cut = table.cut.clone();
        table.connections.retain(|(from, to, abort)| {
            let crossing = from.is_some_and(|from| cut.contains(&(from, *to)));
            if crossing {
                abort.abort();
            }
            !crossing
        });
    }

    /// Restores every link.
    pub fn heal(&self) {
        lock(&self.table).cut.clear();
    }

    /// Connections refused because of a cut, and connections whose owner
    /// was not found.
    pub fn counts(&self) -> (u64, u64) {
        let table = lock(&self.table);
        (table.refused, table.unattributed)
    }
}

impl Drop for Proxies {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
        for (_, _, abort) in &lock(&self.table).connections {
            abort.abort();
        }
    }
}

async fn accept_loop(
    table: Arc<Mutex<Table>>,
    to: NodeId,
    listener: TcpListener,
    target: SocketAddr,
) {
    let proxy_port = listener.local_addr().map(|addr| addr.port()).unwrap_or(0);
    loop {
        let Ok((inbound, peer)) = listener.accept().await else {
            continue;
        };
        let pids: Vec<(u32, NodeId)> = lock(&table)
            .pids
            .iter()
            .map(|(pid, node)| (*pid, *node))
            .collect();
        let from = tokio::task::spawn_blocking(move || owner(peer.port(), proxy_port, &pids))
            .await
            .ok()
            .flatten();
        let mut guard = lock(&table);
        if from.is_none() {
            guard.unattributed += 1;
        }
        if from.is_some_and(|from| guard.cut.contains(&(from, to))) {
            guard.refused += 1;
            drop(inbound);
            continue;
        }
        guard
            .connections
            .retain(|(_, _, abort)| !abort.is_finished());
        if guard.connections.len() >= CONNECTIONS_PER_PROXY_MAX {
            drop(inbound);
            continue;
        }
        let task = tokio::spawn(pipe(inbound, target));
        guard.connections.push((from, to, task.abort_handle()));
    }
}

async fn pipe(mut inbound: TcpStream, target: SocketAddr) {
    let Ok(mut outbound) = TcpStream::connect(target).await else {
        return;
    };
    let _ = inbound.set_nodelay(true);
    let _ = outbound.set_nodelay(true);
    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
}

/// The replica whose process holds the socket 127.0.0.1:`port` connected
/// to 127.0.0.1:`proxy_port`.
fn owner(port: u16, proxy_port: u16, pids: &[(u32, NodeId)]) -> Option<NodeId> {
    let inode = socket_inode(port, proxy_port)?;
    let wanted = format!("socket:[{inode}]");
    for (pid, node) in pids {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|link| link.to_string_lossy() == wanted) {
                return Some(*node);
            }
        }
    }
    None
}

/// The inode of the IPv4 TCP socket with local port `local` and remote port
/// `remote`, from `/proc/net/tcp`.
fn socket_inode(local: u16, remote: u16) -> Option<u64> {
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    let port_of = |field: &str| {
        field
            .rsplit(':')
            .next()
            .and_then(|hex| u16::from_str_radix(hex, 16).ok())
    };
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (local_field, remote_field, inode) = (fields.get(1)?, fields.get(2)?, fields.get(9)?);
        (port_of(local_field)? == local && port_of(remote_field)? == remote)
            .then(|| inode.parse().ok())
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_connection_is_attributed_to_the_process_that_opened_it() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let proxy_port = listener.local_addr().unwrap().port();
        let client = std::net::TcpStream::connect(("127.0.0.1", proxy_port)).unwrap();
        let (_accepted, peer) = listener.accept().unwrap();
        let me = std::process::id();
        assert_eq!(owner(peer.port(), proxy_port, &[(me, 7)]), Some(7));
        drop(client);
    }
}
