//! Hot reload: a change the plumbing's [`RuleWatcher`] sees is loaded; a valid one is put in
//! force, an invalid one is reported with file:line:column and the previous rules stay.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sluicegate_rules::{LoadOptions, RuleSet};

use crate::plumbing::RuleWatcher;

use crate::serve::engine::Engine;
use crate::serve::metrics::{KindLabel, Metrics};

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

/// Reloads the engine's rules whenever the files at `path` change and settle
/// ([`RuleWatcher`], polled every `interval`).
pub(crate) async fn watch(
    engine: Arc<Engine>,
    path: PathBuf,
    options: LoadOptions,
    interval: Duration,
) {
    let mut files = RuleWatcher::new(path, interval);
    loop {
        files.changed().await;
        let path = files.path();
        let Some(rules) = load_rules(engine.metrics(), path, &options) else {
            continue;
        };
        match engine.replace_rules(rules) {
            Ok(()) => rules_in_force(engine.metrics(), path),
            Err(err) => {
                record(engine.metrics(), "failure");
                tracing::error!(%err, "rules rejected; the previous rules stay in force");
            }
        }
    }
}
