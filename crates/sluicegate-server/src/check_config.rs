//! `sluicegate check-config PATH`: validate rule files without serving: the service's
//! (envoyproxy/ratelimit's format) or the proxy's, told apart by their shape.

use std::io::Write;
use std::path::{Path, PathBuf};

use sluicegate_rules::yaml::Value;
use sluicegate_server::proxy::PathMatch;

use sluicegate_rules::{LoadErrors, LoadOptions, RuleSet};
use sluicegate_server::serve::{Engine, EngineError, EngineOptions, Metrics};

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
    /// Also require what `serve --count-denied` requires: every limit's algorithm can count
    /// denied requests.
    #[arg(long, env = "SLUICEGATE_COUNT_DENIED")]
    count_denied: bool,
    /// Check a `sluicegate proxy` rule file (one with `routes:`; told by its shape without
    /// this flag).
    #[arg(long, conflicts_with_all = ["merge_domains", "json", "count_denied"])]
    proxy: bool,
}

/// Loads the rules: when they are valid, prints them to `out` (warnings to `err`) and returns
/// `true`; otherwise prints every error as `file:line:column: message` to `err` and returns
/// `false`. Only a failure to write is an error.
pub(crate) fn run(
    args: &CheckConfigArgs,
    out: &mut impl Write,
    err: &mut impl Write,
) -> anyhow::Result<bool> {
    if args.proxy || is_proxy_rule_file(&args.path) {
        return finish(check_proxy_rules(&args.path, out, err), true);
    }
    let options = LoadOptions::default().merge_domains(args.merge_domains);
    // What the service cannot honour (a leaky queue that shapes) is refused here as `serve`
    // refuses it, at its file:line:column.
    let loaded = RuleSet::load(&args.path, &options)
        .and_then(|rules| rules.check_for_service().map(|()| rules));
    let refusal = match &loaded {
        Ok(rules) if args.count_denied => refusal_to_count_denied(rules),
        _ => None,
    };
    let valid = loaded.is_ok() && refusal.is_none();
    let printed = match &refusal {
        Some(refusal) => writeln!(err, "{refusal}").and_then(|()| err.flush()),
        None => print(args, &loaded, out, err),
    };
    finish(printed.map(|()| valid), valid)
}

/// What `printed` says of the check, `valid` when the reader stopped early.
fn finish(printed: std::io::Result<bool>, valid: bool) -> anyhow::Result<bool> {
    match printed {
        // A reader that stops early (`| head`) is not a failure of the check.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(valid),
        Err(e) => Err(e.into()),
        Ok(valid) => Ok(valid),
    }
}

/// Whether `path` is a proxy's rule file: one file whose top level names `routes` (a
/// service's names `domain`). Anything unreadable is left for the service's loader to
/// report.
fn is_proxy_rule_file(path: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(path) else {
        return false;
    };
    match sluicegate_rules::yaml::parse(&text) {
        Ok(Some(root)) => match &root.value {
            Value::Map(entries) => entries.iter().any(|(key, _)| key.text == "routes"),
            _ => false,
        },
        _ => false,
    }
}

/// Checks a proxy's rule file as the proxy loads it: prints a summary to `out` and returns
/// `true`, or prints every problem as `file:line:column: message` to `err` and returns
/// `false`.
fn check_proxy_rules(
    path: &Path,
    out: &mut impl Write,
    err: &mut impl Write,
) -> std::io::Result<bool> {
    let rules = match sluicegate_server::proxy::check_rule_file(path) {
        Ok(rules) => rules,
        Err(error) => {
            writeln!(err, "{error}")?;
            err.flush()?;
            return Ok(false);
        }
    };
    writeln!(out, "proxy rules {}", path.display())?;
    for limit in &rules.limits {
        writeln!(out, "  limit {}: {}", limit.name, limit.spec)?;
    }
    for route in &rules.routes {
        let path = match &route.path {
            PathMatch::Exact(p) => format!("= {p}"),
            PathMatch::Prefix(p) => p.clone(),
            _ => "?".to_owned(),
        };
        let limits = match route.limits.is_empty() {
            true => "no limits".to_owned(),
            false => route.limits.join(", "),
        };
        writeln!(out, "  route {} ({path}): {limits}", route.name)?;
    }
    out.flush()?;
    Ok(true)
}

/// Why `serve --count-denied` would refuse `rules` (a limit whose algorithm cannot count
/// denied requests, with its file:line:column), if it would: the engine's own check.
fn refusal_to_count_denied(rules: &RuleSet) -> Option<EngineError> {
    let options = EngineOptions {
        count_denied: true,
        ..EngineOptions::default()
    };
    Engine::new(rules.clone(), options, Metrics::new().into()).err()
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
