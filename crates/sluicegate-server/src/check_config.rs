//! `sluicegate check-config PATH`: validate rule files without serving.

use std::io::Write;
use std::path::PathBuf;

use sluicegate_rules::{LoadOptions, RuleSet};

/// Arguments of `check-config`.
#[derive(Debug, clap::Args)]
pub(crate) struct CheckConfigArgs {
    /// A rule file, or a directory of `*.yaml` / `*.yml` rule files.
    path: PathBuf,
    /// Merge files that name the same domain (envoyproxy/ratelimit's `MERGE_DOMAIN_CONFIG`)
    /// instead of rejecting the second one.
    #[arg(long, env = "SLUICEGATE_MERGE_DOMAINS")]
    merge_domains: bool,
    /// Print the resolved rules as JSON (the form `GET /rlconfig` serves) instead of text.
    #[arg(long)]
    json: bool,
}

/// Loads the rules: when they are valid, prints them to `out` (warnings to `err`) and returns
/// `true`; otherwise prints every error as `file:line:column: message` to `err` and returns
/// `false`. Only a failure to write is an error.
pub(crate) fn run(
    args: &CheckConfigArgs,
    out: &mut impl Write,
    err: &mut impl Write,
) -> anyhow::Result<bool> {
    let options = LoadOptions::default().merge_domains(args.merge_domains);
    match RuleSet::load(&args.path, &options) {
        Ok(rules) => {
            for warning in rules.warnings() {
                writeln!(err, "warning: {warning}")?;
            }
            if args.json {
                serde_json::to_writer_pretty(&mut *out, &rules)?;
                writeln!(out)?;
            } else {
                write!(out, "{rules}")?;
            }
            Ok(true)
        }
        Err(errors) => {
            for error in errors.errors() {
                writeln!(err, "{error}")?;
            }
            Ok(false)
        }
    }
}
