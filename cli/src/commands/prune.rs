//! `palisade sandbox prune` and `palisade sandbox delete --prune`: one code
//! path, the client library's [`crate::prune`], shown with a progress bar on
//! a terminal (`indicatif`) and plain lines otherwise, then a summary.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use palisade_proto::v1;

use super::sandbox::PruneArgs;
use super::{Output, parse_phase, print_json};
use crate::client::Client;
use crate::prune::{PruneItem, PruneOptions, PruneOutcome, check_options};

/// TEST-ONLY: when set, a prune waits after its listing until this file
/// exists, so a test can change the cluster between the listing and the
/// deletes (the replacement race) deterministically. Not for operators.
const HOLD_FILE_VARIABLE: &str = "PALISADE_PRUNE_HOLD_FILE";
/// How often the test hold looks for its file.
const HOLD_POLL_INTERVAL: Duration = Duration::from_millis(20);

/// Runs a prune with the CLI's flags and prints what happened.
pub(crate) async fn run_prune(
    client: &mut Client,
    workspace: &str,
    output: Output,
    args: PruneArgs,
) -> anyhow::Result<()> {
    let phases = args
        .phases
        .iter()
        .map(|phase| {
            parse_phase(phase).map(|phase| {
                v1::SandboxPhase::try_from(phase).expect("parse_phase answers proto phases")
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let options = PruneOptions {
        workspace: workspace.to_string(),
        all_workspaces: args.all_workspaces,
        phases,
        label_expression: args.selector.join(","),
        older_than_seconds: args.older_than.unwrap_or(0),
        concurrency: args.concurrency,
        page_size: args.prune_page_size,
        dry_run: args.dry_run,
    };
    check_options(&options).map_err(anyhow::Error::msg)?;
    let scope = if options.all_workspaces {
        "every workspace".to_string()
    } else {
        format!("workspace {workspace:?}")
    };

    let listed = crate::prune::list_prunable(client, &options).await?;
    let total = listed.len();
    eprintln!(
        "listed {total} sandbox(es) to prune in {scope}{}",
        if options.dry_run { " (dry run)" } else { "" }
    );
    if let Some(hold) = std::env::var_os(HOLD_FILE_VARIABLE) {
        let hold = std::path::PathBuf::from(hold);
        while !hold.exists() {
            tokio::time::sleep(HOLD_POLL_INTERVAL).await;
        }
    }

    let bar = (output == Output::Table && std::io::stderr().is_terminal() && !options.dry_run)
        .then(|| {
            let bar = ProgressBar::new(total as u64);
            bar.set_style(
                ProgressStyle::with_template(
                    "{spinner} pruning [{bar:40}] {pos}/{len} {msg} ({elapsed}, eta {eta})",
                )
                .expect("the template is valid")
                .progress_chars("=> "),
            );
            bar
        });
    let plain_lines = output == Output::Table && bar.is_none();
    let mut done = 0usize;
    let report = crate::prune::delete_listed(client, &options, listed, |item: &PruneItem| {
        done += 1;
        if let Some(bar) = &bar {
            bar.inc(1);
            if !matches!(item.outcome, PruneOutcome::Pruned) {
                bar.println(describe(item));
            }
        } else if plain_lines {
            eprintln!("[{done}/{total}] {}", describe(item));
        }
    })
    .await;
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }

    match output {
        Output::Json => print_json(&serde_json::to_value(&report)?),
        Output::Table => {
            let verb = if report.dry_run {
                "would prune"
            } else {
                "pruned"
            };
            println!(
                "{verb} {}, skipped {}, failed {} (of {} listed in {scope})",
                report.pruned, report.skipped, report.failed, report.listed
            );
            for item in &report.items {
                if matches!(
                    item.outcome,
                    PruneOutcome::Skipped { .. } | PruneOutcome::Failed { .. }
                ) {
                    println!("  {}", describe(item));
                }
            }
        }
    }
    if report.failed > 0 {
        anyhow::bail!(
            "{} of {} deletes failed (see above); run the prune again to retry them",
            report.failed,
            report.listed
        );
    }
    Ok(())
}

fn describe(item: &PruneItem) -> String {
    let what = format!(
        "{}/{} ({}, {})",
        item.workspace, item.name, item.id, item.phase
    );
    match &item.outcome {
        PruneOutcome::Pruned => format!("pruned {what}"),
        PruneOutcome::WouldPrune => format!("would prune {what}"),
        PruneOutcome::Skipped { reason, message } => {
            format!("skipped {what}: {message} ({reason})")
        }
        PruneOutcome::Failed { reason, message } => {
            format!("FAILED {what}: {message} ({reason})")
        }
    }
}
