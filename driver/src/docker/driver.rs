//! [`DockerDriver`]: the [`ComputeDriver`] calls, each as engine calls under the
//! sandbox's lock (see the module docs for the order of the steps and why).

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use bollard::errors::Error as EngineError;
use bollard::models::{
    ContainerCreateBody, ContainerInspectResponse, ContainerStateStatusEnum,
    ContainerSummaryStateEnum, HostConfig,
};
use bollard::query_parameters::{
    CreateContainerOptions, InspectContainerOptions, ListContainersOptions, RemoveContainerOptions,
    StopContainerOptions,
};
use bollard::{ClientVersion, Docker};

use crate::process::driver::{blocking, io_uncertain, validate_fence, validate_spec_fields};
use crate::process::fencing::{
    SandboxLock, admit_fence, load_or_create_identity, lock_sandbox, read_fence, read_tombstone,
    unix_ms, write_tombstone,
};
use crate::process::records::{create_record, sync_dir};
use crate::process::{SANDBOX_LOCK_TIMEOUT, TOMBSTONE_RETENTION_DEFAULT};
use crate::{
    ComputeDriver, DriverError, DriverFuture, ExecutionHandle, ExecutionIdentity, ExecutionStatus,
    Fence, LaunchSpec,
};

use super::*;

/// The Engine API version spoken: 1.41 (Docker 20.10, Debian 12's docker.io). Fixed
/// rather than negotiated, so a gateway starts while the engine is down; every later
/// engine still serves it.
const API_VERSION: ClientVersion = ClientVersion {
    major_version: 1,
    minor_version: 41,
};
/// Longest a container name's sandbox id may be (the name is also a path on the
/// engine's host).
const SANDBOX_ID_LENGTH_MAX: usize = 128;
/// The file under the sandbox's fence directory that says generation N was asked to
/// stop: `N.stop-requested`.
const STOP_MARKER_SUFFIX: &str = ".stop-requested";
/// Exit code recorded by the engine when it did not say (a container removed
/// meanwhile): treated as unknown.
const MISSING_EXIT_CODE: i64 = -1;

/// Time limits of the Docker driver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DockerTimeouts {
    /// Deadline of one engine call (besides the grace of a stop); past it, the call
    /// is `Uncertain`.
    pub call_timeout: Duration,
    /// How long a call waits for a sandbox's lock held by another call.
    pub lock_timeout: Duration,
    /// How long a removed sandbox's tombstone (and fence) is kept (default 7 days).
    pub tombstone_retention: Duration,
}

impl Default for DockerTimeouts {
    fn default() -> Self {
        DockerTimeouts {
            call_timeout: Duration::from_secs(20),
            // Longer than the process driver's: a launch holds the lock across the
            // engine's create and start, which take seconds on a loaded host.
            lock_timeout: SANDBOX_LOCK_TIMEOUT * 3,
            tombstone_retention: TOMBSTONE_RETENTION_DEFAULT,
        }
    }
}

/// How to reach the engine and what to run.
#[derive(Clone, Debug)]
pub struct DockerConfig {
    /// The engine's address (`unix:///var/run/docker.sock`, `tcp://HOST:2376`, ...);
    /// `None`: `DOCKER_HOST`, else the local socket. `tcp://` uses TLS when
    /// `DOCKER_TLS_VERIFY` is set (certificates from `DOCKER_CERT_PATH`).
    pub host: Option<String>,
    /// Image of a spec that names none.
    pub default_image: String,
    /// Network every container joins (`none`: no network).
    pub network: String,
    /// The fence directory, shared by every replica (one host).
    pub driver_dir: PathBuf,
    /// Time limits.
    pub timeouts: DockerTimeouts,
}

/// The Docker driver. Cheap to clone.
#[derive(Clone, Debug)]
pub struct DockerDriver {
    docker: Docker,
    host: String,
    default_image: String,
    network: String,
    driver_dir: PathBuf,
    identity: String,
    timeouts: DockerTimeouts,
}

