//! The sandbox's persistent working directory and `exec`: commands run in a
//! sandbox's context by the gateway that serves the request.
//!
//! # The working directory
//!
//! Each sandbox has one working directory, `<driver_dir>/.workdirs/<sandbox_id>`
//! (outside every replica's data directory, shared like the rest of the driver
//! directory; the leading dot keeps it from ever being read as a sandbox id). A
//! launch creates it under the sandbox's lock once its claim passed the
//! tombstone check; every execution's command runs in it, so its files survive
//! stop and start. `remove` deletes it after every execution and exec is
//! confirmed gone, before it answers: the delete is acknowledged only then.
//!
//! # Exec
//!
//! A command started by `exec` runs as a child of the gateway that serves the
//! request, in a process group of its own, in the working directory, with the
//! execution's environment (its `spec.json`, `PATH` defaulted like the shim
//! does) plus the request's variables, as the gateway's user (the process
//! driver runs every sandbox as that user). Decisions:
//!
//! - **Recorded where `stop` and `remove` look.** Under the sandbox's lock, an
//!   exec checks the tombstone and that the execution runs, starts the command
//!   and records its group leader (pid, start time, boot) in
//!   `<sandbox_dir>/execs/`; `stop` and `remove` kill every recorded group
//!   (after the execution's own processes), so an exec never outlives its
//!   execution, and nothing writes into a working directory being deleted.
//! - **Tied to its reader.** Dropping the [`ExecStream`] (the client went away)
//!   kills the group; so does the timeout. The gateway's own death leaves the
//!   group to the next `stop`/`remove`, which find it in the record.
//! - When the command's leader exits, the rest of its group is killed too (as
//!   the shim does for executions), then the record is removed.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;

use crate::{DriverError, ExecEvent, ExecSpec, ExecStream, LaunchSpec};

use super::driver::{ProcessDriver, blocking, io_uncertain, validate_sandbox_id};
use super::fencing::read_tombstone;
use super::procfs::{identity_of, presence, send_signal};
use super::records::{Presence, ProcessIdentity, observe, read_record, write_record};
use super::shim::resolve_program;
use super::{
    DEFAULT_PATH, EXIT_CODE_SIGNAL_BASE, SPEC_FILE, STOP_REQUESTED_FILE, WORKDIRS_DIRECTORY,
};

/// Directory of a sandbox's exec records (inside its sandbox directory).
pub(super) const EXECS_DIRECTORY: &str = "execs";
/// Events buffered between an exec's output and its reader.
const EXEC_EVENTS_BUFFERED: usize = 16;
/// How long an exec's pipes may stay open after its leader exited.
const EXEC_DRAIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);
/// Bytes read from an exec's pipes at a time.
const EXEC_READ_BYTES: usize = 64 * 1024;

/// The persistent working directory of a sandbox.
pub(super) fn workdir_of(driver_dir: &Path, sandbox_id: &str) -> PathBuf {
    driver_dir.join(WORKDIRS_DIRECTORY).join(sandbox_id)
}

