//! A configuration reloaded (SIGHUP, `yscontrol reload`): the new file
//! is read and checked first, and a bad one changes nothing; what only a
//! restart applies is said so; the reload is audited either way. The
//! file is read at the edge (`Daemon::reload`); `on_reload` decides over
//! the core; the edge then gives this host's node its CPUs and memory
//! and starts the new notifier, if the reload changed them.

use crate::config::{Config, ConfigError};

use super::effects::Effects;
use super::error::ReloadError;
use super::reads::Reads;
use super::requester::Requester;
use super::startup::start_notifier;
use super::state::{Core, Daemon};

/// What a reload changed beyond the core, for the edge to apply.
#[derive(Debug)]
pub(super) struct Reloaded {
    /// What the requester is told (and the log and audit say).
    pub(super) message: String,
    /// This host's CPUs and memory (MiB), as the new file says or the
    /// host has.
    pub(super) host: (u32, u64),
    /// Whether the notifier's command or timeout changed.
    pub(super) notifier_changed: bool,
}

impl Daemon {
    /// SIGHUP (`by`: `None`) or `yscontrol reload`: reads the file and
    /// applies it as `on_reload` decides; a bad file changes nothing.
    pub(super) fn reload(&mut self, by: Option<&Requester>) -> Result<String, ReloadError> {
        let (now, loaded) = (self.now(), Config::load(&self.core.config.path));
        let channel = by.map_or(self.turn.channel, |r| r.channel);
        let mut decided = None;
        let audited = self.handle_with(|core, reads, fx| {
            let by = (by.map_or("SIGHUP", |r| r.user), channel);
            decided = Some(on_reload(core, reads, loaded, (by, now), fx));
            Ok(())
        });
        if let Err(e) = audited {
            tracing::error!(target: "ysched::daemon", "reload not audited: {e}");
        }
        let Some(decided) = decided else {
            unreachable!("handle_with runs its handler before it applies anything")
        };
        let reloaded = decided?;
        let (cpus, mem_mb) = reloaded.host;
        let local = self.core.config.node_name.clone();
        self.nodes.change(&local, |node| {
            node.cpus = cpus;
            node.mem_mb = mem_mb;
        });
        if reloaded.notifier_changed {
            match start_notifier(&self.core.config) {
                Ok(n) => self.notifier = n,
                Err(e) => {
                    tracing::error!(target: "ysched::daemon", "notifications stay as they were: {e}")
                }
            }
        }
        Ok(reloaded.message)
    }
}