/// What the engine said about one container, as far as this driver cares.
#[derive(Debug)]
struct Container {
    id: String,
    driver_id: Option<String>,
    state: Option<ContainerStateStatusEnum>,
    exit_code: i64,
}

impl Container {
    fn from_inspect(response: ContainerInspectResponse) -> Container {
        let labels = response
            .config
            .as_ref()
            .and_then(|config| config.labels.as_ref());
        let state = response.state.as_ref();
        Container {
            id: response.id.clone().unwrap_or_default(),
            driver_id: labels.and_then(|labels| labels.get(LABEL_DRIVER_ID).cloned()),
            state: state.and_then(|state| state.status),
            exit_code: state
                .and_then(|state| state.exit_code)
                .unwrap_or(MISSING_EXIT_CODE),
        }
    }

    fn never_started(&self) -> bool {
        matches!(self.state, Some(ContainerStateStatusEnum::CREATED) | None) && self.exit_code == 0
    }

    fn handle(&self, generation: u64) -> ExecutionHandle {
        ExecutionHandle {
            generation,
            identity: ExecutionIdentity::Opaque {
                id: self.id.chars().take(12).collect(),
            },
        }
    }

    fn status(&self, generation: u64) -> ExecutionStatus {
        use ContainerStateStatusEnum as State;
        match self.state {
            Some(State::RUNNING | State::PAUSED | State::RESTARTING | State::STOPPING) => {
                ExecutionStatus::Running {
                    handle: self.handle(generation),
                }
            }
            // Removing: its processes may still be there; it is on its way out.
            Some(State::REMOVING) => ExecutionStatus::Running {
                handle: self.handle(generation),
            },
            Some(State::EXITED | State::DEAD) => ExecutionStatus::Exited {
                code: exit_code(self.exit_code),
            },
            // Created: claimed by a launch that has not started it (yet, or ever).
            // Created with an exit code: its start failed.
            Some(State::CREATED | State::EMPTY) | None => {
                if self.exit_code != 0 {
                    ExecutionStatus::Exited {
                        code: exit_code(self.exit_code),
                    }
                } else {
                    ExecutionStatus::Absent
                }
            }
        }
    }
}

fn exit_code(code: i64) -> i32 {
    i32::try_from(code).unwrap_or(i32::MAX)
}

/// Connects a client to `host` speaking [`API_VERSION`]. No connection is made yet:
/// the first call makes it (a gateway starts while its engine is down).
fn connect(host: &str, call_timeout: Duration) -> Result<Docker, EngineError> {
    let seconds = call_timeout.as_secs().max(1);
    if host.starts_with("unix://") || host.starts_with('/') {
        return Docker::connect_with_unix(host, seconds, &API_VERSION);
    }
    let tls = std::env::var_os("DOCKER_TLS_VERIFY").is_some_and(|value| !value.is_empty());
    if host.starts_with("https://") || (tls && host.starts_with("tcp://")) {
        let cert_dir = match std::env::var_os("DOCKER_CERT_PATH") {
            Some(dir) if !dir.is_empty() => PathBuf::from(dir),
            _ => std::env::var_os("HOME")
                .map(|home| PathBuf::from(home).join(".docker"))
                .unwrap_or_else(|| PathBuf::from(".docker")),
        };
        return Docker::connect_with_ssl(
            host,
            &cert_dir.join("key.pem"),
            &cert_dir.join("cert.pem"),
            &cert_dir.join("ca.pem"),
            seconds,
            &API_VERSION,
        );
    }
    if host.starts_with("tcp://") || host.starts_with("http://") {
        return Docker::connect_with_http(host, seconds, &API_VERSION);
    }
    Err(EngineError::UnsupportedURISchemeError {
        uri: host.to_owned(),
    })
}

