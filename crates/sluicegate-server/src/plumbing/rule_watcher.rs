//! The rule-file watcher of both applications: the rules path (a file, or a directory of
//! files) is polled, so editors' renames and Kubernetes' symlink swaps are seen alike, and a
//! change is reported once the files read the same on two polls in a row ([`Settled`]: a
//! file written in place is not taken half written).

use std::path::{Path, PathBuf};
use std::time::Duration;

use sluicegate_rules::Settled;
use tokio::time::{Interval, MissedTickBehavior};

/// One version of the rule files: each file's path and bytes, by path. The bytes, not a
/// length and a modification time: a file rewritten with as many bytes within the file
/// system's time resolution is a change too.
type Fingerprint = Vec<(PathBuf, Vec<u8>)>;

/// Watches a rules path for settled changes.
#[derive(Debug)]
pub(crate) struct RuleWatcher {
    /// The paths watched: the rules, or a TLS certificate and its key.
    paths: Vec<PathBuf>,
    files: Settled<Fingerprint>,
    ticks: Interval,
}

impl RuleWatcher {
    /// Watches `path`, polled every `interval`, the files as they are now taken as loaded.
    pub(crate) fn new(path: PathBuf, interval: Duration) -> RuleWatcher {
        RuleWatcher::watching(vec![path], interval)
    }

    /// Watches every one of `paths` as one version: a change to any is a change.
    pub(crate) fn watching(paths: Vec<PathBuf>, interval: Duration) -> RuleWatcher {
        let files = Settled::new(Some(fingerprint(&paths)));
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        RuleWatcher {
            paths,
            files,
            ticks,
        }
    }

    /// The (first) path watched.
    pub(crate) fn path(&self) -> &Path {
        &self.paths[0]
    }

    /// Returns once the files have changed and settled. Cancel-safe: a poll it is dropped in
    /// the middle of is taken again.
    pub(crate) async fn changed(&mut self) {
        loop {
            self.ticks.tick().await;
            // A few small files, read in place: not worth a blocking thread.
            if self.files.observe(fingerprint(&self.paths)).is_some() {
                return;
            }
        }
    }
}

/// The files at `paths` (those a directory holds, or the file), unreadable ones left out.
fn fingerprint(paths: &[PathBuf]) -> Fingerprint {
    let mut files = Vec::new();
    let mut note = |file: PathBuf| {
        if let Ok(bytes) = std::fs::read(&file) {
            files.push((file, bytes));
        }
    };
    for path in paths {
        match std::fs::read_dir(path) {
            Ok(entries) => entries.flatten().for_each(|entry| note(entry.path())),
            Err(_) => note(path.clone()),
        }
    }
    files.sort();
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_change_is_seen_once_settled_and_only_once() -> Result<(), Box<dyn std::error::Error>>
    {
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("rules.yaml");
        std::fs::write(&file, "a: 1\n")?;
        let mut watcher = RuleWatcher::new(file.clone(), Duration::from_secs(1));
        // The same length: a length and a time would not tell it apart within a second.
        std::fs::write(&file, "a: 2\n")?;
        watcher.changed().await;
        assert_eq!(
            watcher
                .files
                .observe(fingerprint(std::slice::from_ref(&file))),
            None
        );
        Ok(())
    }

    #[test]
    fn a_directory_is_every_file_in_it() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        std::fs::write(dir.path().join("b.yaml"), "b")?;
        std::fs::write(dir.path().join("a.yaml"), "a")?;
        let files = fingerprint(&[dir.path().to_owned()]);
        let names: Vec<_> = files.iter().map(|(p, _)| p.file_name()).collect();
        assert_eq!(names, [Some("a.yaml".as_ref()), Some("b.yaml".as_ref())]);
        Ok(())
    }
}
