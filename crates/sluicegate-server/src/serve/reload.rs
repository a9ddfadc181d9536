//! Hot reload: the rules path is polled for changes (so editors' renames and Kubernetes'
//! symlink swaps are seen alike); a valid change is put in force, an invalid one is reported
//! with file:line:column and the previous rules stay.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use sluicegate_rules::{LoadOptions, RuleSet, Settled};

use crate::serve::engine::Engine;
use crate::serve::metrics::{KindLabel, Metrics};

/// What identifies one version of the rule files: each file's path, length and mtime.
type Fingerprint = Vec<(PathBuf, u64, Option<SystemTime>)>;

fn fingerprint(path: &Path) -> Fingerprint {
    let mut files = Vec::new();
    let mut note = |file: &Path| {
        if let Ok(meta) = std::fs::metadata(file) {
            files.push((file.to_owned(), meta.len(), meta.modified().ok()));
        }
    };
    if path.is_dir() {
        if let Ok(entries) = std::fs::read_dir(path) {
            for entry in entries.flatten() {
                note(&entry.path());
            }
        }
    } else {
        note(path);
    }
    files.sort();
    files
}

/// Loads the rules at `path`, recording a failure in the metrics and the log (a success is
/// recorded by [`rules_in_force`] once the engine has taken them: it may still refuse them).
pub(crate) fn load_rules(
    engine_metrics: &Metrics,
    path: &Path,
    options: &LoadOptions,
) -> Option<RuleSet> {
    match RuleSet::load(path, options) {
        Ok(rules) => Some(rules),
        Err(errors) => {
            record(engine_metrics, "failure");
            for error in errors.errors() {
                tracing::error!(%error, "rule file rejected; the previous rules stay in force");
            }
            None
        }
    }
}

/// Records that the rules at `path` are in force.
pub(crate) fn rules_in_force(engine_metrics: &Metrics, path: &Path) {
    record(engine_metrics, "success");
    tracing::info!(path = %path.display(), "rules loaded");
}

fn record(engine_metrics: &Metrics, kind: &'static str) {
    engine_metrics
        .config_loads
        .get_or_create(&KindLabel { kind })
        .inc();
}

/// Polls `path` every `interval` and reloads the engine's rules when the files change, once
/// they read the same on two polls in a row ([`Settled`]: a file written in place is not
/// loaded half written).
pub(crate) async fn watch(
    engine: Arc<Engine>,
    path: PathBuf,
    options: LoadOptions,
    interval: Duration,
) {
    let mut files = Settled::new(Some(fingerprint(&path)));
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        if files.observe(fingerprint(&path)).is_none() {
            continue;
        }
        let Some(rules) = load_rules(engine.metrics(), &path, &options) else {
            continue;
        };
        match engine.replace_rules(rules) {
            Ok(()) => rules_in_force(engine.metrics(), &path),
            Err(err) => {
                record(engine.metrics(), "failure");
                tracing::error!(%err, "rules rejected; the previous rules stay in force");
            }
        }
    }
}