/// A reload by `by` (a user, or `SIGHUP`) of `loaded`, the file as read:
/// a file that does not parse, moves the spool or changes the GPU
/// inventory changes nothing; a good one becomes the core's config, its
/// users and the pass's tree read anew and budgets summed again from the
/// records (which, failing, leaves the old config). Audited either way.
pub(super) fn on_reload(
    core: &mut Core,
    reads: &dyn Reads,
    loaded: Result<Config, ConfigError>,
    ((by, channel), now): ((&str, crate::proto::Channel), i64),
    fx: &mut Effects,
) -> Result<Reloaded, ReloadError> {
    let path = core.config.path.clone();
    let result = match loaded {
        Err(e) => Err(ReloadError::Invalid(e)),
        Ok(new) if new.spool_dir != core.config.spool_dir => Err(ReloadError::SpoolMoved {
            from: core.config.spool_dir.clone(),
            to: new.spool_dir,
        }),
        Ok(new) if new.gpus != core.config.gpus => Err(ReloadError::GpusChanged),
        Ok(new) => {
            let notifier = |c: &Config| (c.notify_command.clone(), c.notify_timeout_secs);
            let notifier_changed = notifier(&new) != notifier(&core.config);
            let later = core.config.needs_restart(&new);
            let (host_cpus, host_mem) = reads.host_share();
            let host = (
                new.cpus.unwrap_or(host_cpus),
                new.memory_mb.unwrap_or(host_mem),
            );
            let old = std::mem::replace(&mut core.config, new);
            match core.load_budgets(reads, now) {
                Ok(()) => {
                    core.users.clear();
                    core.policy.pass_tree = None;
                    fx.queue_changed();
                    let not_applied = if later.is_empty() {
                        String::new()
                    } else {
                        format!("; not applied until ysctld restarts: {}", later.join(", "))
                    };
                    let message = format!(
                        "config {} reloaded ({} CPUs, {} MiB){not_applied}",
                        path.display(),
                        host.0,
                        host.1
                    );
                    Ok(Reloaded {
                        message,
                        host,
                        notifier_changed,
                    })
                }
                Err(e) => {
                    core.config = old;
                    Err(ReloadError::Budgets {
                        path: path.clone(),
                        source: Box::new(e),
                    })
                }
            }
        }
    };
    let requested = if by == "SIGHUP" {
        String::new()
    } else {
        format!(" (requested by {by})")
    };
    let text = match &result {
        Ok(r) => {
            tracing::info!(target: "ysched::daemon", "{}{requested}", r.message);
            r.message.clone()
        }
        Err(e) => {
            tracing::error!(target: "ysched::daemon", "{e}{requested}");
            e.to_string()
        }
    };
    fx.audit((now, channel), by, "reload", None, &text);
    result
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::effects::Row;
    use super::super::testing::{core_with, Archive, CONFIG};
    use super::*;
    use crate::proto::Channel;

    /// The test config with `top` keys before its tables and `account`
    /// keys in its account.
    fn parsed(top: &str, account: &str) -> Result<Config, ConfigError> {
        Config::parse(&format!("{top}{CONFIG}{account}"), Path::new("test.toml"))
    }

    fn audit(fx: &Effects) -> Vec<(&str, &str)> {
        fx.rows()
            .iter()
            .filter_map(|r| match r {
                Row::Audit { actor, detail, .. } => Some((actor.as_str(), detail.as_str())),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_good_file_becomes_the_config_with_budgets_summed_and_what_needs_a_restart_said() {
        let (mut core, mut reads, mut fx) = (
            core_with(Vec::new()),
            Archive::default(),
            Effects::default(),
        );
        reads.billed = vec![("a".into(), 30, 5), ("a".into(), 12, 100)];
        let file = parsed(
            "log_file = \"/var/log/ysched.log\"\n",
            "budget = 1000\nbudget_period = \"day\"\n",
        );
        let by = ("alice", Channel::Cli);
        let reloaded = on_reload(&mut core, &reads, file, (by, 50), &mut fx).unwrap();
        assert_eq!(
            reloaded.message,
            "config test.toml reloaded (64 CPUs, 524288 MiB); not applied until ysctld restarts: log_file"
        );
        assert_eq!(reloaded.host, (64, 524288));
        assert!(!reloaded.notifier_changed);
        assert!(core.config.accounts[0].budget.is_some());
        // The day began at 0: both ends in it.
        assert_eq!(core.policy.budgets["a"], (0, 42));
        assert!(fx.reschedule);
        assert_eq!(audit(&fx), [("alice", reloaded.message.as_str())]);
    }

    #[test]
    fn a_bad_file_or_a_moved_spool_or_new_gpus_change_nothing_and_are_audited() {
        let (mut core, reads, mut fx) = (
            core_with(Vec::new()),
            Archive::default(),
            Effects::default(),
        );
        let before = format!("{:?}", core.config);
        let sighup = ("SIGHUP", Channel::Cli);
        let bad = on_reload(
            &mut core,
            &reads,
            parsed("", "shares = \"many\"\n"),
            (sighup, 9),
            &mut fx,
        );
        let moved = on_reload(
            &mut core,
            &reads,
            parsed("spool_dir = \"/elsewhere\"\n", ""),
            (sighup, 9),
            &mut fx,
        );
        let more_gpus = CONFIG.replace("count = 4", "count = 8");
        let gpus = Config::parse(&more_gpus, Path::new("test.toml"));
        let gpus = on_reload(&mut core, &reads, gpus, (sighup, 9), &mut fx);
        assert!(bad
            .unwrap_err()
            .to_string()
            .starts_with("config not reloaded: "));
        assert!(moved.unwrap_err().to_string().contains("spool_dir changed"));
        assert!(gpus.unwrap_err().to_string().contains("[[gpus]] changed"));
        assert_eq!(format!("{:?}", core.config), before);
        assert!(!fx.reschedule);
        let audited = audit(&fx);
        assert_eq!(audited.len(), 3);
        assert!(audited
            .iter()
            .all(|(by, why)| *by == "SIGHUP" && why.contains("not reloaded")));
    }
}
