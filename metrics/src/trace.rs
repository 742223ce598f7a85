//! W3C trace context for one request's whole path: the replica that took
//! it, the leader it was forwarded to, and the executor that performed its
//! effect.
//!
//! # Decisions
//!
//! - **The id.** A client may send a W3C `traceparent` header
//!   (`00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`); its trace id
//!   is kept. Without one (or with a malformed one, which is ignored as the
//!   W3C spec asks, never refused) the replica makes a random id.
//! - **Carrying it.** Within a replica the context is a tokio task-local
//!   ([`scope`], [`current`]): the request's handler and everything it
//!   awaits run in its task, so the peer transport reads it there and puts
//!   it into the forwarded write's gRPC metadata (`traceparent`) without
//!   every signature in between growing a parameter.
//! - **Reaching the effect.** The executor acts on operations found in the
//!   replicated state, long after and away from the request's task. The
//!   replica that proposes (or takes a forwarded write) [`remember`]s
//!   request id -> context in a bounded in-memory table, and the executor
//!   [`recall`]s it by the operation's request ids. The table is not
//!   replicated: an effect performed by a leader that did not see the
//!   request (after a failover) gets a fresh trace id, and says so in its
//!   span (`trace_origin = "executor"`). Trace ids never enter the log, so
//!   apply stays a function of the command alone.
//! - **Logs.** Spans carry `trace_id`; with `--log-format json` every line
//!   has its span fields, so one `grep` of the id across the replicas' logs
//!   shows the request's path.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::Mutex;

/// The gRPC metadata key (and HTTP header) of the W3C trace context.
pub const TRACEPARENT: &str = "traceparent";

/// How many request ids the process remembers a trace context for; the
/// oldest is forgotten first. Bounds the table whatever the request rate.
pub const REMEMBERED_REQUESTS_MAX: usize = 16_384;

/// One request's trace context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    /// 32 lowercase hex digits, never all zero.
    pub trace_id: String,
    /// 16 lowercase hex digits: the span that sent this request (the
    /// caller's, or this hop's when forwarding).
    pub parent_id: String,
    /// Trace flags (bit 0: sampled).
    pub flags: u8,
}

impl TraceContext {
    /// A new trace, with random ids.
    pub fn new_root() -> Self {
        Self {
            trace_id: random_hex(16),
            parent_id: random_hex(8),
            flags: 1,
        }
    }

    /// Parses a `traceparent` value; `None` if it is not a valid version-00
    /// (or later, read as 00) trace context.
    pub fn parse(header: &str) -> Option<Self> {
        let mut parts = header.trim().split('-');
        let version = parts.next()?;
        let trace_id = parts.next()?;
        let parent_id = parts.next()?;
        let flags = parts.next()?;
        let hex = |text: &str, length: usize| {
            text.len() == length
                && text
                    .bytes()
                    .all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte))
        };
        // Version ff is invalid; version 00 has exactly four parts.
        if !hex(version, 2) || version == "ff" || (version == "00" && parts.next().is_some()) {
            return None;
        }
        if !hex(trace_id, 32) || !hex(parent_id, 16) || !hex(flags, 2) {
            return None;
        }
        if trace_id.bytes().all(|byte| byte == b'0') || parent_id.bytes().all(|byte| byte == b'0') {
            return None;
        }
        Some(Self {
            trace_id: trace_id.to_string(),
            parent_id: parent_id.to_string(),
            flags: u8::from_str_radix(flags, 16).ok()?,
        })
    }

    /// The context from a `traceparent` header value if valid, else a new
    /// root.
    pub fn from_header_or_new(header: Option<&str>) -> Self {
        header.and_then(Self::parse).unwrap_or_else(Self::new_root)
    }

    /// The `traceparent` value for the next hop: the same trace, a new
    /// parent span id (this hop's).
    pub fn child_header(&self) -> String {
        format!("00-{}-{}-{:02x}", self.trace_id, random_hex(8), self.flags)
    }

    /// This context as a `traceparent` value.
    pub fn header(&self) -> String {
        format!("00-{}-{}-{:02x}", self.trace_id, self.parent_id, self.flags)
    }
}

