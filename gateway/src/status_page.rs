//! The status page (`/` on `--metrics-listen`): one server-rendered HTML
//! document about the cluster as this replica can see it — members with
//! role, term, commit and applied index and lag; the leader history; the
//! projection's lag; sandboxes by phase per workspace; the last write
//! requests this replica took, with outcome and latency.
//!
//! # Decisions
//!
//! - **Each member speaks for itself.** A member's role and indexes are
//!   asked of that member (`ClusterAdmin.GetClusterInfo`, 1 s each, all at
//!   once): only it knows its applied index, and a member that does not
//!   answer is shown as unreachable rather than with stale numbers. The
//!   lag is the highest commit index heard minus the member's applied index.
//! - **No build step, no script library.** Plain HTML and CSS, re-rendered
//!   on every load; a `<meta http-equiv="refresh">` reloads it every
//!   [`REFRESH_SECONDS`] seconds. Every value from the state is escaped.
//! - **Stable hooks for tests and scrapers.** The leader is in
//!   `#leader[data-node-id]`, each member a `tr.member[data-node-id]
//!   [data-role]`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use palisade_proto::v1::{self, cluster_admin_client::ClusterAdminClient};

use crate::admin::cluster_info;
use crate::executor::Executor;
use crate::observe::LeaderHistory;
use crate::replica::Replica;

/// Seconds between the page's reloads.
pub const REFRESH_SECONDS: u64 = 1;

/// How long the page waits for each member's answer.
const MEMBER_ANSWER_TIMEOUT: Duration = Duration::from_secs(1);

/// HTML-escapes `text`.
fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for character in text.chars() {
        match character {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&#39;"),
            other => escaped.push(other),
        }
    }
    escaped
}

/// Asks member `node_id` at `address` (its peer port, as the membership
/// records it) for its view, over the same mutual TLS as Raft when the
/// cluster runs TLS (the peer port serves `GetClusterInfo`); `Err` says
/// why it could not.
async fn ask_member(
    address: &str,
    node_id: u64,
    tls: Option<&palisade_raft::tls::TlsMaterial>,
) -> Result<v1::ClusterInfo, String> {
    let ask = async {
        let endpoint = palisade_raft::tls::peer_endpoint(address, node_id, tls)
            .map_err(|error| format!("bad address: {error}"))?
            .connect_timeout(MEMBER_ANSWER_TIMEOUT);
        let channel = palisade_raft::simnet::channel(endpoint)
            .await
            .map_err(|error| format!("unreachable: {error}"))?;
        ClusterAdminClient::new(channel)
            .get_cluster_info(v1::GetClusterInfoRequest {})
            .await
            .map(tonic::Response::into_inner)
            .map_err(|status| format!("{:?}: {}", status.code(), status.message()))
    };
    tokio::time::timeout(MEMBER_ANSWER_TIMEOUT, ask)
        .await
        .unwrap_or_else(|_| Err("no answer within 1 s".into()))
}

fn format_time(ms: i64) -> String {
    // UTC, seconds precision, without pulling in a date library.
    let seconds = ms.div_euclid(1000);
    let (days, of_day) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}Z",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    )
}

