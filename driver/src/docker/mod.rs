//! The Docker driver: one container per execution on a Docker Engine, driven through
//! its API with `bollard` (never the `docker` CLI).
//!
//! # Containers
//!
//! An execution is the container named `palisade-<sandbox id>-<generation>`, created
//! from the spec's image (or `--docker-default-image`) with `--init` (the engine's
//! tini is PID 1: it forwards SIGTERM to the command, reaps, and exits 128 + signal
//! when the command dies of one), the configured network (`none` by default), the
//! spec's CPU and memory limits and working directory, and no restart policy: a
//! restart is a new generation, decided by the replicated state, never by the engine.
//! The name makes a repeated launch find the first one's container (the engine refuses
//! a second container of one name), so a generation runs at most once whoever retries.
//! Labels make every container say whose it is:
//!
//! ```text
//! dev.palisade.driver-id      this driver's identity (`docker:` + the fence directory's id)
//! dev.palisade.cluster-id     the cluster of the launching fence
//! dev.palisade.sandbox-id     the sandbox
//! dev.palisade.generation     the generation
//! dev.palisade.fence          the launching fence, TERM.OPERATION_INDEX
//! ```
//!
//! `list` asks the engine for the containers labelled with this driver's id, and so
//! finds everything Palisade started here (and anything started with its labels
//! behind its back, which the orphan reconciler then reaps), and nothing else.
//!
//! Exit codes come from the container's state (`State.ExitCode`): 0, the command's
//! code, 127 when the program is not in the image (tini reports it), 128 + N for a
//! death by signal N. `stop` is the engine's stop (SIGTERM, the grace, SIGKILL; `docker
//! stop -t`); `remove` force-removes every generation's container of the sandbox, then
//! lists again to confirm that none is left.
//!
//! # Where the fence lives, and why the check is atomic with the effect
//!
//! The Docker Engine API has no compare-and-set: labels are fixed at creation, and
//! the only atomic primitive is "create a container (or volume) of a name that does
//! not exist". A fence record kept in the engine would need a lock made of such
//! objects, and a lock in the engine can only be freed from a holder that died by a
//! lease (a time-out): a holder that was merely paused past its lease (SIGSTOP, a long
//! GC, a VM migration) would wake up and act outside the lock, which is exactly the
//! deposed-leader case fencing exists for. So this driver keeps each sandbox's highest
//! fence and its tombstone where the process driver keeps them: in a directory every
//! replica of the host shares (`--driver-dir`), as `fence.json` and `tombstone.json`
//! under the sandbox's `flock` ([`crate::process::fencing`] says why each choice). The
//! kernel frees a `flock` only when its holder dies (a paused holder keeps it, and
//! other calls answer `Uncertain` until it goes), so mutual exclusion never lapses.
//!
//! Every deciding step is taken with the lock held, engine calls included:
//!
//! - `launch`: lock; check and record the fence; create the container (or find the
//!   one of its name); check the tombstone (claim, then check); check the generation's
//!   stop marker; start the container if it never started; unlock. A launch that finds
//!   a tombstone force-removes a container it found unstarted and answers `Fenced`.
//! - `stop`: lock; check and record the fence; write the generation's stop marker
//!   (`<generation>.stop-requested`); unlock; then the engine's stop. A launch never
//!   starts a container whose marker exists, and nothing clears a marker.
//! - `remove`: lock; check and record the fence; write the tombstone; unlock; then
//!   force-remove every container of the sandbox and list again to confirm. A launch
//!   that creates its container after the tombstone sees it, and one that created it
//!   before is listed by the remove, because both steps hold the same lock.
//!
//! Because the lock is held across the engine calls of a launch, there is no window
//! between the check and the effect for another replica's call of the same sandbox. A
//! gateway killed in the middle releases the lock at once; its half-done launch (a
//! container created, never started) is finished by the next `launch` or reaped.
//!
//! **Topology this implies.** Every replica must share the fence directory, so the
//! replicas run on one host (as with the process driver), while the engine may be
//! anywhere `--docker-host` reaches (a local socket, or `tcp://` with TLS from
//! `DOCKER_TLS_VERIFY`/`DOCKER_CERT_PATH`). A replica with another fence directory has
//! another identity: it sees the others' containers as out of its sight (`Uncertain`,
//! never `Absent`), and the cluster, which records one driver identity, lets it
//! perform no effect while it leads.
//!
//! # An engine that is down or slow
//!
//! Every engine call has a deadline ([`DockerTimeouts::call_timeout`]). A refused
//! connection, a time-out or any answer other than the few that are certain (404 for
//! "no such container", 409 for "name taken", a 400 or 404 on create, which creates
//! nothing) makes the call `Uncertain`, never `Absent`: the executor then neither
//! records the sandbox lost nor fails the operation, and retries until the engine
//! answers again.

mod driver;

pub use driver::{DockerConfig, DockerDriver, DockerTimeouts};

/// Label: the driver identity that created the container.
pub const LABEL_DRIVER_ID: &str = "dev.palisade.driver-id";
/// Label: the cluster id of the launching fence.
pub const LABEL_CLUSTER_ID: &str = "dev.palisade.cluster-id";
/// Label: the sandbox id.
pub const LABEL_SANDBOX_ID: &str = "dev.palisade.sandbox-id";
/// Label: the execution generation.
pub const LABEL_GENERATION: &str = "dev.palisade.generation";
/// Label: the launching fence, `TERM.OPERATION_INDEX`.
pub const LABEL_FENCE: &str = "dev.palisade.fence";

/// The default `--docker-network`: no network at all.
pub const DEFAULT_NETWORK: &str = "none";

/// The command of a spec without one: sleeps (practically) forever, until stopped.
/// The image needs a `sleep` program (busybox, Debian, Alpine... all have one).
pub const IDLE_COMMAND: [&str; 2] = ["sleep", "2147483647"];

/// The container of one execution.
pub fn container_name(sandbox_id: &str, generation: u64) -> String {
    format!("palisade-{sandbox_id}-{generation}")
}
