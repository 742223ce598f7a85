//! `palisade sandbox logs` and `palisade sandbox exec`: a sandbox's output,
//! and commands run in its context. Bytes go to this process's stdout and
//! stderr as they arrive, unchanged.

use std::collections::HashMap;
use std::io::Write;
use std::time::Duration;

use palisade_proto::v1;

use crate::client::{Client, ClientError};

/// Pause before resuming a broken log stream elsewhere.
const LOGS_RESUME_BACKOFF: Duration = Duration::from_millis(300);
/// How long `logs` keeps trying to resume before it gives up.
const LOGS_RESUME_DEADLINE: Duration = Duration::from_secs(60);

/// Prints the output of one execution; with `follow`, until it ends. A
/// broken stream (the replica went away) is resumed at any endpoint from
/// the cursor of the last chunk, so nothing is lost or printed twice.
pub(crate) async fn logs(
    client: &mut Client,
    reference: v1::SandboxRef,
    follow: bool,
    generation: Option<u64>,
    tail: Option<u32>,
) -> anyhow::Result<()> {
    let mut request = v1::SandboxLogsRequest {
        sandbox: Some(reference),
        generation: generation.unwrap_or(0),
        follow,
        tail_lines: tail.unwrap_or(0),
        stdout_cursor: String::new(),
        stderr_cursor: String::new(),
    };
    let mut broken_since: Option<tokio::time::Instant> = None;
    loop {
        let mut stream = client
            .palisade(|mut api| {
                let request = request.clone();
                async move { api.sandbox_logs(request).await }
            })
            .await?;
        loop {
            match stream.message().await {
                Ok(Some(chunk)) => {
                    broken_since = None;
                    // Resume this very execution, from right after this chunk.
                    request.generation = chunk.generation;
                    if chunk.skipped {
                        eprintln!(
                            "palisade: some output was rotated away before it could be read \
                             (the logs are capped)"
                        );
                    }
                    match v1::LogStream::try_from(chunk.stream) {
                        Ok(v1::LogStream::Stderr) => {
                            let mut stderr = std::io::stderr().lock();
                            stderr.write_all(&chunk.data)?;
                            stderr.flush()?;
                            request.stderr_cursor = chunk.cursor;
                        }
                        _ => {
                            let mut stdout = std::io::stdout().lock();
                            stdout.write_all(&chunk.data)?;
                            stdout.flush()?;
                            request.stdout_cursor = chunk.cursor;
                        }
                    }
                }
                Ok(None) => return Ok(()),
                Err(status) => {
                    let error = ClientError::Status(status);
                    let retryable = matches!(
                        error.code(),
                        Some(tonic::Code::Unavailable)
                            | Some(tonic::Code::Unknown)
                            | Some(tonic::Code::Internal)
                            | Some(tonic::Code::Cancelled)
                    ) && (error.code() == Some(tonic::Code::Unavailable)
                        || error.reason().is_none());
                    if !retryable {
                        return Err(error.into());
                    }
                    let since = *broken_since.get_or_insert_with(tokio::time::Instant::now);
                    if since.elapsed() > LOGS_RESUME_DEADLINE {
                        return Err(error.into());
                    }
                    break;
                }
            }
        }
        // The replica went away: resume where we were, wherever answers.
        client.forget_preferred();
        tokio::time::sleep(LOGS_RESUME_BACKOFF).await;
    }
}

/// Runs a command in a sandbox and prints its output; returns its exit
/// code. Not resumed or retried once started: a command may not be
/// repeatable.
pub(crate) async fn exec(
    client: &mut Client,
    reference: v1::SandboxRef,
    command: Vec<String>,
    env: HashMap<String, String>,
    timeout_seconds: u32,
) -> anyhow::Result<i32> {
    let request = v1::ExecSandboxRequest {
        sandbox: Some(reference),
        command,
        env,
        timeout_seconds,
    };
    let mut stream = client
        .palisade(|mut api| {
            let request = request.clone();
            async move { api.exec_sandbox(request).await }
        })
        .await?;
    loop {
        match stream.message().await {
            Ok(Some(message)) => match message.output {
                Some(v1::exec_output::Output::Stdout(bytes)) => {
                    let mut stdout = std::io::stdout().lock();
                    stdout.write_all(&bytes)?;
                    stdout.flush()?;
                }
                Some(v1::exec_output::Output::Stderr(bytes)) => {
                    let mut stderr = std::io::stderr().lock();
                    stderr.write_all(&bytes)?;
                    stderr.flush()?;
                }
                Some(v1::exec_output::Output::ExitCode(code)) => return Ok(code),
                None => {}
            },
            Ok(None) => anyhow::bail!(
                "the exec stream ended without an exit code; the command's outcome is unknown"
            ),
            Err(status) => anyhow::bail!(
                "the exec stream broke ({}); the command's outcome is unknown (it is killed \
                 when its replica notices)",
                ClientError::Status(status)
            ),
        }
    }
}