/// `bytes` (at most 16) random bytes as lower-case hex, never all zero:
/// one random number and one allocation (this runs for every request).
fn random_hex(bytes: usize) -> String {
    debug_assert!(bytes <= 16, "a W3C id has at most 16 bytes");
    let bits = bytes.min(16) * 8;
    let mask = if bits == 128 {
        u128::MAX
    } else {
        (1u128 << bits) - 1
    };
    loop {
        let value = rand::random::<u128>() & mask;
        // All-zero ids are invalid; a retry is astronomically rare.
        if value != 0 {
            return format!("{value:0width$x}", width = bytes * 2);
        }
    }
}

/// Makes `context` the parent of `span` for OpenTelemetry (`--otlp-endpoint`),
/// so the exported span carries the request's trace id and hangs under the
/// caller's span. Without an OpenTelemetry layer installed it does nothing.
pub fn link_span(span: &tracing::Span, context: &TraceContext) {
    use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId};
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    let (Ok(trace_id), Ok(span_id)) = (
        TraceId::from_hex(&context.trace_id),
        SpanId::from_hex(&context.parent_id),
    ) else {
        return;
    };
    let remote = SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::new(context.flags),
        true,
        Default::default(),
    );
    let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(remote));
}

tokio::task_local! {
    static CURRENT: TraceContext;
}

/// Runs `future` with `context` as the current trace context of its task.
pub async fn scope<F: Future>(context: TraceContext, future: F) -> F::Output {
    CURRENT.scope(context, future).await
}

/// The current task's trace context, if it runs inside [`scope`].
pub fn current() -> Option<TraceContext> {
    CURRENT.try_with(Clone::clone).ok()
}

/// Request id -> trace context, bounded, oldest forgotten first.
#[derive(Default)]
struct Remembered {
    by_request: HashMap<String, TraceContext>,
    order: VecDeque<String>,
}

/// One per process: keyed by request id (a UUID or a client's unique id),
/// so replicas sharing a process (tests) cannot confuse each other's.
/// A `std::sync::Mutex`: each critical section is a map operation, never
/// held across an await.
static REMEMBERED: Mutex<Option<Remembered>> = Mutex::new(None);

/// Remembers `context` as the trace of `request_id` (see [`recall`]).
pub fn remember(request_id: &str, context: &TraceContext) {
    let mut guard = REMEMBERED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let table = guard.get_or_insert_with(Remembered::default);
    if table
        .by_request
        .insert(request_id.to_string(), context.clone())
        .is_none()
    {
        table.order.push_back(request_id.to_string());
    }
    while table.order.len() > REMEMBERED_REQUESTS_MAX {
        if let Some(oldest) = table.order.pop_front() {
            table.by_request.remove(&oldest);
        }
    }
}

/// The trace context remembered for `request_id`, if this process saw the
/// request recently.
pub fn recall(request_id: &str) -> Option<TraceContext> {
    REMEMBERED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .as_ref()
        .and_then(|table| table.by_request.get(request_id).cloned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_round_trips_and_bad_ones_are_ignored() {
        let header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let context = TraceContext::parse(header).unwrap();
        assert_eq!(context.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(context.header(), header);
        for _ in 0..100 {
            let root = TraceContext::new_root();
            assert_eq!(TraceContext::parse(&root.header()), Some(root));
        }
        let child = TraceContext::parse(&context.child_header()).unwrap();
        assert_eq!(child.trace_id, context.trace_id);
        assert_ne!(child.parent_id, context.parent_id);
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        ] {
            assert_eq!(TraceContext::parse(bad), None, "{bad:?} was accepted");
        }
        let fresh = TraceContext::from_header_or_new(Some("garbage"));
        assert!(TraceContext::parse(&fresh.header()).is_some());
    }

    #[tokio::test]
    async fn the_context_is_current_inside_its_scope_only() {
        assert_eq!(current(), None);
        let context = TraceContext::new_root();
        let seen = scope(context.clone(), async { current() }).await;
        assert_eq!(seen, Some(context.clone()));
        remember("request-1", &context);
        assert_eq!(recall("request-1"), Some(context));
        assert_eq!(recall("request-2"), None);
    }
}
