//! The service's side of the shared admin listener ([`crate::plumbing::admin_router`]): its
//! metrics, the live page's statistics of its rules, and the manual switch over them.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;

use crate::plumbing::{AdminApp, AdminStats, Mode, ModeError, ModeTable};
use crate::serve::engine::Engine;

impl AdminApp for Engine {
    fn render_metrics(&self) -> String {
        Engine::render_metrics(self)
    }

    fn live_stats(&self) -> AdminStats {
        Engine::live_stats(self)
    }

    fn mode_table(&self) -> ModeTable {
        self.modes().table().as_ref().clone()
    }

    fn set_mode(&self, rule: &str, mode: Mode, caller: SocketAddr) -> Result<Mode, ModeError> {
        Engine::set_mode(self, rule, mode, caller)
    }
}

/// The admin routes, answering from `engine`; with `token`, the API requires it.
pub fn admin_router(engine: Arc<Engine>, token: Option<String>) -> Router {
    crate::plumbing::admin_router(engine, token)
}
