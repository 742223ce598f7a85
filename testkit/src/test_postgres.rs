//! [`TestPostgres`]: a throwaway PostgreSQL server for tests and
//! benchmarks, never a mock.
//!
//! It runs `initdb` and `pg_ctl` from `/usr/lib/postgresql/*/bin` (the
//! newest version there) on a temporary directory and a free port on
//! 127.0.0.1 (outside the ephemeral range, so that [`TestPostgres::restart`]
//! finds it unbound: see [`crate::ports`]), and stops the server and removes the directory on drop.
//! PostgreSQL refuses to run as root: as root, the binaries run as the
//! `postgres` user (`runuser -u postgres --`) in a directory it owns.
//! `scripts/ensure-postgres` installs the `postgresql` package when the
//! binaries are missing. [`TestPostgres::stop_with`] (fast, or immediate
//! like a crash) and [`TestPostgres::restart`] (same data directory, same
//! port) are for fault tests: the projection's own, and the chaos
//! harness's `postgres` nemesis.
//!
//! With `DATABASE_URL` set, no server is started: each `TestPostgres`
//! creates a fresh database on that server and drops it on drop.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sqlx::Connection;
use sqlx::postgres::PgConnection;

/// Where Debian and Ubuntu put the server binaries (one directory per
/// major version).
const POSTGRES_LIBRARY_DIR: &str = "/usr/lib/postgresql";
/// The user the server runs as when we are root.
const POSTGRES_USER: &str = "postgres";
/// How long `pg_ctl start` may take.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Starts of a new server, each on a fresh port: a port found free can be
/// taken by another process (a test's client connecting from it) before
/// the server binds it, and the server then exits at once.
const START_ATTEMPTS: u32 = 3;
/// What the server logs when its port was taken.
const PORT_TAKEN: &str = "Address already in use";

/// Why a test server could not be had.
#[derive(Debug, thiserror::Error)]
pub enum TestPostgresError {
    /// No PostgreSQL server binaries.
    #[error(
        "no PostgreSQL binaries under {POSTGRES_LIBRARY_DIR}/*/bin; run scripts/ensure-postgres (installs the postgresql package) or set DATABASE_URL"
    )]
    NotInstalled,
    /// A command failed.
    #[error("{command} failed: {detail}")]
    Command {
        /// What was run.
        command: String,
        /// Its exit status and output.
        detail: String,
    },
    /// Local IO failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// No free port for the server.
    #[error("{0}")]
    Port(String),
    /// The external server (DATABASE_URL) refused.
    #[error("DATABASE_URL: {0}")]
    Database(#[from] sqlx::Error),
}

/// How much durability the test server keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// `fsync=off`, `synchronous_commit=off`: for tests.
    Fast,
    /// The server's defaults (every commit is flushed): for benchmarks.
    Durable,
}

/// How [`TestPostgres::stop_with`] shuts the server down (`pg_ctl stop -m`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shutdown {
    /// `-m fast`: open connections are cut, their transactions roll back,
    /// and the server writes a checkpoint before it exits.
    Fast,
    /// `-m immediate`: every server process quits at once, without a
    /// checkpoint, like a crash; the next start recovers from the WAL.
    Immediate,
}

impl Shutdown {
    /// The `pg_ctl stop -m` value.
    pub fn mode(self) -> &'static str {
        match self {
            Shutdown::Fast => "fast",
            Shutdown::Immediate => "immediate",
        }
    }
}

enum Server {
    /// A server this value started and owns.
    Local {
        directory: PathBuf,
        bin: PathBuf,
        port: u16,
        as_postgres_user: bool,
        durability: Durability,
    },
    /// A database on the server DATABASE_URL names.
    External { admin_url: String, database: String },
}

/// A PostgreSQL server (or database) for one test. See the module doc.
pub struct TestPostgres {
    server: Server,
    url: String,
}

