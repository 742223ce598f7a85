//! Conversions between the lifecycle core's types and the `palisade.v1`
//! messages. The API never exposes the core's types directly, so either can
//! evolve behind this file.

use palisade_lifecycle as core;
use palisade_proto::v1;

/// Core phase -> API phase.
pub fn phase_to_proto(phase: core::SandboxPhase) -> v1::SandboxPhase {
    use core::SandboxPhase as P;
    match phase {
        P::Provisioning => v1::SandboxPhase::Provisioning,
        P::Ready => v1::SandboxPhase::Ready,
        P::Stopping => v1::SandboxPhase::Stopping,
        P::Stopped => v1::SandboxPhase::Stopped,
        P::Starting => v1::SandboxPhase::Starting,
        P::Deleting => v1::SandboxPhase::Deleting,
        P::Error => v1::SandboxPhase::Error,
        P::Completed => v1::SandboxPhase::Completed,
        P::Unknown => v1::SandboxPhase::Unknown,
    }
}

/// API phase -> core phase (None for UNSPECIFIED).
pub fn phase_from_proto(phase: v1::SandboxPhase) -> Option<core::SandboxPhase> {
    use core::SandboxPhase as P;
    Some(match phase {
        v1::SandboxPhase::Unspecified => return None,
        v1::SandboxPhase::Provisioning => P::Provisioning,
        v1::SandboxPhase::Ready => P::Ready,
        v1::SandboxPhase::Stopping => P::Stopping,
        v1::SandboxPhase::Stopped => P::Stopped,
        v1::SandboxPhase::Starting => P::Starting,
        v1::SandboxPhase::Deleting => P::Deleting,
        v1::SandboxPhase::Error => P::Error,
        v1::SandboxPhase::Completed => P::Completed,
        v1::SandboxPhase::Unknown => P::Unknown,
    })
}

fn operation_kind_to_proto(kind: core::OperationKind) -> v1::OperationKind {
    match kind {
        core::OperationKind::Create => v1::OperationKind::Create,
        core::OperationKind::Stop => v1::OperationKind::Stop,
        core::OperationKind::Start => v1::OperationKind::Start,
        core::OperationKind::Delete => v1::OperationKind::Delete,
    }
}

/// Core restart policy -> API.
pub fn restart_policy_to_proto(policy: core::RestartPolicy) -> v1::RestartPolicy {
    match policy {
        core::RestartPolicy::Never => v1::RestartPolicy::Never,
        core::RestartPolicy::OnFailure => v1::RestartPolicy::OnFailure,
        core::RestartPolicy::Always => v1::RestartPolicy::Always,
    }
}

/// API restart policy -> core (None for an unknown value).
pub fn restart_policy_from_proto(policy: i32) -> Option<core::RestartPolicy> {
    Some(match v1::RestartPolicy::try_from(policy).ok()? {
        v1::RestartPolicy::Unspecified | v1::RestartPolicy::Never => core::RestartPolicy::Never,
        v1::RestartPolicy::OnFailure => core::RestartPolicy::OnFailure,
        v1::RestartPolicy::Always => core::RestartPolicy::Always,
    })
}

/// Core sandbox -> API sandbox, with the token of its current execution
/// (minted with the cluster's secret, when it has one).
pub fn sandbox_to_proto(
    sandbox: &core::Sandbox,
    cluster: Option<&core::ClusterIdentity>,
) -> v1::Sandbox {
    let execution = &sandbox.execution;
    v1::Sandbox {
        metadata: Some(v1::ObjectMeta {
            id: sandbox.id.clone(),
            name: sandbox.name.clone(),
            workspace: sandbox.workspace.clone(),
            labels: sandbox.labels.clone().into_iter().collect(),
            annotations: sandbox.annotations.clone().into_iter().collect(),
            resource_version: sandbox.resource_version,
            created_at_ms: sandbox.created_at_ms,
        }),
        spec: Some(v1::SandboxSpec {
            command: sandbox.spec.command.clone(),
            env: sandbox.spec.env.clone().into_iter().collect(),
            image: sandbox.spec.image.clone(),
            driver_config: sandbox.spec.driver_config.clone().into_iter().collect(),
            restart_policy: restart_policy_to_proto(sandbox.spec.restart_policy) as i32,
            cpus: sandbox.spec.cpu_millis as f64 / 1000.0,
            memory_bytes: sandbox.spec.memory_bytes,
            workdir: sandbox.spec.workdir.clone(),
        }),
        status: Some(v1::SandboxStatus {
            phase: phase_to_proto(sandbox.phase) as i32,
            execution: Some(v1::Execution {
                generation: execution.generation,
                handle: execution.handle.clone().unwrap_or_default(),
                driver: execution.driver.clone().unwrap_or_default(),
                exit_code: execution.exit_code,
            }),
            conditions: Vec::new(),
            exit_code: execution.exit_code,
            operation: sandbox.operation.as_ref().map(|op| v1::Operation {
                kind: operation_kind_to_proto(op.kind) as i32,
                generation: op.generation,
                begun_at_index: op.begun_at_index,
            }),
            message: sandbox.message.clone().unwrap_or_default(),
            ssh_host_identity: sandbox.host_identity.clone(),
            restart_count: sandbox.restart_count,
        }),
        execution_token: crate::token::mint(cluster, &sandbox.id, execution.generation),
    }
}

/// API spec -> core spec (None for an unknown restart policy). `cpus` becomes
/// thousandths of a CPU, rounded; a value that is not a finite number from 0
/// to the limit becomes `u64::MAX`, which validation refuses (INVALID_SPEC_CPUS).
pub fn spec_from_proto(spec: Option<v1::SandboxSpec>) -> Option<core::SandboxSpec> {
    let spec = spec.unwrap_or_default();
    let cpu_millis = if spec.cpus.is_finite()
        && spec.cpus >= 0.0
        && spec.cpus <= (palisade_lifecycle::limits::CPU_MILLIS_MAX / 1000) as f64
    {
        let millis = (spec.cpus * 1000.0).round() as u64;
        // A positive request below a thousandth must not read as "no limit".
        if millis == 0 && spec.cpus > 0.0 {
            u64::MAX
        } else {
            millis
        }
    } else {
        u64::MAX
    };
    Some(core::SandboxSpec {
        command: spec.command,
        env: spec.env.into_iter().collect(),
        image: spec.image,
        driver_config: spec.driver_config.into_iter().collect(),
        restart_policy: restart_policy_from_proto(spec.restart_policy)?,
        cpu_millis,
        memory_bytes: spec.memory_bytes,
        workdir: spec.workdir,
    })
}

/// Core workspace -> API workspace.
pub fn workspace_to_proto(workspace: &core::Workspace, sandbox_count: usize) -> v1::Workspace {
    v1::Workspace {
        id: workspace.id.clone(),
        name: workspace.name.clone(),
        phase: match workspace.phase {
            core::WorkspacePhase::Active => v1::WorkspacePhase::Active,
            core::WorkspacePhase::Terminating => v1::WorkspacePhase::Terminating,
        } as i32,
        resource_version: workspace.resource_version,
        created_at_ms: workspace.created_at_ms,
        sandbox_count: sandbox_count as u64,
    }
}
