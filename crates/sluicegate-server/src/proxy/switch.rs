//! The route table rebuilt from the rules in force and the switch's modes: when the rule file
//! changes, and when the switch changes a mode. One lock over the rules makes the two take
//! turns, so neither builds from what the other is replacing.

use std::sync::Arc;

use sluicegate_http::rate_limit::BuildError;

use crate::plumbing::{Mode, ModeError};
use crate::proxy::connection::State;
use crate::proxy::rules::Rules;
use crate::proxy::table::Table;

impl State {
    /// Serves `rules` from now on, keeping the state of every limit whose definition is
    /// unchanged; the rules in force stay if they do not build.
    pub(crate) fn install(&self, rules: Rules) -> Result<(), BuildError> {
        let mut in_force = self.rules.lock();
        self.rebuild(&rules)?;
        *in_force = rules;
        Ok(())
    }

    /// Sets route `route`'s mode (`*`: every route) and serves it from the next request on;
    /// returns the previous mode.
    pub(crate) fn set_mode(&self, route: &str, mode: Mode) -> Result<Mode, ModeError> {
        let in_force = self.rules.lock();
        let known = |name: &str| in_force.routes.iter().any(|r| r.name == name);
        let previous = self.modes.set(route, mode, known, |_, _| {})?;
        // The rules built before: only a limit Redis cannot hold fails, and those were
        // refused when the rules were loaded.
        if let Err(error) = self.rebuild(&in_force) {
            tracing::error!(%error, "proxy: the routes were not rebuilt for the new mode");
        }
        Ok(previous)
    }

    fn rebuild(&self, rules: &Rules) -> Result<(), BuildError> {
        let old = self.table.load();
        let modes = self.modes.table();
        let table = Table::build(
            rules,
            &self.limit_counters,
            &self.forwarder,
            &self.metrics,
            Some(&old),
            &modes,
        )?;
        self.table.store(Arc::new(table));
        Ok(())
    }
}
