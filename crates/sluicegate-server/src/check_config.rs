//! `sluicegate check-config PATH`: validate rule files without serving.

use std::io::Write;
use std::path::PathBuf;

use sluicegate_rules::{LoadErrors, LoadOptions, RuleSet};

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
    let loaded = RuleSet::load(&args.path, &options);
    let valid = loaded.is_ok();
    match print(args, &loaded, out, err) {
        // A reader that stops early (`| head`) is not a failure of the check.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(valid),
        Err(e) => Err(e.into()),
        Ok(()) => Ok(valid),
    }
}

fn print(
    args: &CheckConfigArgs,
    loaded: &Result<RuleSet, LoadErrors>,
    out: &mut impl Write,
    err: &mut impl Write,
) -> std::io::Result<()> {
    match loaded {
        Ok(rules) => {
            for warning in rules.warnings() {
                writeln!(err, "warning: {warning}")?;
            }
            if args.json {
                serde_json::to_writer_pretty(&mut *out, rules)?;
                writeln!(out)?;
            } else {
                write!(out, "{rules}")?;
            }
        }
        Err(errors) => {
            for error in errors.errors() {
                writeln!(err, "{error}")?;
            }
        }
    }
    out.flush()
}
