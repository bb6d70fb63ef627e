//! A configuration reloaded (SIGHUP, `yscontrol reload`): the new file
//! is read and checked first, and a bad one changes nothing; what only a
//! restart applies is said so; the reload is audited either way.

use crate::config::Config;

use super::error::ReloadError;
use super::startup::start_notifier;
use super::state::Daemon;

impl Daemon {
    /// SIGHUP or `yscontrol reload`: validate first; a bad file changes nothing.
    pub(super) fn reload(&mut self, requested_by: Option<&str>) -> Result<String, ReloadError> {
        let path = self.core.config.path.clone();
        let who = requested_by
            .map(|u| format!(" (requested by {u})"))
            .unwrap_or_default();
        let result = match Config::load(&path) {
            Err(e) => Err(ReloadError::Invalid(e)),
            Ok(new) if new.spool_dir != self.core.config.spool_dir => {
                Err(ReloadError::SpoolMoved {
                    from: self.core.config.spool_dir.clone(),
                    to: new.spool_dir,
                })
            }
            Ok(new) if new.gpus != self.core.config.gpus => Err(ReloadError::GpusChanged),
            Ok(new) => {
                let notify_changed = (&new.notify_command, new.notify_timeout_secs)
                    != (
                        &self.core.config.notify_command,
                        self.core.config.notify_timeout_secs,
                    );
                if notify_changed {
                    match start_notifier(&new) {
                        Ok(n) => self.notifier = n,
                        Err(e) => {
                            tracing::error!(target: "ysched::daemon", "notifications stay as they were: {e}")
                        }
                    }
                }
                let later = self.core.config.needs_restart(&new);
                let cpus = new.cpus.unwrap_or_else(crate::exec::local::host_cpus);
                let mem_mb = new
                    .memory_mb
                    .unwrap_or_else(crate::exec::local::host_memory_mb);
                self.nodes.change(&self.core.config.node_name, |node| {
                    node.cpus = cpus;
                    node.mem_mb = mem_mb;
                });
                self.core.config = new;
                self.core.users.clear();
                self.core.policy.pass_tree = None;
                self.reschedule = true;
                self.snapshot = None;
                let not_applied = if later.is_empty() {
                    String::new()
                } else {
                    format!("; not applied until ysctld restarts: {}", later.join(", "))
                };
                match self.load_budgets(self.now()) {
                    Ok(()) => Ok(format!(
                        "config {} reloaded ({} CPUs, {} MiB){not_applied}",
                        path.display(),
                        cpus,
                        mem_mb
                    )),
                    Err(e) => Err(ReloadError::Budgets {
                        path: path.clone(),
                        source: Box::new(e),
                    }),
                }
            }
        };
        match &result {
            Ok(m) => tracing::info!(target: "ysched::daemon", "{m}{who}"),
            Err(m) => tracing::error!(target: "ysched::daemon", "{m}{who}"),
        }
        let text = match &result {
            Ok(m) => m.clone(),
            Err(e) => e.to_string(),
        };
        if let Err(e) = self.audit(
            self.now(),
            requested_by.unwrap_or("SIGHUP"),
            "reload",
            None,
            &text,
        ) {
            tracing::error!(target: "ysched::daemon", "reload not audited: {e}");
        }
        result
    }
}