fn run(command: &mut Command) -> Result<String, TestPostgresError> {
    let described = format!("{command:?}");
    let output = command
        .output()
        .map_err(|error| TestPostgresError::Command {
            command: described.clone(),
            detail: error.to_string(),
        })?;
    if !output.status.success() {
        return Err(TestPostgresError::Command {
            command: described,
            detail: format!(
                "{}: {}{}",
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

fn is_root() -> bool {
    run(Command::new("id").arg("-u")).is_ok_and(|uid| uid.trim() == "0")
}

/// The newest `/usr/lib/postgresql/N/bin` holding `initdb` and `pg_ctl`.
fn find_bin() -> Result<PathBuf, TestPostgresError> {
    let Ok(entries) = std::fs::read_dir(POSTGRES_LIBRARY_DIR) else {
        return Err(TestPostgresError::NotInstalled);
    };
    let mut versions: Vec<(u32, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            (bin.join("initdb").exists() && bin.join("pg_ctl").exists()).then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions
        .pop()
        .map(|(_, bin)| bin)
        .ok_or(TestPostgresError::NotInstalled)
}

/// A free port outside the ephemeral range ([`crate::ports`]): a server
/// stopped and started again on its port ([`TestPostgres::restart`]) must
/// find it unbound, not taken by a connection (the projector's own
/// reconnects among them) that `connect()` gave it to meanwhile.
fn free_port() -> Result<u16, TestPostgresError> {
    crate::ports::free_port().map_err(|error| TestPostgresError::Port(error.to_string()))
}

fn local_url(port: u16) -> String {
    format!("postgres://{POSTGRES_USER}@127.0.0.1:{port}/postgres")
}

fn unique_suffix() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.subsec_nanos());
    format!(
        "{}_{}_{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed),
        nanos
    )
}

impl TestPostgres {
    /// A server for tests ([`Durability::Fast`]), or a fresh database on
    /// `DATABASE_URL`'s server.
    pub async fn start() -> Result<Self, TestPostgresError> {
        Self::start_with(Durability::Fast).await
    }

    /// Like [`TestPostgres::start`], with the given durability (ignored
    /// with `DATABASE_URL`).
    pub async fn start_with(durability: Durability) -> Result<Self, TestPostgresError> {
        match std::env::var("DATABASE_URL") {
            Ok(admin_url) if !admin_url.is_empty() => Self::external(admin_url).await,
            _ => tokio::task::spawn_blocking(move || Self::local(durability))
                .await
                .map_err(|error| TestPostgresError::Io(std::io::Error::other(error)))?,
        }
    }

    async fn external(admin_url: String) -> Result<Self, TestPostgresError> {
        let database = format!("palisade_test_{}", unique_suffix());
        let mut connection = PgConnection::connect(&admin_url).await?;
        sqlx::query(&format!("CREATE DATABASE {database}"))
            .execute(&mut connection)
            .await?;
        connection.close().await?;
        let url = match admin_url.rsplit_once('/') {
            Some((server, last)) if !last.contains(':') && !last.contains('@') => {
                let query = last.split_once('?').map(|(_, query)| query);
                match query {
                    Some(query) => format!("{server}/{database}?{query}"),
                    None => format!("{server}/{database}"),
                }
            }
            _ => format!("{}/{database}", admin_url.trim_end_matches('/')),
        };
        Ok(Self {
            server: Server::External {
                admin_url,
                database,
            },
            url,
        })
    }

    fn local(durability: Durability) -> Result<Self, TestPostgresError> {
        Self::local_on(durability, free_port()?)
    }

    /// A local server, first tried on `port` (then on fresh ones: see
    /// [`START_ATTEMPTS`]).
    fn local_on(durability: Durability, port: u16) -> Result<Self, TestPostgresError> {
        let bin = find_bin()?;
        let as_postgres_user = is_root();
        let directory = std::env::temp_dir().join(format!("palisade-pg-{}", unique_suffix()));
        std::fs::create_dir_all(&directory)?;
        if as_postgres_user {
            run(Command::new("chown")
                .arg(format!("{POSTGRES_USER}:"))
                .arg(&directory))?;
        }
        let mut server = TestPostgres {
            server: Server::Local {
                directory: directory.clone(),
                bin: bin.clone(),
                port,
                as_postgres_user,
                durability,
            },
            url: local_url(port),
        };
        // From here on, drop cleans up whatever was made.
        server.command("initdb", |command| {
            command
                .arg("-D")
                .arg(directory.join("data"))
                .args(["-U", POSTGRES_USER, "--auth=trust", "--no-sync"])
                .args(["--encoding=UTF8", "--locale=C"]);
        })?;
        let mut attempt = 1;
        loop {
            match server.start_server() {
                Ok(()) => return Ok(server),
                Err(error)
                    if attempt < START_ATTEMPTS && error.to_string().contains(PORT_TAKEN) =>
                {
                    attempt += 1;
                    let fresh = free_port()?;
                    if let Server::Local { port, .. } = &mut server.server {
                        *port = fresh;
                    }
                    server.url = local_url(fresh);
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// Runs a server binary, as the postgres user when we are root.
    fn command(
        &self,
        program: &str,
        arguments: impl FnOnce(&mut Command),
    ) -> Result<String, TestPostgresError> {
        let Server::Local {
            bin,
            as_postgres_user,
            directory,
            ..
        } = &self.server
        else {
            return Ok(String::new());
        };
        let mut command = if *as_postgres_user {
            let mut command = Command::new("runuser");
            command
                .args(["-u", POSTGRES_USER, "--"])
                .arg(bin.join(program));
            command
        } else {
            Command::new(bin.join(program))
        };
        command.current_dir(directory);
        arguments(&mut command);
        run(&mut command)
    }

    fn start_server(&self) -> Result<(), TestPostgresError> {
        let Server::Local {
            directory,
            port,
            durability,
            ..
        } = &self.server
        else {
            return Ok(());
        };
        let mut options = format!(
            "-p {port} -k {} -c listen_addresses=127.0.0.1 -c max_connections=50",
            directory.display()
        );
        if *durability == Durability::Fast {
            options.push_str(" -c fsync=off -c synchronous_commit=off -c full_page_writes=off");
        }
        let data = directory.join("data");
        let log = directory.join("server.log");
        self.command("pg_ctl", |command| {
            command
                .arg("-D")
                .arg(&data)
                .arg("-l")
                .arg(&log)
                .args(["-o", &options, "-w", "-t"])
                .arg(START_TIMEOUT.as_secs().to_string())
                .arg("start");
        })
        .map_err(|error| match std::fs::read_to_string(&log) {
            Ok(server_log) => TestPostgresError::Command {
                command: "pg_ctl start".into(),
                detail: format!("{error}\nserver log:\n{server_log}"),
            },
            Err(_) => error,
        })?;
        Ok(())
    }

    /// `postgres://...` of the test database.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The data directory of a local server (`None` with `DATABASE_URL`).
    pub fn directory(&self) -> Option<&Path> {
        match &self.server {
            Server::Local { directory, .. } => Some(directory),
            Server::External { .. } => None,
        }
    }

    /// True when this value runs its own server (stop/restart work).
    pub fn is_local(&self) -> bool {
        matches!(self.server, Server::Local { .. })
    }

    /// Stops the server at once, like a crash (`pg_ctl stop -m
    /// immediate`). Blocking.
    pub fn stop(&self) -> Result<(), TestPostgresError> {
        self.stop_with(Shutdown::Immediate)
    }

    /// Stops the server the way `shutdown` says, and waits until it is
    /// down. Blocking; nothing to stop with `DATABASE_URL`.
    pub fn stop_with(&self, shutdown: Shutdown) -> Result<(), TestPostgresError> {
        let Some(directory) = self.directory() else {
            return Ok(());
        };
        let data = directory.join("data");
        self.command("pg_ctl", |command| {
            command
                .arg("-D")
                .arg(&data)
                .args(["-m", shutdown.mode(), "-w", "stop"]);
        })?;
        Ok(())
    }

    /// True while the server runs (`pg_ctl status`); always true with
    /// `DATABASE_URL` (that server is not ours to watch). Blocking.
    pub fn is_running(&self) -> bool {
        let Some(directory) = self.directory() else {
            return true;
        };
        let data = directory.join("data");
        self.command("pg_ctl", |command| {
            command.arg("-D").arg(&data).arg("status");
        })
        .is_ok()
    }

    /// Starts a stopped server again, on the same port. Blocking.
    pub fn restart(&self) -> Result<(), TestPostgresError> {
        self.start_server()
    }
}

impl Drop for TestPostgres {
    fn drop(&mut self) {
        match &self.server {
            Server::Local { directory, .. } => {
                // Already stopped is fine.
                let _ = self.stop();
                let _ = std::fs::remove_dir_all(directory);
            }
            Server::External {
                admin_url,
                database,
            } => {
                let admin_url = admin_url.clone();
                let statement = format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)");
                // Drop cannot await; a thread with its own runtime can.
                let dropped = std::thread::spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .ok()?;
                    runtime.block_on(async {
                        let mut connection = PgConnection::connect(&admin_url).await.ok()?;
                        sqlx::query(&statement)
                            .execute(&mut connection)
                            .await
                            .ok()?;
                        connection.close().await.ok()
                    })
                })
                .join();
                if !matches!(dropped, Ok(Some(()))) {
                    eprintln!("could not drop test database {database}; drop it by hand");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;

    use super::*;

    /// The port found free is taken before the server binds it (here by a
    /// listener held open): the server starts on another one.
    #[test]
    fn a_port_taken_before_the_server_binds_it_is_replaced() {
        let taken = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = taken.local_addr().expect("address").port();
        let server = match TestPostgres::local_on(Durability::Fast, port) {
            Err(TestPostgresError::NotInstalled) => {
                eprintln!("skipped: no PostgreSQL binaries");
                return;
            }
            started => started.expect("the server starts on a fresh port"),
        };
        let Server::Local { port: used, .. } = &server.server else {
            unreachable!("a local server");
        };
        assert_ne!(*used, port);
        assert!(
            server.url().contains(&format!(":{used}/")),
            "{}",
            server.url()
        );
        assert!(server.is_running());
    }

    /// A server restarted on its port must find it unbound: the port is
    /// outside the range `connect()` hands out to the projector's
    /// reconnects while the server is down.
    #[test]
    fn the_server_listens_outside_the_ephemeral_range() {
        let server = match TestPostgres::local(Durability::Fast) {
            Err(TestPostgresError::NotInstalled) => {
                eprintln!("skipped: no PostgreSQL binaries");
                return;
            }
            started => started.expect("the server starts"),
        };
        let Server::Local { port, .. } = &server.server else {
            unreachable!("a local server");
        };
        let ephemeral = crate::ports::ephemeral_range().expect("the ephemeral range");
        assert!(!ephemeral.contains(port), "{port} in {ephemeral:?}");
    }
}
