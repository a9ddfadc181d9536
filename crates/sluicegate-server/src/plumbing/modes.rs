//! The operator's manual switch: a mode per rule (serve's rules, the proxy's routes) and one
//! for the whole application, set at run time (`PUT /admin/mode`), kept across rule reloads,
//! and optionally persisted to a file so a restart keeps it.
//!
//! The whole application's mode, when not `enforce`, applies to every rule; otherwise each
//! rule's own mode applies (`enforce` unless set).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

/// How a rule's limits answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// As the rules say.
    #[default]
    Enforce,
    /// Decide and count, but answer OK (as `shadow_mode: true` in the rule file).
    Shadow,
    /// Answer OK and charge nothing.
    Open,
    /// Deny everything the rule matches, charging nothing.
    Closed,
}

impl Mode {
    /// The mode's name, as the API and the page write it.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Enforce => "enforce",
            Mode::Shadow => "shadow",
            Mode::Open => "open",
            Mode::Closed => "closed",
        }
    }
}

/// The key naming the whole service in a mode table.
pub const EVERY_RULE: &str = "*";

/// The modes in force: the whole service's, and each rule's that is not `enforce`, by rule id
/// (as `/rlconfig` names rules).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModeTable {
    /// The whole service's mode.
    #[serde(rename = "*", default)]
    pub every_rule: Mode,
    /// Each rule's mode, where set.
    #[serde(flatten)]
    pub rules: BTreeMap<String, Mode>,
}

impl ModeTable {
    /// The mode a rule answers in.
    #[inline]
    pub fn of(&self, rule_id: &str) -> Mode {
        if self.every_rule != Mode::Enforce || self.rules.is_empty() {
            return self.every_rule;
        }
        self.rules.get(rule_id).copied().unwrap_or_default()
    }

    /// Sets `rule`'s mode (`*` for the whole service); `enforce` removes a rule's entry.
    fn set(&mut self, rule: &str, mode: Mode) {
        if rule == EVERY_RULE {
            self.every_rule = mode;
        } else if mode == Mode::Enforce {
            self.rules.remove(rule);
        } else {
            self.rules.insert(rule.to_owned(), mode);
        }
    }
}

/// Why a mode could not be set or read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ModeError {
    /// The request names a rule the rules in force do not have.
    #[error("no rule {rule:?} in force (rules are named as /rlconfig names them, or \"*\")")]
    UnknownRule {
        /// The name asked for.
        rule: String,
    },
    /// The modes file cannot be read, parsed or written.
    #[error("modes file {path}: {reason}")]
    File {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
}

/// The modes of a running service, read on every call, and where they are persisted.
#[derive(Debug)]
pub struct Modes {
    table: ArcSwap<ModeTable>,
    file: Option<PathBuf>,
    /// Held while a change is made and written, so two changes at once cannot lose one.
    changing: Mutex<()>,
}

impl Modes {
    /// Modes read from `file` if it exists (else all `enforce`), persisted there on change.
    pub fn load(file: Option<PathBuf>) -> Result<Modes, ModeError> {
        let table = match &file {
            Some(path) if path.exists() => read(path)?,
            _ => ModeTable::default(),
        };
        Ok(Modes {
            table: ArcSwap::from_pointee(table),
            file,
            changing: Mutex::new(()),
        })
    }

    /// Modes starting all `enforce`, kept in memory only.
    pub fn unpersisted() -> Modes {
        Modes {
            table: ArcSwap::from_pointee(ModeTable::default()),
            file: None,
            changing: Mutex::new(()),
        }
    }

    /// The modes in force.
    #[inline]
    pub fn table(&self) -> arc_swap::Guard<Arc<ModeTable>> {
        self.table.load()
    }

    /// Sets `rule`'s mode, persists the table, and returns the previous mode. `known` says
    /// whether a rule id is in force (`*` always is); `changed(before, after)` runs once the
    /// new table is in force, before any other change can start.
    pub fn set(
        &self,
        rule: &str,
        mode: Mode,
        known: impl Fn(&str) -> bool,
        changed: impl FnOnce(&ModeTable, &ModeTable),
    ) -> Result<Mode, ModeError> {
        if rule != EVERY_RULE && !known(rule) {
            return Err(ModeError::UnknownRule {
                rule: rule.to_owned(),
            });
        }
        let _changing = self.changing.lock();
        let current = self.table.load_full();
        let previous = if rule == EVERY_RULE {
            current.every_rule
        } else {
            current.of_rule_alone(rule)
        };
        let mut next = (*current).clone();
        next.set(rule, mode);
        if let Some(path) = &self.file {
            write(path, &next)?;
        }
        let next = Arc::new(next);
        self.table.store(Arc::clone(&next));
        changed(&current, &next);
        Ok(previous)
    }
}

impl ModeTable {
    /// A rule's own mode, whatever the whole service's.
    fn of_rule_alone(&self, rule_id: &str) -> Mode {
        self.rules.get(rule_id).copied().unwrap_or_default()
    }
}

fn read(path: &Path) -> Result<ModeTable, ModeError> {
    let failed = |reason: String| ModeError::File {
        path: path.to_owned(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| failed(e.to_string()))?;
    serde_json::from_str(&text).map_err(|e| failed(e.to_string()))
}

/// Written to a temporary file and renamed over the old one, so a crash never leaves half a
/// file.
fn write(path: &Path, table: &ModeTable) -> Result<(), ModeError> {
    let failed = |reason: String| ModeError::File {
        path: path.to_owned(),
        reason,
    };
    let text = serde_json::to_string_pretty(table).map_err(|e| failed(e.to_string()))?;
    let temporary = path.with_extension("tmp");
    std::fs::write(&temporary, text + "\n").map_err(|e| failed(e.to_string()))?;
    std::fs::rename(&temporary, path).map_err(|e| failed(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_whole_service_mode_wins_unless_it_enforces() -> Result<(), ModeError> {
        let modes = Modes::load(None)?;
        let known = |rule: &str| rule == "api.user";
        assert_eq!(
            modes.set("api.user", Mode::Shadow, known, |_, _| {})?,
            Mode::Enforce
        );
        assert_eq!(modes.table().of("api.user"), Mode::Shadow);
        assert_eq!(modes.table().of("api.other"), Mode::Enforce);
        modes.set(EVERY_RULE, Mode::Open, known, |_, _| {})?;
        assert_eq!(modes.table().of("api.user"), Mode::Open);
        modes.set(EVERY_RULE, Mode::Enforce, known, |_, _| {})?;
        assert_eq!(modes.table().of("api.user"), Mode::Shadow);
        assert!(matches!(
            modes.set("api.nope", Mode::Closed, known, |_, _| {}),
            Err(ModeError::UnknownRule { .. })
        ));
        Ok(())
    }

    #[test]
    fn a_persisted_table_is_read_back() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("modes.json");
        let modes = Modes::load(Some(file.clone()))?;
        modes.set("api.user", Mode::Closed, |_| true, |_, _| {})?;
        modes.set(EVERY_RULE, Mode::Shadow, |_| true, |_, _| {})?;
        let again = Modes::load(Some(file.clone()))?;
        assert_eq!(**again.table(), **modes.table());
        std::fs::write(&file, "{\"*\": \"sometimes\"}")?;
        let error = Modes::load(Some(file)).expect_err("bad mode");
        assert!(error.to_string().contains("sometimes"), "{error}");
        Ok(())
    }
}
