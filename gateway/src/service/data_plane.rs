//! A sandbox's data plane: its execution's output (SandboxLogs) and commands
//! run in its context (ExecSandbox).
//!
//! # Which replica serves
//!
//! The replica the client called, through its own compute driver: reading
//! output and running a command change nothing the control plane decides,
//! so neither goes through Raft or the leader. Every replica of a cluster
//! holds the cluster's driver (the process driver's directory is shared on
//! the host; a Docker daemon is shared by every replica), which is checked:
//! a replica whose driver's identity is not the one recorded in the
//! replicated state answers UNAVAILABLE `DRIVER_NOT_LOCAL`, and clients try
//! another replica. So a leader change does not interrupt a `logs -f`; a
//! replica that goes away does, and the client resumes at another replica
//! from the cursor of the last chunk it received (cursors are the driver's,
//! valid on every replica holding it), losing and repeating nothing.
//!
//! The phase check of `exec` (INVALID_PHASE unless READY) reads the state
//! linearizably; the driver then checks that the execution still runs.
//! Both calls are bounded per replica ([`LOG_STREAMS_PER_REPLICA_MAX`],
//! [`EXECS_PER_REPLICA_MAX`]): beyond, RESOURCE_EXHAUSTED.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use palisade_driver::{
    ComputeDriver, DriverError, ExecEvent, ExecSpec, ExecutionStatus, LogStart, LogStream,
};
use palisade_lifecycle::limits::{
    COMMAND_ARG_LENGTH_MAX, ENV_NAME_BYTES_MAX, ENV_VALUE_BYTES_MAX, EXEC_ARGS_COUNT_MAX,
    EXEC_ENV_COUNT_MAX, EXEC_TIMEOUT_SECONDS_DEFAULT, EXEC_TIMEOUT_SECONDS_MAX,
    EXECS_PER_REPLICA_MAX, LOG_CHUNK_BYTES_MAX, LOG_CURSOR_BYTES_MAX, LOG_STREAMS_PER_REPLICA_MAX,
    LOG_TAIL_LINES_MAX,
};
use palisade_lifecycle::{SandboxPhase, validate};
use palisade_proto::v1;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tonic::{Code, Request, Response, Status};

use super::PalisadeService;
use super::sandboxes::target_from_ref;
use crate::errors;

/// How often `logs -f` looks for new output.
const LOG_FOLLOW_POLL_INTERVAL: Duration = Duration::from_millis(100);
/// Depth of a log stream's queue.
const LOG_QUEUE_DEPTH: usize = 8;

/// The stream a SandboxLogs call answers with.
pub(super) type LogChunkStream =
    Pin<Box<dyn Stream<Item = Result<v1::LogChunk, Status>> + Send + 'static>>;
/// The stream an ExecSandbox call answers with.
pub(super) type ExecOutputStream =
    Pin<Box<dyn Stream<Item = Result<v1::ExecOutput, Status>> + Send + 'static>>;

/// The driver of this replica and the bounds of its data plane.
#[derive(Clone)]
pub(crate) struct DataPlane {
    pub(crate) driver: Arc<dyn ComputeDriver>,
    log_streams: Arc<Semaphore>,
    execs: Arc<Semaphore>,
}

impl DataPlane {
    pub(crate) fn new(driver: Arc<dyn ComputeDriver>) -> Self {
        Self {
            driver,
            log_streams: Arc::new(Semaphore::new(LOG_STREAMS_PER_REPLICA_MAX)),
            execs: Arc::new(Semaphore::new(EXECS_PER_REPLICA_MAX)),
        }
    }
}

fn permit(
    semaphore: &Arc<Semaphore>,
    what: &str,
    max: usize,
) -> Result<OwnedSemaphorePermit, Status> {
    semaphore.clone().try_acquire_owned().map_err(|_| {
        errors::status(
            Code::ResourceExhausted,
            "RESOURCE_EXHAUSTED",
            format!("this replica already serves {max} {what}; retry later or at another replica"),
            [],
        )
    })
}