/// Kills every recorded exec of a sandbox and deletes the records. Blocking.
pub(super) fn kill_execs(sandbox_dir: &Path) -> io::Result<()> {
    let dir = sandbox_dir.join(EXECS_DIRECTORY);
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(error),
    };
    for entry in entries {
        let path = entry?.path();
        if let Some(leader) = read_record::<ProcessIdentity>(&path)? {
            kill_group(&leader)?;
        }
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

/// SIGKILLs the group of a recorded leader while the leader (or its zombie,
/// which keeps the group id reserved) is the recorded process.
fn kill_group(leader: &ProcessIdentity) -> io::Result<()> {
    if presence(leader)? != Presence::Gone {
        send_signal(-(leader.pid as i32), libc::SIGKILL)?;
    }
    Ok(())
}

impl ProcessDriver {
    pub(super) async fn exec_command(&self, spec: &ExecSpec) -> Result<ExecStream, DriverError> {
        validate_sandbox_id(&spec.sandbox_id)?;
        if spec.command.is_empty() || spec.command[0].is_empty() {
            return Err(DriverError::Rejected {
                message: "exec needs a command: give the program and its arguments".into(),
            });
        }
        if spec
            .command
            .iter()
            .chain(spec.env.keys())
            .chain(spec.env.values())
            .any(|text| text.contains('\0'))
        {
            return Err(DriverError::Rejected {
                message: "exec arguments and environment may not contain NUL bytes".into(),
            });
        }
        let (driver, spec) = (self.clone(), spec.clone());
        blocking(move || driver.start_exec(spec)).await
    }

    /// Under the sandbox's lock: check the tombstone and that the execution
    /// runs, start the command, record its leader. Blocking.
    fn start_exec(&self, spec: ExecSpec) -> Result<ExecStream, DriverError> {
        let sandbox_dir = self.sandbox_dir(&spec.sandbox_id);
        let execution_dir = self.execution_dir(&spec.sandbox_id, spec.generation);
        let uncertain = |error| io_uncertain("starting an exec in", &execution_dir, error);
        let lock = self.lock(&sandbox_dir)?;
        if read_tombstone(&sandbox_dir).map_err(uncertain)?.is_some() {
            return Err(DriverError::Rejected {
                message: format!("sandbox {} was removed", spec.sandbox_id),
            });
        }
        let observation = observe(&execution_dir).map_err(uncertain)?;
        let runs = observation.command.is_some()
            && observation.exit.is_none()
            && observation.rejected.is_none()
            && observation.command_presence == Presence::Live
            && !execution_dir
                .join(STOP_REQUESTED_FILE)
                .try_exists()
                .map_err(uncertain)?;
        if !runs {
            return Err(DriverError::Rejected {
                message: format!(
                    "generation {} of sandbox {} is not running",
                    spec.generation, spec.sandbox_id
                ),
            });
        }
        let launch: LaunchSpec = read_record(&execution_dir.join(SPEC_FILE))
            .map_err(uncertain)?
            .ok_or_else(|| DriverError::Uncertain {
                message: format!("{} has no {SPEC_FILE}", execution_dir.display()),
            })?;
        // As the execution's command: as its sandbox user, if it has one,
        // in the same working directory.
        let run_as: Option<super::RunAs> =
            read_record(&execution_dir.join(super::RUN_AS_FILE)).map_err(uncertain)?;
        let work_dir = match &run_as {
            Some(run_as) => {
                run_as.prepare_work_dir().map_err(uncertain)?;
                run_as.work_dir.clone()
            }
            None => {
                let work_dir = workdir_of(self.driver_dir(), &spec.sandbox_id);
                fs::create_dir_all(&work_dir).map_err(uncertain)?;
                work_dir
            }
        };
        let mut environment: BTreeMap<String, String> =
            BTreeMap::from([("PATH".to_owned(), DEFAULT_PATH.to_owned())]);
        environment.extend(launch.env);
        environment.extend(spec.env.clone());
        let (events, receiver) = mpsc::channel(EXEC_EVENTS_BUFFERED);
        let program =
            match resolve_program(spec.command[0].as_ref(), &environment["PATH"], &work_dir) {
                Ok(program) => program,
                Err(rejected) => {
                    // As a shell would: the message on stderr, 127 or 126.
                    let mut message = rejected.message.into_bytes();
                    message.push(b'\n');
                    let _ = events.try_send(ExecEvent::Stderr(message));
                    let _ = events.try_send(ExecEvent::Exited(rejected.code));
                    return Ok(ExecStream { events: receiver });
                }
            };
        let mut command = tokio::process::Command::new(&program);
        command
            .arg0(&spec.command[0])
            .args(&spec.command[1..])
            .env_clear()
            .envs(&environment)
            .current_dir(&work_dir)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(run_as) = &run_as {
            // std drops the supplementary groups when it sets the uid.
            command.uid(run_as.uid).gid(run_as.gid);
        }
        let child = command.spawn().map_err(|error| DriverError::Rejected {
            message: format!("cannot start {:?}: {error}", spec.command[0]),
        })?;
        let pid = child.id().ok_or_else(|| DriverError::Uncertain {
            message: "the exec'd command exited before it was recorded".into(),
        })? as i32;
        let records = sandbox_dir.join(EXECS_DIRECTORY);
        let record = records.join(format!("{pid}.json"));
        let recorded = fs::create_dir_all(&records)
            .and_then(|()| identity_of(pid))
            .and_then(|leader| write_record(&record, &leader).map(|()| leader));
        let leader = match recorded {
            Ok(leader) => leader,
            Err(error) => {
                // Not recorded: it must not run.
                let _ = send_signal(-pid, libc::SIGKILL);
                return Err(uncertain(error));
            }
        };
        drop(lock);
        tracing::info!(
            sandbox_id = %spec.sandbox_id,
            generation = spec.generation,
            pid,
            "exec started"
        );
        tokio::runtime::Handle::try_current()
            .map_err(|error| DriverError::Uncertain {
                message: format!("exec needs a tokio runtime: {error}"),
            })?
            .spawn(supervise(child, leader, record, events, spec.timeout));
        Ok(ExecStream { events: receiver })
    }
}

/// Pumps the command's output to the reader until it exits, the reader goes
/// away or the timeout passes; then kills what is left of its group, removes
/// its record and reports the exit code.
async fn supervise(
    mut child: tokio::process::Child,
    leader: ProcessIdentity,
    record: PathBuf,
    events: mpsc::Sender<ExecEvent>,
    timeout: std::time::Duration,
) {
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let mut out_buffer = vec![0_u8; EXEC_READ_BYTES];
    let mut err_buffer = vec![0_u8; EXEC_READ_BYTES];
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let mut exit_code = None;
    let mut reader_gone = false;
    // Until both pipes are closed and the leader exited; after the leader's
    // exit the pipes get EXEC_DRAIN_TIMEOUT (a process that left the group
    // may hold them open).
    while stdout.is_some() || stderr.is_some() || exit_code.is_none() {
        tokio::select! {
            read = read_some(&mut stdout, &mut out_buffer) => {
                if let Some(bytes) = read
                    && events.send(ExecEvent::Stdout(bytes)).await.is_err() {
                    reader_gone = true;
                    break;
                }
            }
            read = read_some(&mut stderr, &mut err_buffer) => {
                if let Some(bytes) = read
                    && events.send(ExecEvent::Stderr(bytes)).await.is_err() {
                    reader_gone = true;
                    break;
                }
            }
            status = child.wait(), if exit_code.is_none() => {
                exit_code = Some(exit_code_of(status));
                // The leader is gone: whatever it left in its group goes too,
                // or a daemonized child would hold the pipes open.
                let _ = send_signal(-(leader.pid as i32), libc::SIGKILL);
                deadline.as_mut().reset(tokio::time::Instant::now() + EXEC_DRAIN_TIMEOUT);
            }
            () = events.closed() => {
                reader_gone = true;
                break;
            }
            () = &mut deadline => {
                if exit_code.is_none() {
                    let _ = events
                        .send(ExecEvent::Stderr(
                            format!("palisade: exec killed after its timeout of {timeout:?}\n")
                                .into_bytes(),
                        ))
                        .await;
                }
                break;
            }
        }
    }
    let _ = send_signal(-(leader.pid as i32), libc::SIGKILL);
    if exit_code.is_none() {
        exit_code = Some(exit_code_of(child.wait().await));
    }
    let _ = tokio::task::spawn_blocking(move || {
        let _ = fs::remove_file(&record);
    })
    .await;
    if let Some(code) = exit_code
        && !reader_gone
    {
        let _ = events.send(ExecEvent::Exited(code)).await;
    }
}

fn exit_code_of(status: io::Result<std::process::ExitStatus>) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Ok(status) => status
            .code()
            .unwrap_or_else(|| EXIT_CODE_SIGNAL_BASE + status.signal().unwrap_or(libc::SIGKILL)),
        Err(_) => EXIT_CODE_SIGNAL_BASE + libc::SIGKILL,
    }
}

/// Reads what is available from an open pipe; `None` (and the pipe closed)
/// at end of file. Pends for ever on a closed pipe, so `select!` skips it.
async fn read_some(
    pipe: &mut Option<impl tokio::io::AsyncRead + Unpin>,
    buffer: &mut [u8],
) -> Option<Vec<u8>> {
    let Some(reader) = pipe.as_mut() else {
        return std::future::pending().await;
    };
    match reader.read(buffer).await {
        Ok(0) | Err(_) => {
            *pipe = None;
            None
        }
        Ok(read) => Some(buffer[..read].to_vec()),
    }
}
