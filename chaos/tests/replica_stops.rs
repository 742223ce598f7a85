//! A replica that ends on its own — here, one whose restart cannot open its
//! data directory — is recorded with its error, so a campaign reports it
//! (`replica-stopped`) and the membership check quotes it, instead of a
//! bare "not running at the end" (chaos seed 42 at 1,000 operations).

use std::sync::Arc;
use std::time::{Duration, Instant};

use palisade_chaos::clock::Clock;
use palisade_chaos::cluster::{Cluster, ClusterConfig};
use palisade_chaos::host::SharedHost;
use palisade_chaos::links::LinkTable;
use palisade_chaos::points::Triggers;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_cannot_restart_is_recorded_with_its_error() {
    let host = Arc::new(SharedHost::new(Clock::new()));
    let links = Arc::new(LinkTable::new(42));
    let (triggers, _fired) = Triggers::new();
    let cluster = Cluster::start(ClusterConfig::chaos(3), host, links, Arc::new(triggers))
        .expect("cluster starts");
    cluster
        .wait_for_leader(Duration::from_secs(20))
        .await
        .expect("a leader is elected");
    assert!(cluster.unexpected_stops().is_empty());

    // A crash is not a stop on its own.
    cluster.crash(3).await;
    assert!(cluster.unexpected_stops().is_empty());

    // Its data directory becomes a file: the restart cannot open it.
    let data_dir = cluster.data_dir(3).expect("replica 3 has a directory");
    std::fs::remove_dir_all(&data_dir).expect("remove the data directory");
    std::fs::write(&data_dir, b"not a directory").expect("write a file in its place");
    cluster.restart(3).expect("the restart itself is asked for");

    let deadline = Instant::now() + Duration::from_secs(20);
    while !cluster.has_stopped(3) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        cluster.has_stopped(3),
        "replica 3 should have stopped on its own"
    );
    assert!(cluster.is_running(3), "the harness still holds its slot");
    let stops = cluster.unexpected_stops();
    assert_eq!(stops.len(), 1, "one stop recorded: {stops:?}");
    assert_eq!(stops[0].0, 3);
    let why = cluster.why_stopped(3).expect("why it stopped");
    assert!(
        why.contains(&*data_dir.to_string_lossy()) || why.to_lowercase().contains("directory"),
        "the record quotes the start error: {why}"
    );

    // A stop the storage nemesis expects is taken out of the record.
    assert_eq!(cluster.expect_stop(3), vec![why]);
    assert!(cluster.unexpected_stops().is_empty());
    cluster.shutdown().await;
}

/// While a replica is down its port stays held (bound, not listening):
/// connections to it are refused, as to a crashed process, but an
/// outgoing connection of this process cannot get it as its local port —
/// what happened at chaos seed 42: the connection kept the port for the
/// rest of the campaign and the replica could never listen again. The
/// restarted replica listens on it.
///
/// Watched on a spare slot (not a member: nobody connects to it), so no
/// connection of the replica lingers in TIME_WAIT on the port: that would
/// keep the port from an outgoing connection for a minute anyway, and
/// hide whether the harness holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_replicas_port_is_held_until_it_restarts() {
    let host = Arc::new(SharedHost::new(Clock::new()));
    let links = Arc::new(LinkTable::new(7));
    let (triggers, _fired) = Triggers::new();
    let config = ClusterConfig {
        spares: 1,
        ..ClusterConfig::chaos(3)
    };
    let cluster = Cluster::start(config, host, links, Arc::new(triggers)).expect("cluster starts");
    let spare = 4;
    let addr: std::net::SocketAddr = cluster
        .addr(spare)
        .expect("the spare has an address")
        .parse()
        .expect("an address");
    // A socket as an outgoing connection has it (no SO_REUSEADDR) binds
    // the port if, and only if, the kernel could hand it out as a local
    // port.
    let free_for_outgoing = || {
        let outgoing = tokio::net::TcpSocket::new_v4().expect("a socket");
        outgoing.bind(addr).is_ok()
    };
    assert!(
        !free_for_outgoing(),
        "the port of a replica not started yet is free for an outgoing connection to take"
    );

    cluster.start_replica(spare).expect("the spare starts");
    let listening = |timeout| {
        let deadline = Instant::now() + timeout;
        loop {
            if std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    assert!(listening(Duration::from_secs(10)), "the spare listens");

    cluster.crash(spare).await;
    assert!(
        !listening(Duration::ZERO),
        "nothing listens on a crashed replica's port"
    );
    assert!(
        !free_for_outgoing(),
        "the port of a crashed replica is free for an outgoing connection to take"
    );

    cluster.restart(spare).expect("restart");
    assert!(
        listening(Duration::from_secs(10)),
        "the restarted replica listens on its port again: {:?}",
        cluster.why_stopped(spare)
    );
    cluster.shutdown().await;
}