/// The status for a driver error of a data-plane call.
fn driver_status(error: DriverError) -> Status {
    match error {
        DriverError::Unsupported { message } => {
            errors::status(Code::FailedPrecondition, "DRIVER_UNSUPPORTED", message, [])
        }
        DriverError::Rejected { message } => {
            errors::status(Code::FailedPrecondition, "INVALID_PHASE", message, [])
        }
        DriverError::Uncertain { message } | DriverError::Fenced { message } => {
            errors::unavailable("DRIVER_UNCERTAIN", message)
        }
    }
}

fn invalid(field: &'static str, problem: String) -> Status {
    errors::invalid_input(validate::InvalidInput { field, problem })
}

impl PalisadeService {
    /// This replica may serve the data plane: its driver is the cluster's.
    fn local_driver(&self) -> Result<Arc<dyn ComputeDriver>, Status> {
        let driver = self.data_plane.driver.clone();
        let recorded = self.replica.state.read(|applied| {
            applied
                .state
                .cluster
                .as_ref()
                .map(|cluster| cluster.driver_identity.clone())
                .unwrap_or_default()
        });
        if !recorded.is_empty() && recorded != driver.identity() {
            return Err(errors::unavailable(
                "DRIVER_NOT_LOCAL",
                format!(
                    "replica {} holds {} driver {}, not the cluster's driver {recorded}: ask a \
                     replica on the host of the cluster's executions",
                    self.replica.node_id,
                    driver.name(),
                    driver.identity()
                ),
            ));
        }
        Ok(driver)
    }

    /// The sandbox a reference names (linearizable read): id, phase and
    /// current generation.
    async fn sandbox_now(
        &self,
        sandbox: Option<v1::SandboxRef>,
    ) -> Result<(String, SandboxPhase, u64), Status> {
        let target = target_from_ref(sandbox)?;
        self.read_consistency(v1::Consistency::Linearizable as i32)
            .await?;
        self.replica
            .state
            .read(|applied| {
                super::sandboxes::find(&applied.state, &target).map(|sandbox| {
                    (
                        sandbox.id.clone(),
                        sandbox.phase,
                        sandbox.execution.generation,
                    )
                })
            })
            .ok_or_else(|| errors::sandbox_not_found(super::sandboxes::describe(&target)))
    }
}

/// Where one stream of a log read goes on.
struct StreamPosition {
    stream: LogStream,
    start: LogStart,
}

