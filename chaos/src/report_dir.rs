//! `palisade chaos run --report-dir DIR`: what one campaign leaves on disk
//! for people to look at, in `DIR/seed-S/`:
//!
//! - `report.txt`: the text summary, as printed;
//! - `history.json`: every operation (client, call, invocation and answer
//!   times, attempts, reply) and every fault event;
//! - `timeline.txt`: the fault timeline, one event a line;
//! - `index.html`: one self-contained page (no script, no network: inline
//!   SVG and CSS, generated here) with, like Jepsen's plots, a timeline of
//!   the operations by client coloured by outcome, with every injected
//!   fault drawn as a band over its duration, and a latency-over-time plot.
//!
//! Every injected fault is exactly one element of class `fault-band`, and
//! every operation one element of class `op`, so the page can be checked
//! against the report's counts.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use crate::campaign::Report;
use crate::clock::seconds;
use crate::history::{FINAL_READER, FaultEvent, NEMESIS_CLIENT, Operation};

/// Width of the plots' drawing area, pixels.
const PLOT_WIDTH: f64 = 1100.0;
/// Left margin (row labels), pixels.
const MARGIN_LEFT: f64 = 90.0;
/// Height of one row of the timeline, pixels.
const ROW_HEIGHT: f64 = 18.0;
/// Height of the latency plot, pixels.
const LATENCY_HEIGHT: f64 = 260.0;
/// Narrowest band or operation drawn, pixels (an instantaneous fault stays
/// visible).
const WIDTH_MIN: f64 = 2.0;

#[derive(Serialize)]
struct HistoryFile<'a> {
    seed: u64,
    operations: &'a [Operation],
    faults: &'a [FaultEvent],
}

/// The bytes of `history.json`: the seed, every operation and every fault
/// event. In the simulation (`--sim`) the same seed gives the same bytes.
pub fn history_json(report: &Report) -> std::io::Result<Vec<u8>> {
    let history = HistoryFile {
        seed: report.seed,
        operations: &report.history,
        faults: &report.timeline,
    };
    serde_json::to_vec_pretty(&history).map_err(std::io::Error::other)
}

/// Writes the campaign's files into `dir` (created if missing).
pub fn write(report: &Report, dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("report.txt"), report.to_string())?;
    std::fs::write(dir.join("history.json"), history_json(report)?)?;
    let mut timeline = report.timeline_lines().join("\n");
    timeline.push('\n');
    std::fs::write(dir.join("timeline.txt"), timeline)?;
    std::fs::write(dir.join("index.html"), html(report))?;
    Ok(())
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn client_label(client: usize) -> String {
    match client {
        FINAL_READER => "final".into(),
        NEMESIS_CLIENT => "nemesis".into(),
        client => format!("c{client}"),
    }
}

/// The top-level nemesis kind of a fault variant (`handoff:...` → `handoff`).
fn kind_of(variant: &str) -> &str {
    variant.split(':').next().unwrap_or(variant)
}

fn colour_of_kind(kind: &str) -> &'static str {
    match kind {
        "handoff" => "#8e44ad",
        "kill" => "#c0392b",
        "pause" => "#d35400",
        "partition" => "#2980b9",
        "driver" => "#16a085",
        "clock" => "#b7950b",
        "forge" => "#34495e",
        "postgres" => "#336791",
        _ => "#7f8c8d",
    }
}

fn class_of(operation: &Operation) -> &'static str {
    operation.reply.class()
}