/// The engine address of a config: the flag, else `DOCKER_HOST`, else the local socket.
pub(super) fn resolve_host(host: Option<&str>) -> String {
    match host {
        Some(host) if !host.is_empty() => host.to_owned(),
        _ => match std::env::var("DOCKER_HOST") {
            Ok(host) if !host.is_empty() => host,
            _ => "unix:///var/run/docker.sock".to_owned(),
        },
    }
}

fn engine_uncertain(host: &str, action: &str, error: &EngineError) -> DriverError {
    DriverError::Uncertain {
        message: format!("the Docker Engine at {host} did not settle {action}: {error}"),
    }
}

fn status_code(error: &EngineError) -> Option<u16> {
    match error {
        EngineError::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

impl DockerDriver {
    /// A driver for the engine `config` names, keeping its fences under
    /// `config.driver_dir` (created if missing; its identity created once). Makes no
    /// engine call: the engine may be down now and answer later.
    pub fn new(config: DockerConfig) -> io::Result<DockerDriver> {
        if config.default_image.trim().is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the Docker driver needs a default image (--docker-default-image)",
            ));
        }
        if config.network.trim().is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "--docker-network must not be empty (use `none` for no network)",
            ));
        }
        let host = resolve_host(config.host.as_deref());
        let docker = connect(&host, config.timeouts.call_timeout).map_err(|error| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("cannot use Docker host {host:?}: {error}"),
            )
        })?;
        let driver_dir = std::path::absolute(&config.driver_dir).unwrap_or(config.driver_dir);
        let dir_id = load_or_create_identity(&driver_dir).map_err(|error| {
            io::Error::new(
                error.kind(),
                format!(
                    "cannot open the Docker driver's fence directory {}: {error}",
                    driver_dir.display()
                ),
            )
        })?;
        Ok(DockerDriver {
            docker,
            host,
            default_image: config.default_image,
            network: config.network,
            driver_dir,
            identity: format!("docker:{dir_id}"),
            timeouts: config.timeouts,
        })
    }

    /// The engine address in use.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The shared fence directory.
    pub fn driver_dir(&self) -> &Path {
        &self.driver_dir
    }

    /// The highest fence admitted for a sandbox (for tests and operators).
    pub async fn fence_of(&self, sandbox_id: &str) -> Result<Option<Fence>, DriverError> {
        validate_sandbox_id(sandbox_id)?;
        let dir = self.sandbox_dir(sandbox_id);
        blocking(move || {
            read_fence(&dir).map_err(|error| io_uncertain("reading the fence of", &dir, error))
        })
        .await
    }

    /// Force-removes every container labelled with this driver's identity, with no
    /// fence and no tombstone: for test harnesses cleaning up after a run, never for
    /// a cluster's sandboxes. Returns how many went.
    pub async fn purge(&self) -> Result<usize, DriverError> {
        let label = format!("{LABEL_DRIVER_ID}={}", self.identity);
        let containers = self.containers(label).await?;
        let count = containers.len();
        for container in containers {
            if let Some(id) = container.id {
                self.force_remove(&id).await?;
            }
        }
        Ok(count)
    }

    fn sandbox_dir(&self, sandbox_id: &str) -> PathBuf {
        self.driver_dir.join(sandbox_id)
    }

    fn stop_marker(&self, sandbox_id: &str, generation: u64) -> PathBuf {
        self.sandbox_dir(sandbox_id)
            .join(format!("{generation}{STOP_MARKER_SUFFIX}"))
    }

    async fn lock(&self, sandbox_id: &str) -> Result<SandboxLock, DriverError> {
        let dir = self.sandbox_dir(sandbox_id);
        let timeout = self.timeouts.lock_timeout;
        blocking(move || {
            lock_sandbox(&dir, timeout, Duration::from_millis(2))
                .map_err(|error| io_uncertain("locking", &dir, error))
        })
        .await
    }

    /// Checks and records `fence` under `lock`.
    async fn admit(
        &self,
        lock: SandboxLock,
        sandbox_id: &str,
        fence: &Fence,
    ) -> Result<SandboxLock, DriverError> {
        let dir = self.sandbox_dir(sandbox_id);
        let fence = fence.clone();
        blocking(move || {
            // The fence record is a name: durable with the directory's fsync, and
            // the records it supersedes go only once it is (see `fencing`).
            let admitted = admit_fence(&lock, &dir, &fence)?;
            admitted
                .sync(&dir)
                .map_err(|error| io_uncertain("recording the fence of", &dir, error))?;
            admitted.made_durable();
            Ok(lock)
        })
        .await
    }

    /// Runs one engine call under the call deadline (plus `extra`).
    async fn engine<T>(
        &self,
        action: &str,
        extra: Duration,
        call: impl Future<Output = Result<T, EngineError>>,
    ) -> Result<Result<T, EngineError>, DriverError> {
        let deadline = self.timeouts.call_timeout + extra;
        tokio::time::timeout(deadline, call)
            .await
            .map_err(|_| DriverError::Uncertain {
                message: format!(
                    "the Docker Engine at {} did not answer {action} within {deadline:?}",
                    self.host
                ),
            })
    }

    /// The container of one execution; `None` when the engine says it does not exist.
    async fn find(
        &self,
        sandbox_id: &str,
        generation: u64,
    ) -> Result<Option<Container>, DriverError> {
        let name = container_name(sandbox_id, generation);
        let action = format!("inspecting container {name}");
        match self
            .engine(
                &action,
                Duration::ZERO,
                self.docker
                    .inspect_container(&name, None::<InspectContainerOptions>),
            )
            .await?
        {
            Ok(response) => Ok(Some(Container::from_inspect(response))),
            Err(error) if status_code(&error) == Some(404) => Ok(None),
            Err(error) => Err(engine_uncertain(&self.host, &action, &error)),
        }
    }

    /// `Uncertain` for a container labelled with another driver's identity.
    fn ensure_ours(&self, name: &str, container: &Container) -> Result<(), DriverError> {
        match container.driver_id.as_deref() {
            Some(id) if id == self.identity => Ok(()),
            other => Err(DriverError::Uncertain {
                message: format!(
                    "container {name} was made by driver {:?}, not by this one ({}): it is out \
                     of this driver's sight (another fence directory, another host); resolve \
                     it where it was made",
                    other.unwrap_or("(no palisade label)"),
                    self.identity
                ),
            }),
        }
    }

    fn create_body(&self, spec: &LaunchSpec, fence: &Fence) -> ContainerCreateBody {
        let command: Vec<String> = if spec.command.is_empty() {
            IDLE_COMMAND.iter().map(|part| (*part).to_owned()).collect()
        } else {
            spec.command.clone()
        };
        let image = if spec.image.is_empty() {
            self.default_image.clone()
        } else {
            spec.image.clone()
        };
        let labels = HashMap::from([
            (LABEL_DRIVER_ID.to_owned(), self.identity.clone()),
            (LABEL_CLUSTER_ID.to_owned(), fence.cluster_id.clone()),
            (LABEL_SANDBOX_ID.to_owned(), spec.sandbox_id.clone()),
            (LABEL_GENERATION.to_owned(), spec.generation.to_string()),
            (
                LABEL_FENCE.to_owned(),
                format!("{}.{}", fence.term, fence.operation_index),
            ),
        ]);
        let positive = |value: u64| (value != 0).then(|| i64::try_from(value).unwrap_or(i64::MAX));
        ContainerCreateBody {
            image: Some(image),
            // The command replaces the image's entrypoint too: argv is exactly what the
            // spec says, as with the process driver.
            entrypoint: Some(vec![command[0].clone()]),
            cmd: Some(command[1..].to_vec()),
            env: Some(
                spec.env
                    .iter()
                    .map(|(name, value)| format!("{name}={value}"))
                    .collect(),
            ),
            working_dir: (!spec.workdir.is_empty()).then(|| spec.workdir.clone()),
            labels: Some(labels),
            host_config: Some(HostConfig {
                init: Some(true),
                network_mode: Some(self.network.clone()),
                nano_cpus: positive(spec.cpu_millis.saturating_mul(1_000_000)),
                memory: positive(spec.memory_bytes),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    async fn launch_execution(
        &self,
        spec: &LaunchSpec,
        fence: &Fence,
    ) -> Result<ExecutionHandle, DriverError> {
        validate_spec_fields(spec)?;
        validate_sandbox_id(&spec.sandbox_id)?;
        validate_fence(fence, &spec.sandbox_id, Some(spec.generation))?;
        if !spec.workdir.is_empty() && !spec.workdir.starts_with('/') {
            return Err(DriverError::Rejected {
                message: format!("working directory {:?} is not absolute", spec.workdir),
            });
        }
        let name = container_name(&spec.sandbox_id, spec.generation);
        let lock = self.lock(&spec.sandbox_id).await?;
        let lock = self.admit(lock, &spec.sandbox_id, fence).await?;

        // Claim: the container of this generation, created now or found.
        let mut created = false;
        let container = match self.find(&spec.sandbox_id, spec.generation).await? {
            Some(container) => container,
            None => {
                let action = format!("creating container {name}");
                let options = CreateContainerOptions {
                    name: Some(name.clone()),
                    ..Default::default()
                };
                match self
                    .engine(
                        &action,
                        Duration::ZERO,
                        self.docker
                            .create_container(Some(options), self.create_body(spec, fence)),
                    )
                    .await?
                {
                    Ok(_) => created = true,
                    // Taken meanwhile (a gateway on another fence directory?): look.
                    Err(error) if status_code(&error) == Some(409) => {}
                    Err(EngineError::DockerResponseServerError {
                        status_code: 400 | 404,
                        message,
                    }) => {
                        // The engine refused the spec (no such image, bad limits):
                        // nothing was created.
                        return Err(DriverError::Rejected {
                            message: format!(
                                "the Docker Engine refused to create {name}: {message} (images \
                                 are not pulled: load or pull them on the engine first)"
                            ),
                        });
                    }
                    Err(error) => return Err(engine_uncertain(&self.host, &action, &error)),
                }
                self.find(&spec.sandbox_id, spec.generation)
                    .await?
                    .ok_or_else(|| DriverError::Uncertain {
                        message: format!("container {name} vanished right after its creation"),
                    })?
            }
        };
        self.ensure_ours(&name, &container)?;

        // Then check the tombstone (remove writes it under this lock).
        let sandbox_dir = self.sandbox_dir(&spec.sandbox_id);
        let (tombstone, stop_requested) = {
            let (dir, marker) = (
                sandbox_dir.clone(),
                self.stop_marker(&spec.sandbox_id, spec.generation),
            );
            blocking(move || {
                let tombstone = read_tombstone(&dir)
                    .map_err(|error| io_uncertain("reading the tombstone of", &dir, error))?;
                let stop = marker
                    .try_exists()
                    .map_err(|error| io_uncertain("reading", &marker, error))?;
                Ok((tombstone, stop))
            })
            .await?
        };
        if let Some(tombstone) = tombstone {
            if container.never_started() {
                self.force_remove(&container.id).await?;
            }
            return Err(DriverError::Fenced {
                message: format!(
                    "sandbox {} was removed ({}); generation {} is not launched{}",
                    spec.sandbox_id,
                    tombstone.fence,
                    spec.generation,
                    if created { "" } else { " (again)" }
                ),
            });
        }
        if container.never_started() && !stop_requested {
            let action = format!("starting container {name}");
            match self
                .engine(
                    &action,
                    Duration::ZERO,
                    self.docker.start_container(&container.id, None),
                )
                .await?
            {
                Ok(()) => {}
                Err(error) => {
                    // A start the engine refused may still have run the command (its
                    // state then says so); look before answering.
                    let after = self.find(&spec.sandbox_id, spec.generation).await?;
                    match after {
                        Some(after) if !after.never_started() => {}
                        _ => return Err(engine_uncertain(&self.host, &action, &error)),
                    }
                }
            }
        }
        drop(lock);
        let handle = container.handle(spec.generation);
        tracing::info!(
            sandbox_id = %spec.sandbox_id,
            generation = spec.generation,
            handle = %handle,
            %fence,
            created,
            "container launched"
        );
        Ok(handle)
    }

    async fn inspect_execution(
        &self,
        sandbox_id: &str,
        generation: u64,
    ) -> Result<ExecutionStatus, DriverError> {
        validate_sandbox_id(sandbox_id)?;
        let name = container_name(sandbox_id, generation);
        match self.find(sandbox_id, generation).await? {
            None => Ok(ExecutionStatus::Absent),
            Some(container) => {
                self.ensure_ours(&name, &container)?;
                Ok(container.status(generation))
            }
        }
    }

    async fn stop_execution(
        &self,
        sandbox_id: &str,
        generation: u64,
        grace: Duration,
        fence: &Fence,
    ) -> Result<(), DriverError> {
        validate_sandbox_id(sandbox_id)?;
        validate_fence(fence, sandbox_id, Some(generation))?;
        let name = container_name(sandbox_id, generation);
        {
            let lock = self.lock(sandbox_id).await?;
            let lock = self.admit(lock, sandbox_id, fence).await?;
            // The deciding step: from now on no launch starts this generation.
            let marker = self.stop_marker(sandbox_id, generation);
            blocking(move || {
                let _held = lock;
                create_record(&marker, &true)
                    .map(|_created| ())
                    .map_err(|error| io_uncertain("writing", &marker, error))
            })
            .await?;
        }
        let Some(container) = self.find(sandbox_id, generation).await? else {
            return Ok(());
        };
        self.ensure_ours(&name, &container)?;
        if container.never_started()
            || !matches!(
                container.status(generation),
                ExecutionStatus::Running { .. }
            )
        {
            return Ok(());
        }
        // SIGTERM, the grace, SIGKILL: the engine's stop (`docker stop -t`), which
        // answers once the container stopped.
        let seconds = i32::try_from(grace.as_secs() + u64::from(grace.subsec_nanos() > 0))
            .unwrap_or(i32::MAX);
        let action = format!("stopping container {name}");
        let options = StopContainerOptions {
            t: Some(seconds),
            signal: None,
        };
        match self
            .engine(
                &action,
                grace,
                self.docker.stop_container(&container.id, Some(options)),
            )
            .await?
        {
            Ok(()) => {}
            Err(error) if matches!(status_code(&error), Some(304 | 404)) => {}
            Err(error) => return Err(engine_uncertain(&self.host, &action, &error)),
        }
        match self.find(sandbox_id, generation).await? {
            Some(after) if matches!(after.status(generation), ExecutionStatus::Running { .. }) => {
                Err(DriverError::Uncertain {
                    message: format!("container {name} still runs after the engine's stop"),
                })
            }
            _ => Ok(()),
        }
    }

    async fn force_remove(&self, id: &str) -> Result<(), DriverError> {
        let action = format!("removing container {id}");
        let options = RemoveContainerOptions {
            force: true,
            v: true,
            link: false,
        };
        match self
            .engine(
                &action,
                Duration::ZERO,
                self.docker.remove_container(id, Some(options)),
            )
            .await?
        {
            Ok(()) => Ok(()),
            Err(error) if status_code(&error) == Some(404) => Ok(()),
            // 409: a removal of it is already in progress; the listing confirms.
            Err(error) if status_code(&error) == Some(409) => Ok(()),
            Err(error) => Err(engine_uncertain(&self.host, &action, &error)),
        }
    }

    /// Every container labelled with `filter_label=value` (all states).
    async fn containers(
        &self,
        label: String,
    ) -> Result<Vec<bollard::models::ContainerSummary>, DriverError> {
        let options = ListContainersOptions {
            all: true,
            filters: Some(HashMap::from([("label".to_owned(), vec![label])])),
            ..Default::default()
        };
        let action = "listing containers";
        self.engine(
            action,
            Duration::ZERO,
            self.docker.list_containers(Some(options)),
        )
        .await?
        .map_err(|error| engine_uncertain(&self.host, action, &error))
    }

    async fn remove_sandbox(&self, sandbox_id: &str, fence: &Fence) -> Result<(), DriverError> {
        validate_sandbox_id(sandbox_id)?;
        validate_fence(fence, sandbox_id, None)?;
        {
            let lock = self.lock(sandbox_id).await?;
            let lock = self.admit(lock, sandbox_id, fence).await?;
            let (dir, fence) = (self.sandbox_dir(sandbox_id), fence.clone());
            // Mark: the tombstone, durable before anything is removed.
            blocking(move || {
                write_tombstone(&lock, &dir, &fence)?;
                sync_dir(&dir)
                    .map_err(|error| io_uncertain("writing the tombstone of", &dir, error))
            })
            .await?;
        }
        // Then list: every container of the sandbox, whichever driver made it.
        let label = format!("{LABEL_SANDBOX_ID}={sandbox_id}");
        for container in self.containers(label.clone()).await? {
            let labels = container.labels.unwrap_or_default();
            if labels.get(LABEL_DRIVER_ID) != Some(&self.identity) {
                return Err(DriverError::Uncertain {
                    message: format!(
                        "container {} of sandbox {sandbox_id} was made by driver {:?}, not by \
                         this one ({}); it is out of this driver's sight",
                        container.id.unwrap_or_default(),
                        labels.get(LABEL_DRIVER_ID),
                        self.identity
                    ),
                });
            }
            if let Some(id) = container.id {
                self.force_remove(&id).await?;
            }
        }
        // Confirm the absence.
        let left = self.containers(label).await?;
        if !left.is_empty() {
            return Err(DriverError::Uncertain {
                message: format!(
                    "{} container(s) of sandbox {sandbox_id} still exist after their removal",
                    left.len()
                ),
            });
        }
        tracing::info!(sandbox_id, %fence, "sandbox's containers removed");
        Ok(())
    }

    async fn list_executions(&self) -> Result<Vec<(String, u64, ExecutionStatus)>, DriverError> {
        let label = format!("{LABEL_DRIVER_ID}={}", self.identity);
        let mut executions = Vec::new();
        for summary in self.containers(label).await? {
            let labels = summary.labels.clone().unwrap_or_default();
            let (Some(sandbox_id), Some(generation)) = (
                labels.get(LABEL_SANDBOX_ID),
                labels
                    .get(LABEL_GENERATION)
                    .and_then(|generation| generation.parse::<u64>().ok()),
            ) else {
                continue; // not one of ours after all: no execution to speak of
            };
            use ContainerSummaryStateEnum as State;
            let status = match summary.state {
                Some(
                    State::RUNNING
                    | State::PAUSED
                    | State::RESTARTING
                    | State::STOPPING
                    | State::REMOVING,
                ) => ExecutionStatus::Running {
                    handle: ExecutionHandle {
                        generation,
                        identity: ExecutionIdentity::Opaque {
                            id: summary
                                .id
                                .clone()
                                .unwrap_or_default()
                                .chars()
                                .take(12)
                                .collect(),
                        },
                    },
                },
                // The summary has no exit code: ask for the container.
                _ => match self.find(sandbox_id, generation).await? {
                    Some(container) => container.status(generation),
                    None => continue, // removed meanwhile
                },
            };
            executions.push((sandbox_id.clone(), generation, status));
        }
        executions.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        Ok(executions)
    }

    /// Deletes the fence directories of sandboxes whose tombstone is older than the
    /// retention and of which no container is left.
    async fn collect(&self) -> Result<usize, DriverError> {
        let retention = self.timeouts.tombstone_retention;
        let root = self.driver_dir.clone();
        let now = unix_ms(SystemTime::now());
        let candidates: Vec<String> = blocking(move || {
            let entries =
                fs::read_dir(&root).map_err(|error| io_uncertain("listing", &root, error))?;
            let mut old = Vec::new();
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if validate_sandbox_id(&name).is_err() {
                    continue;
                }
                if let Ok(Some(tombstone)) = read_tombstone(&entry.path()) {
                    let age = now.saturating_sub(tombstone.removed_at_unix_ms);
                    if u128::from(age) >= retention.as_millis() {
                        old.push(name);
                    }
                }
            }
            Ok(old)
        })
        .await?;
        let mut collected = 0;
        for sandbox_id in candidates {
            let label = format!("{LABEL_SANDBOX_ID}={sandbox_id}");
            if !self.containers(label).await?.is_empty() {
                continue;
            }
            let lock = self.lock(&sandbox_id).await?;
            let dir = self.sandbox_dir(&sandbox_id);
            blocking(move || {
                let _held = lock;
                fs::remove_dir_all(&dir).map_err(|error| io_uncertain("deleting", &dir, error))
            })
            .await?;
            collected += 1;
        }
        Ok(collected)
    }
}

/// Sandbox ids name containers and directories: ASCII letters, digits, `-`, `_`, `.`,
/// not starting with `.`.
fn validate_sandbox_id(sandbox_id: &str) -> Result<(), DriverError> {
    let valid = !sandbox_id.is_empty()
        && sandbox_id.len() <= SANDBOX_ID_LENGTH_MAX
        && !sandbox_id.starts_with('.')
        && sandbox_id
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.'));
    if valid {
        Ok(())
    } else {
        Err(DriverError::Rejected {
            message: format!(
                "sandbox id {sandbox_id:?} cannot name a container: use 1 to \
                 {SANDBOX_ID_LENGTH_MAX} ASCII letters, digits, '-', '_' or '.', not starting \
                 with '.'"
            ),
        })
    }
}

impl ComputeDriver for DockerDriver {
    fn name(&self) -> &'static str {
        "docker"
    }

    fn identity(&self) -> &str {
        &self.identity
    }

    fn runs_containers(&self) -> bool {
        true
    }

    fn launch<'a>(
        &'a self,
        spec: &'a LaunchSpec,
        fence: &'a Fence,
    ) -> DriverFuture<'a, ExecutionHandle> {
        Box::pin(self.launch_execution(spec, fence))
    }

    fn inspect<'a>(
        &'a self,
        sandbox_id: &'a str,
        generation: u64,
    ) -> DriverFuture<'a, ExecutionStatus> {
        Box::pin(self.inspect_execution(sandbox_id, generation))
    }

    fn stop<'a>(
        &'a self,
        sandbox_id: &'a str,
        generation: u64,
        grace: Duration,
        fence: &'a Fence,
    ) -> DriverFuture<'a, ()> {
        Box::pin(self.stop_execution(sandbox_id, generation, grace, fence))
    }

    fn remove<'a>(&'a self, sandbox_id: &'a str, fence: &'a Fence) -> DriverFuture<'a, ()> {
        Box::pin(self.remove_sandbox(sandbox_id, fence))
    }

    fn list(&self) -> DriverFuture<'_, Vec<(String, u64, ExecutionStatus)>> {
        Box::pin(self.list_executions())
    }

    fn collect_tombstones(&self) -> DriverFuture<'_, usize> {
        Box::pin(self.collect())
    }
}