pub(super) async fn logs(
    service: &PalisadeService,
    request: Request<v1::SandboxLogsRequest>,
) -> Result<Response<LogChunkStream>, Status> {
    // A sandbox's output is readable by whoever may view its workspace;
    // another workspace's sandbox by id reads as NOT_FOUND.
    let caller = crate::auth::Caller::of(&request)?;
    service
        .authorize_sandbox(
            &caller,
            request.get_ref().sandbox.as_ref(),
            super::Access::View,
        )
        .await?;
    let request = request.into_inner();
    if request.tail_lines > LOG_TAIL_LINES_MAX {
        return Err(invalid(
            "tail_lines",
            format!("{}; at most {LOG_TAIL_LINES_MAX}", request.tail_lines),
        ));
    }
    for (field, cursor) in [
        ("stdout_cursor", &request.stdout_cursor),
        ("stderr_cursor", &request.stderr_cursor),
    ] {
        if cursor.len() > LOG_CURSOR_BYTES_MAX || !cursor.is_ascii() {
            return Err(invalid(
                field,
                "not a cursor this service issued; pass a chunk's cursor unchanged".into(),
            ));
        }
    }
    let (sandbox_id, _phase, current) = service.sandbox_now(request.sandbox).await?;
    let generation = match request.generation {
        0 => current,
        asked if asked <= current => asked,
        asked => {
            return Err(invalid(
                "generation",
                format!("generation {asked} was never launched (the current one is {current})"),
            ));
        }
    };
    let driver = service.local_driver()?;
    let permit = permit(
        &service.data_plane.log_streams,
        "log streams",
        LOG_STREAMS_PER_REPLICA_MAX,
    )?;
    let start_of = |cursor: String| {
        if !cursor.is_empty() {
            LogStart::Cursor(cursor)
        } else if request.tail_lines > 0 {
            LogStart::TailLines(request.tail_lines)
        } else {
            LogStart::Beginning
        }
    };
    let mut positions = [
        StreamPosition {
            stream: LogStream::Stdout,
            start: start_of(request.stdout_cursor),
        },
        StreamPosition {
            stream: LogStream::Stderr,
            start: start_of(request.stderr_cursor),
        },
    ];
    // The first round here, so an unsupported driver or a bad cursor is the
    // call's status, not a broken stream.
    // Each stream's first chunk is sent even when empty: it carries the
    // stream's cursor, so a client resuming later never starts over (or
    // applies --tail twice).
    let mut first = Vec::new();
    for position in &mut positions {
        first.push(read_chunk(driver.as_ref(), &sandbox_id, generation, position, true).await?);
    }
    let (sender, receiver) = mpsc::channel(LOG_QUEUE_DEPTH);
    let follow = request.follow;
    tokio::spawn(async move {
        let _permit = permit;
        let mut pending: Vec<v1::LogChunk> = first.into_iter().flatten().collect();
        let mut ended = false;
        loop {
            let progress = !pending.is_empty();
            for chunk in pending.drain(..) {
                if sender.send(Ok(chunk)).await.is_err() {
                    return; // the reader went away
                }
            }
            if !progress {
                if !follow || ended {
                    return;
                }
                // Output is complete once the execution ended (the driver
                // writes all of it before recording the exit): one more
                // round reads the rest.
                match driver.inspect(&sandbox_id, generation).await {
                    Ok(ExecutionStatus::Running { .. }) => {
                        tokio::time::sleep(LOG_FOLLOW_POLL_INTERVAL).await;
                    }
                    Ok(_) => ended = true,
                    Err(error) => {
                        let _ = sender.send(Err(driver_status(error))).await;
                        return;
                    }
                }
            }
            for position in &mut positions {
                match read_chunk(driver.as_ref(), &sandbox_id, generation, position, false).await {
                    Ok(Some(chunk)) => pending.push(chunk),
                    Ok(None) => {}
                    Err(status) => {
                        let _ = sender.send(Err(status)).await;
                        return;
                    }
                }
            }
            if !pending.is_empty() {
                ended = false;
            }
        }
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(receiver);
    Ok(Response::new(Box::pin(stream)))
}

/// Reads the next piece of one stream; `None` when there is nothing new.
async fn read_chunk(
    driver: &dyn ComputeDriver,
    sandbox_id: &str,
    generation: u64,
    position: &mut StreamPosition,
    even_if_empty: bool,
) -> Result<Option<v1::LogChunk>, Status> {
    let read = driver
        .read_log(
            sandbox_id,
            generation,
            position.stream,
            &position.start,
            LOG_CHUNK_BYTES_MAX,
        )
        .await
        .map_err(|error| match error {
            DriverError::Rejected { message } => invalid("cursor", message),
            other => driver_status(other),
        })?;
    position.start = LogStart::Cursor(read.cursor.clone());
    if read.data.is_empty() && !read.skipped && !even_if_empty {
        return Ok(None);
    }
    Ok(Some(v1::LogChunk {
        stream: match position.stream {
            LogStream::Stdout => v1::LogStream::Stdout,
            LogStream::Stderr => v1::LogStream::Stderr,
        } as i32,
        data: read.data,
        cursor: read.cursor,
        generation,
        skipped: read.skipped,
    }))
}

pub(super) async fn exec(
    service: &PalisadeService,
    request: Request<v1::ExecSandboxRequest>,
) -> Result<Response<ExecOutputStream>, Status> {
    // Running a command in a sandbox is a write: editors of its workspace
    // (and admins) only.
    let caller = crate::auth::Caller::of(&request)?;
    service
        .authorize_sandbox(
            &caller,
            request.get_ref().sandbox.as_ref(),
            super::Access::Edit,
        )
        .await?;
    let request = request.into_inner();
    if request.command.is_empty() || request.command[0].is_empty() {
        return Err(invalid(
            "command",
            "give the program and its arguments (the program may not be empty)".into(),
        ));
    }
    if request.command.len() > EXEC_ARGS_COUNT_MAX {
        return Err(invalid(
            "command",
            format!(
                "{} arguments; at most {EXEC_ARGS_COUNT_MAX} are allowed",
                request.command.len()
            ),
        ));
    }
    if let Some(long) = request
        .command
        .iter()
        .find(|argument| argument.len() > COMMAND_ARG_LENGTH_MAX || argument.contains('\0'))
    {
        return Err(invalid(
            "command",
            format!(
                "argument {} is longer than {COMMAND_ARG_LENGTH_MAX} bytes or holds a NUL",
                validate::quoted(long)
            ),
        ));
    }
    if request.env.len() > EXEC_ENV_COUNT_MAX {
        return Err(invalid(
            "env",
            format!(
                "{} variables; at most {EXEC_ENV_COUNT_MAX}",
                request.env.len()
            ),
        ));
    }
    for (name, value) in &request.env {
        if name.is_empty()
            || name.len() > ENV_NAME_BYTES_MAX
            || value.len() > ENV_VALUE_BYTES_MAX
            || name.contains(['=', '\0'])
            || value.contains('\0')
        {
            return Err(invalid(
                "env",
                format!(
                    "variable {} is invalid: a name of 1 to {ENV_NAME_BYTES_MAX} bytes without \
                     '=' or NUL, a value of at most {ENV_VALUE_BYTES_MAX} bytes without NUL",
                    validate::quoted(name)
                ),
            ));
        }
    }
    if request.timeout_seconds > EXEC_TIMEOUT_SECONDS_MAX {
        return Err(invalid(
            "timeout_seconds",
            format!(
                "{}; at most {EXEC_TIMEOUT_SECONDS_MAX}",
                request.timeout_seconds
            ),
        ));
    }
    let (sandbox_id, phase, generation) = service.sandbox_now(request.sandbox).await?;
    if phase != SandboxPhase::Ready {
        return Err(errors::status(
            Code::FailedPrecondition,
            "INVALID_PHASE",
            format!(
                "sandbox {sandbox_id} is {}; exec runs only in a READY sandbox (start it first)",
                phase.as_str()
            ),
            [("phase", phase.as_str().to_string())],
        ));
    }
    let driver = service.local_driver()?;
    let permit = permit(&service.data_plane.execs, "execs", EXECS_PER_REPLICA_MAX)?;
    let timeout_seconds = match request.timeout_seconds {
        0 => EXEC_TIMEOUT_SECONDS_DEFAULT,
        given => given,
    };
    let spec = ExecSpec {
        sandbox_id,
        generation,
        command: request.command,
        env: request.env.into_iter().collect::<BTreeMap<_, _>>(),
        timeout: Duration::from_secs(u64::from(timeout_seconds)),
    };
    let running = driver.exec(&spec).await.map_err(|error| match error {
        DriverError::Uncertain { message } => errors::status(
            Code::Aborted,
            "EXEC_NOT_STARTED",
            format!("{message}; the command did not run to completion (not retried)"),
            [],
        ),
        other => driver_status(other),
    })?;
    let stream = tokio_stream::wrappers::ReceiverStream::new(running.events).map(move |event| {
        // Held while the stream lives; dropping the stream kills the command.
        let _permit = &permit;
        Ok(v1::ExecOutput {
            output: Some(match event {
                ExecEvent::Stdout(bytes) => v1::exec_output::Output::Stdout(bytes),
                ExecEvent::Stderr(bytes) => v1::exec_output::Output::Stderr(bytes),
                ExecEvent::Exited(code) => v1::exec_output::Output::ExitCode(code),
            }),
        })
    });
    Ok(Response::new(Box::pin(stream)))
}