/// The page. See the module docs.
pub fn html(report: &Report) -> String {
    let end_us = report
        .history
        .iter()
        .map(|op| op.returned_us.unwrap_or(op.invoked_us))
        .chain(
            report
                .timeline
                .iter()
                .map(|event| event.ended_us.unwrap_or(event.at_us)),
        )
        .max()
        .unwrap_or(1)
        .max(1);
    let x = |us: u64| MARGIN_LEFT + PLOT_WIDTH * (us as f64 / end_us as f64);

    // Rows: fault kinds first (one row each), then clients in order.
    let mut fault_kinds: Vec<&str> = report
        .timeline
        .iter()
        .filter(|event| event.injected)
        .map(|event| kind_of(&event.kind))
        .collect();
    fault_kinds.sort_unstable();
    fault_kinds.dedup();
    let mut clients: Vec<usize> = report.history.iter().map(|op| op.client).collect();
    clients.sort_unstable();
    clients.dedup();
    let fault_row: BTreeMap<&str, usize> = fault_kinds
        .iter()
        .enumerate()
        .map(|(row, kind)| (*kind, row))
        .collect();
    let client_row: BTreeMap<usize, usize> = clients
        .iter()
        .enumerate()
        .map(|(row, client)| (*client, fault_kinds.len() + row))
        .collect();
    let rows = fault_kinds.len() + clients.len();
    let top = 20.0;
    let height = top + ROW_HEIGHT * rows as f64 + 30.0;
    // Room on the right for the last time label.
    let width = MARGIN_LEFT + PLOT_WIDTH + 60.0;

    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg id="timeline" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}">"#
    );
    // Row labels and guides.
    for (kind, row) in &fault_row {
        let y = top + ROW_HEIGHT * *row as f64;
        let _ = writeln!(
            svg,
            r#"<text x="4" y="{:.1}" class="label">{}</text>"#,
            y + ROW_HEIGHT * 0.7,
            escape(kind)
        );
    }
    for (client, row) in &client_row {
        let y = top + ROW_HEIGHT * *row as f64;
        let _ = writeln!(
            svg,
            r#"<text x="4" y="{:.1}" class="label">{}</text><line x1="{MARGIN_LEFT}" x2="{:.1}" y1="{:.1}" y2="{:.1}" class="guide"/>"#,
            y + ROW_HEIGHT * 0.7,
            client_label(*client),
            MARGIN_LEFT + PLOT_WIDTH,
            y + ROW_HEIGHT,
            y + ROW_HEIGHT
        );
    }
    // Faults: a band in the kind's row, and a faint band across the clients.
    let clients_top = top + ROW_HEIGHT * fault_kinds.len() as f64;
    let clients_height = ROW_HEIGHT * clients.len() as f64;
    for event in report.timeline.iter().filter(|event| event.injected) {
        let kind = kind_of(&event.kind);
        let row = fault_row.get(kind).copied().unwrap_or(0);
        let x0 = x(event.at_us);
        let x1 = x(event.ended_us.unwrap_or(event.at_us)).max(x0 + WIDTH_MIN);
        let colour = colour_of_kind(kind);
        let title = format!(
            "{} .. {} {}: {}",
            seconds(event.at_us),
            event.ended_us.map_or_else(|| "-".to_string(), seconds),
            event.kind,
            event.detail
        );
        let _ = writeln!(
            svg,
            r#"<g class="fault-band" data-kind="{}"><title>{}</title><rect x="{x0:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{colour}"/><rect x="{x0:.1}" y="{clients_top:.1}" width="{:.1}" height="{clients_height:.1}" fill="{colour}" opacity="0.10"/></g>"#,
            escape(&event.kind),
            escape(&title),
            top + ROW_HEIGHT * row as f64 + 2.0,
            x1 - x0,
            ROW_HEIGHT - 4.0,
            x1 - x0,
        );
    }
    // Operations: a bar from invocation to answer (to the end if unknown).
    for operation in &report.history {
        let row = client_row.get(&operation.client).copied().unwrap_or(0);
        let x0 = x(operation.invoked_us);
        let x1 = x(operation.returned_us.unwrap_or(end_us)).max(x0 + WIDTH_MIN);
        let class = class_of(operation);
        let title = format!(
            "#{} {} .. {} {} -> {}",
            operation.index,
            seconds(operation.invoked_us),
            operation
                .returned_us
                .map_or_else(|| "?".to_string(), seconds),
            operation.call,
            operation.reply
        );
        let _ = writeln!(
            svg,
            r#"<rect class="op {class}" x="{x0:.1}" y="{:.1}" width="{:.1}" height="{:.1}"><title>{}</title></rect>"#,
            top + ROW_HEIGHT * row as f64 + 4.0,
            x1 - x0,
            ROW_HEIGHT - 8.0,
            escape(&title)
        );
    }
    axis(&mut svg, end_us, height - 22.0, &x);
    svg.push_str("</svg>\n");

    // Latency over time: one dot per answered operation; unknown outcomes
    // on the top line.
    let latencies: Vec<(u64, f64, &'static str)> = report
        .history
        .iter()
        .map(|op| {
            let latency_ms = op.returned_us.map_or(f64::NAN, |returned| {
                (returned.saturating_sub(op.invoked_us)) as f64 / 1e3
            });
            (op.invoked_us, latency_ms, class_of(op))
        })
        .collect();
    let latency_max = latencies
        .iter()
        .map(|(_, latency, _)| *latency)
        .filter(|latency| latency.is_finite())
        .fold(1.0_f64, f64::max);
    let plot_top = 20.0;
    let plot_bottom = plot_top + LATENCY_HEIGHT;
    let y = |latency_ms: f64| plot_bottom - LATENCY_HEIGHT * (latency_ms / latency_max);
    let latency_height = plot_bottom + 30.0;
    let mut plot = String::new();
    let _ = writeln!(
        plot,
        r#"<svg id="latency" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{latency_height}" viewBox="0 0 {width} {latency_height}">"#
    );
    for event in report.timeline.iter().filter(|event| event.injected) {
        let x0 = x(event.at_us);
        let x1 = x(event.ended_us.unwrap_or(event.at_us)).max(x0 + WIDTH_MIN);
        let _ = writeln!(
            plot,
            r#"<rect class="latency-fault" x="{x0:.1}" y="{plot_top}" width="{:.1}" height="{LATENCY_HEIGHT}" fill="{}" opacity="0.10"/>"#,
            x1 - x0,
            colour_of_kind(kind_of(&event.kind))
        );
    }
    for (fraction, label) in [(0.0, 0.0), (0.5, latency_max / 2.0), (1.0, latency_max)] {
        let at = plot_bottom - LATENCY_HEIGHT * fraction;
        let _ = writeln!(
            plot,
            r#"<line x1="{MARGIN_LEFT}" x2="{:.1}" y1="{at:.1}" y2="{at:.1}" class="guide"/><text x="4" y="{:.1}" class="label">{label:.0} ms</text>"#,
            MARGIN_LEFT + PLOT_WIDTH,
            at + 4.0
        );
    }
    for (invoked_us, latency_ms, class) in &latencies {
        let cy = if latency_ms.is_finite() {
            y(*latency_ms)
        } else {
            plot_top
        };
        let _ = writeln!(
            plot,
            r#"<circle class="point {class}" cx="{:.1}" cy="{cy:.1}" r="2.5"/>"#,
            x(*invoked_us)
        );
    }
    axis(&mut plot, end_us, latency_height - 22.0, &x);
    plot.push_str("</svg>\n");

    let mut legend = String::new();
    for kind in &fault_kinds {
        let count = report.faults_by_kind.get(*kind).copied().unwrap_or(0);
        let _ = write!(
            legend,
            r#"<span class="swatch" style="background:{}"></span>{} ({count}) "#,
            colour_of_kind(kind),
            escape(kind)
        );
    }
    let verdict = if !report.is_clean() {
        format!("{} anomalies", report.anomalies.len())
    } else if report.is_vacuous() {
        format!("vacuous: {} never fired", report.vacuous.join(", "))
    } else {
        "no anomaly".to_string()
    };
    format!(
        r#"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>palisade chaos: seed {seed}</title>
<style>
body {{ font-family: sans-serif; margin: 1.5em; color: #222; }}
pre {{ background: #f6f6f6; padding: 1em; overflow-x: auto; font-size: 12px; }}
.label {{ font-size: 11px; fill: #333; }}
.guide {{ stroke: #e4e4e4; stroke-width: 1; }}
.axis {{ stroke: #999; }}
.op.ok, .point.ok {{ fill: #27ae60; }}
.op.fail, .point.fail {{ fill: #e67e22; }}
.op.unknown, .point.unknown {{ fill: #95a5a6; }}
.swatch {{ display: inline-block; width: 12px; height: 12px; margin: 0 4px 0 12px; vertical-align: middle; }}
</style>
</head>
<body>
<h1>palisade chaos: seed {seed}</h1>
<p id="verdict">{verdict}; {operations} operations, {faults} faults injected, {duration:.1} s.</p>
<h2>Timeline</h2>
<p>Operations by client, from invocation to answer: <span class="swatch" style="background:#27ae60"></span>ok <span class="swatch" style="background:#e67e22"></span>fail <span class="swatch" style="background:#95a5a6"></span>unknown (drawn to the end). Faults as bands, one row per nemesis: {legend}</p>
{svg}
<h2>Latency over time</h2>
<p>One dot per operation at its invocation, its latency up; unknown outcomes on the top line. Faults shaded.</p>
{plot}
<h2>Summary</h2>
<pre id="summary">{summary}</pre>
</body>
</html>
"#,
        seed = report.seed,
        operations = report.history.len(),
        faults = report.faults_total(),
        duration = report.duration_seconds,
        summary = escape(&report.to_string()),
    )
}

/// A time axis along the bottom, a tick every tenth of the run.
fn axis(svg: &mut String, end_us: u64, at: f64, x: &impl Fn(u64) -> f64) {
    let _ = writeln!(
        svg,
        r#"<line x1="{MARGIN_LEFT}" x2="{:.1}" y1="{at:.1}" y2="{at:.1}" class="axis"/>"#,
        MARGIN_LEFT + PLOT_WIDTH
    );
    for tenth in 0..=10u64 {
        let us = end_us * tenth / 10;
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" class="label">{}</text>"#,
            x(us) - 12.0,
            at + 14.0,
            seconds(us)
        );
    }
}