/// Renders the page.
pub async fn render(replica: &Replica, executor: &Executor, history: &LeaderHistory) -> String {
    let own = cluster_info(replica, executor).await;
    let tls = replica.peers.tls().cloned();
    let mut asked = Vec::new();
    for member in &own.members {
        let address = member.address.clone();
        let node_id = member.node_id;
        let own = own.clone();
        let tls = tls.clone();
        asked.push(async move {
            let answer = if node_id == own.node_id {
                Ok(own)
            } else {
                ask_member(&address, node_id, tls.as_ref()).await
            };
            (node_id, answer)
        });
    }
    let answers: BTreeMap<u64, Result<v1::ClusterInfo, String>> =
        futures::future::join_all(asked).await.into_iter().collect();
    let highest_commit = answers
        .values()
        .filter_map(|answer| answer.as_ref().ok())
        .map(|info| info.commit_index)
        .max()
        .unwrap_or(own.commit_index);

    let mut page = String::new();
    let _ = write!(
        page,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_SECONDS}\">\
         <title>Palisade — node {node}</title>\
         <style>body{{font-family:system-ui,sans-serif;margin:2em;color:#222}}\
         table{{border-collapse:collapse;margin-bottom:1.5em}}\
         th,td{{border:1px solid #ccc;padding:.3em .7em;text-align:left}}\
         th{{background:#f3f3f3}}.leader{{font-weight:bold;background:#e8f5e9}}\
         .unreachable{{color:#b71c1c}}.muted{{color:#777}}</style></head><body>\n\
         <h1>Palisade cluster — seen from node {node}</h1>\n",
        node = own.node_id
    );
    match own.leader_id {
        Some(leader) => {
            let _ = writeln!(
                page,
                "<p id=\"leader\" data-node-id=\"{leader}\">Leader: <b>node {leader}</b> at {} — term {}</p>",
                escape(&own.leader_address),
                own.term
            );
        }
        None => {
            let _ = writeln!(
                page,
                "<p id=\"leader\" data-node-id=\"\">Leader: <b>none known</b> (an election may be running) — term {}</p>",
                own.term
            );
        }
    }
    if !own.cluster_id.is_empty() {
        let _ = writeln!(
            page,
            "<p class=\"muted\">Cluster {}</p>",
            escape(&own.cluster_id)
        );
    }

    page.push_str(
        "<h2>Members</h2>\n<table id=\"members\"><tr><th>node</th><th>address</th><th>membership</th>\
         <th>role</th><th>term</th><th>commit index</th><th>applied index</th><th>lag (entries)</th></tr>\n",
    );
    for member in &own.members {
        let answer = &answers[&member.node_id];
        let is_leader = own.leader_id == Some(member.node_id);
        match answer {
            Ok(info) => {
                let _ = writeln!(
                    page,
                    "<tr class=\"member{}\" data-node-id=\"{}\" data-role=\"{}\"><td>{}</td><td>{}</td><td>{}</td>\
                     <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    if is_leader { " leader" } else { "" },
                    member.node_id,
                    escape(&info.server_state),
                    member.node_id,
                    escape(&member.address),
                    escape(&member.role),
                    escape(&info.server_state),
                    info.term,
                    info.commit_index,
                    info.applied_index,
                    highest_commit.saturating_sub(info.applied_index),
                );
            }
            Err(why) => {
                let _ = writeln!(
                    page,
                    "<tr class=\"member unreachable\" data-node-id=\"{}\" data-role=\"unreachable\"><td>{}</td><td>{}</td>\
                     <td>{}</td><td colspan=\"5\">unreachable: {}</td></tr>",
                    member.node_id,
                    member.node_id,
                    escape(&member.address),
                    escape(&member.role),
                    escape(why),
                );
            }
        }
    }
    page.push_str("</table>\n");

    page.push_str("<h2>Leader history</h2>\n<table id=\"leader-history\"><tr><th>seen at</th><th>term</th><th>leader</th></tr>\n");
    for change in history.changes().iter().rev() {
        let _ = writeln!(
            page,
            "<tr><td>{}</td><td>{}</td><td>node {}</td></tr>",
            format_time(change.seen_at_ms),
            change.term,
            change.leader
        );
    }
    page.push_str("</table>\n");

    page.push_str("<h2>Projection</h2>\n");
    match &own.projection {
        Some(projection) => {
            let _ = writeln!(
                page,
                "<table id=\"projection\"><tr><th>state</th><th>projected index</th><th>lag (entries)</th>\
                 <th>lag (ms)</th><th>last error</th></tr><tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr></table>",
                escape(&projection.state),
                projection.projected_index,
                projection.lag_entries,
                projection.lag_ms,
                escape(&projection.last_error),
            );
        }
        None => page.push_str(
            "<p id=\"projection\" class=\"muted\">No PostgreSQL projection (--postgres-url not given).</p>\n",
        ),
    }

    // Sandboxes by phase per workspace, from this replica's applied state.
    // Kept at apply (the census): no scan of the state per page.
    let census = replica.state.census();
    let mut by_workspace: BTreeMap<String, palisade_lifecycle::census::PhaseCounts> = replica
        .state
        .read(|applied| applied.state.workspaces.keys().cloned().collect::<Vec<_>>())
        .into_iter()
        .map(|name| (name, Default::default()))
        .collect();
    for (workspace, counts) in census.by_workspace() {
        by_workspace.insert(workspace.clone(), *counts);
    }
    page.push_str("<h2>Sandboxes by phase</h2>\n<table id=\"sandboxes\"><tr><th>workspace</th>");
    for phase in palisade_lifecycle::SandboxPhase::ALL {
        let _ = write!(page, "<th>{}</th>", phase.as_str());
    }
    page.push_str("<th>total</th></tr>\n");
    for (workspace, counts) in &by_workspace {
        let _ = write!(page, "<tr><td>{}</td>", escape(workspace));
        for count in counts {
            let _ = write!(page, "<td>{count}</td>");
        }
        let _ = writeln!(page, "<td>{}</td></tr>", counts.iter().sum::<u64>());
    }
    page.push_str("</table>\n");

    page.push_str(
        "<h2>Last operations on this replica</h2>\n<table id=\"operations\"><tr><th>finished at</th>\
         <th>operation</th><th>outcome</th><th>latency (ms)</th><th>trace id</th></tr>\n",
    );
    for request in replica.metrics.recent_requests() {
        let _ = writeln!(
            page,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.1}</td><td><code>{}</code></td></tr>",
            format_time(request.finished_at_ms),
            escape(&request.method),
            request.code,
            request.seconds * 1000.0,
            escape(&request.trace_id),
        );
    }
    page.push_str("</table>\n");
    let _ = writeln!(
        page,
        "<p class=\"muted\">Rendered at {} by node {}; reloads every {REFRESH_SECONDS} s. \
         Metrics: <a href=\"/metrics\">/metrics</a>.</p></body></html>",
        format_time(crate::observe::now_ms()),
        own.node_id
    );
    page
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_formats() {
        assert_eq!(
            escape("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        assert_eq!(format_time(0), "1970-01-01 00:00:00Z");
        assert_eq!(format_time(1_798_675_200_000), "2026-12-31 00:00:00Z");
    }
}
