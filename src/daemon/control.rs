//! Control requests: one handler per variant of [`Control`]. Users act on
//! their own jobs; root and the config's admins on every job.

use crate::array::JobRef;
use crate::model::job::JobId;
use crate::proto::{Control, JobOutcome, Reply};

use super::access::admins_only;
use super::error::DaemonError;
use super::requester::{Proven, Requester};
use super::state::Daemon;
use super::steps::StepAsk;
use super::tokens::TokenAsk;

impl Daemon {
    /// Applies `control` for `user`, as `proven` says.
    pub(super) fn control(
        &mut self,
        control: Control,
        (uid, user): (u32, &str),
        proven: Proven,
        now: i64,
    ) -> Result<Reply, DaemonError> {
        let who = Requester {
            uid,
            user,
            admin: self.core.config.is_admin(uid, user),
            proven,
            channel: self.turn.channel,
            vouched_by: None,
        };
        self.control_by(control, &who, now)
    }

    /// Applies `control` for `who`.
    pub(super) fn control_by(
        &mut self,
        control: Control,
        who: &Requester,
        now: i64,
    ) -> Result<Reply, DaemonError> {
        match control {
            Control::Cancel {
                selector,
                signal,
                to,
            } => {
                let ask = super::cancel::CancelAsk {
                    selector,
                    signal,
                    to,
                };
                self.handle_with(|core, reads, fx| {
                    super::cancel::on_cancel(core, reads, ask, who, now, fx)
                })
            }
            Control::Hold { job_ids } => self.on_jobs(&job_ids, |d, ids| {
                d.handle_with(|core, reads, fx| {
                    super::holds::on_hold(core, reads, ids, (who, now), fx)
                })
            }),
            Control::Release { job_ids } => self.on_jobs(&job_ids, |d, ids| {
                d.handle_with(|core, reads, fx| {
                    super::holds::on_release(core, reads, ids, (who, now), fx)
                })
            }),
            Control::Approve { job_ids } => self.on_jobs(&job_ids, |d, ids| {
                d.handle_with(|core, reads, fx| {
                    super::holds::on_approve(core, reads, ids, (who, now), fx)
                })
            }),
            Control::Update { job_ids, changes } => self.on_jobs(&job_ids, |d, ids| {
                d.handle_with(|core, reads, fx| {
                    super::update::on_update(core, reads, (ids, &changes), (who, now), fx)
                })
            }),
            Control::Checkpoint { job_ids } => self.on_jobs(&job_ids, |d, ids| {
                d.handle_with(|core, reads, fx| {
                    super::requeue::on_checkpoint(core, reads, ids, (who, now), fx)
                })
            }),
            Control::Requeue { job_ids } => self.on_jobs(&job_ids, |d, ids| {
                d.handle_with(|core, reads, fx| {
                    super::requeue::on_requeue(core, reads, ids, (who, now), fx)
                })
            }),
            Control::Suspend { job_ids } => self.on_jobs(&job_ids, |d, ids| {
                d.handle_with(|core, reads, fx| {
                    super::suspend::on_suspend(core, reads, ids, (who, now), fx)
                })
            }),
            Control::Resume { job_ids } => self.on_jobs(&job_ids, |d, ids| {
                d.handle_with(|core, reads, fx| {
                    super::suspend::on_resume(core, reads, ids, (who, now), fx)
                })
            }),
            Control::Drain { gpus, reason, node } => self.handle_with(|core, reads, fx| {
                super::node_admin::on_drain_gpus(
                    core,
                    reads,
                    (node, &gpus, Some(reason)),
                    (who, now),
                    fx,
                )
            }),
            Control::NodeDrain { node, reason } => self.handle_with(|core, reads, fx| {
                super::node_admin::on_drain_node(core, reads, (&node, Some(reason)), (who, now), fx)
            }),
            Control::NodeResume { node } => self.handle_with(|core, reads, fx| {
                super::node_admin::on_drain_node(core, reads, (&node, None), (who, now), fx)
            }),
            Control::NodeAdd { node } => self.handle_with(|core, reads, fx| {
                super::node_admin::on_add_node(core, reads, &node, (who, now), fx)
            }),
            step @ (Control::StepBegin { .. }
            | Control::StepEnd { .. }
            | Control::CancelStep { .. }) => self.step_control(step, who, now),
            access @ (Control::Token { .. }
            | Control::Tokens { .. }
            | Control::RevokeTokens { .. }
            | Control::Attach { .. }
            | Control::EndAllocation { .. }) => self.access_control(access, who, now),
            Control::NodeRemove { node } => self.handle_with(|core, reads, fx| {
                super::node_admin::on_remove_node(core, reads, &node, (who, now), fx)
            }),
            Control::ImagePull { image, node } => Ok(self.pull_image(&image, node.as_deref(), who)),
            Control::Undrain { gpus, node } => self.handle_with(|core, reads, fx| {
                super::node_admin::on_drain_gpus(core, reads, (node, &gpus, None), (who, now), fx)
            }),
            Control::Reload => Ok(self.reload_for(who)),
            Control::Takeover => Ok(self.takeover_for(who)),
        }
    }

    /// A token's request, or an interactive allocation's: its tokens
    /// made, listed, revoked; its allocation looked at or ended.
    fn access_control(
        &mut self,
        control: Control,
        who: &Requester,
        now: i64,
    ) -> Result<Reply, DaemonError> {
        match control {
            Control::Token {
                lifespan,
                user,
                audience,
            } => {
                let ask = TokenAsk {
                    lifespan,
                    user,
                    audience,
                };
                self.handle_with(|core, reads, fx| {
                    super::tokens::on_make_token(core, reads, ask, (who, now), fx)
                })
            }
            Control::Tokens { user, all_users } => self.handle_with(|_, reads, _| {
                super::tokens::on_list_tokens(reads, (user, all_users), (who, now))
            }),
            Control::RevokeTokens { jti, user } => self.handle_with(|_, reads, fx| {
                super::tokens::on_revoke_tokens(reads, (jti, user), (who, now), fx)
            }),
            Control::Attach { job_id } => self.handle_with(|core, reads, _| {
                super::allocations::on_attach(core, reads, job_id, (who, now))
            }),
            Control::EndAllocation {
                job_id,
                exit_code,
                signal,
            } => {
                let exit = crate::model::job::ExitStatus {
                    code: exit_code,
                    signal,
                };
                self.handle_with(|core, reads, fx| {
                    super::allocations::on_end_allocation(
                        core,
                        reads,
                        (job_id, exit),
                        (who, now),
                        fx,
                    )
                })
            }
            other => Ok(Reply::Rejected {
                error: format!(
                    "{} is not a token's or an allocation's request",
                    other.action()
                ),
            }),
        }
    }

    /// A step's control request: its beginning, its end, its cancel.
    fn step_control(
        &mut self,
        control: Control,
        who: &Requester,
        now: i64,
    ) -> Result<Reply, DaemonError> {
        match control {
            Control::StepBegin {
                job_id,
                name,
                nodes,
                tasks,
                pid,
            } => {
                let ask = StepAsk {
                    job: job_id,
                    name,
                    nodes,
                    tasks,
                    pid,
                };
                self.handle_with(|core, reads, fx| {
                    super::steps::on_begin_step(core, reads, ask, (who, now), fx)
                })
            }
            Control::StepEnd {
                job_id,
                restart,
                step,
                exit_code,
                signal,
                usage,
            } => {
                let exit = crate::model::job::ExitStatus {
                    code: exit_code,
                    signal,
                };
                let key = (job_id, restart, step);
                self.handle_with(|core, reads, fx| {
                    super::steps::on_end_step(core, reads, (key, exit, usage), (who, now), fx)
                })
            }
            Control::CancelStep {
                job_id,
                step,
                signal,
            } => self.handle_with(|core, reads, fx| {
                super::steps::on_cancel_step(core, reads, ((job_id, step), signal), who, fx)
            }),
            other => Ok(Reply::Rejected {
                error: format!("{} is not a step's request", other.action()),
            }),
        }
    }

    /// `act` on the jobs `job_ids` name (arrays expanded), with an outcome
    /// for each reference that names no job.
    fn on_jobs(
        &mut self,
        job_ids: &[JobRef],
        act: impl FnOnce(&mut Self, &[JobId]) -> Result<Reply, DaemonError>,
    ) -> Result<Reply, DaemonError> {
        let (ids, unknown) = self.expand(job_ids)?;
        act(self, &ids).map(|reply| reply.with_outcomes(unknown))
    }

    /// `yscontrol reconfigure` (admins).
    fn reload_for(&mut self, who: &Requester) -> Reply {
        if let Some(refused) = admins_only(who, "reload the config") {
            return refused;
        }
        match self.reload(Some(who)) {
            Ok(message) => Reply::Control {
                outcomes: Vec::new(),
                message: Some(message),
            },
            Err(e) => Reply::Rejected {
                error: e.to_string(),
            },
        }
    }

    /// `yscontrol takeover` (admins): with `[standby]`, this controller
    /// stops once this turn is committed and answered, then gives its
    /// lease up, so that the standby leads at its next campaign; the
    /// jobs run on and are adopted, as after a restart.
    fn takeover_for(&mut self, who: &Requester) -> Reply {
        if let Some(refused) = admins_only(who, "hand the lead over") {
            return refused;
        }
        let name = self
            .core
            .config
            .standby
            .as_ref()
            .map_or_else(String::new, |s| s.name.clone());
        let Some(leadership) = &mut self.store.leadership else {
            return Reply::Rejected {
                error: "this controller has no [standby] table: there is no other controller to take over".into(),
            };
        };
        leadership.handing_over = true;
        let term = leadership.term.0;
        self.shutdown = true;
        let (now, detail) = (self.now(), format!("term {term}, {name}"));
        if let Err(e) = self.audit(now, who.user, "takeover", None, &detail) {
            tracing::error!(target: "ysched::daemon", "takeover not audited: {e}");
        }
        Reply::Control {
            outcomes: Vec::new(),
            message: Some(format!(
                "{name} hands the lead over (term {term}): it stops now and gives its lease up; the standby leads at its next campaign and adopts the running jobs"
            )),
        }
    }

    /// The jobs the references name (see [`Core::expand`]).
    fn expand(&self, refs: &[JobRef]) -> Result<(Vec<JobId>, Vec<JobOutcome>), DaemonError> {
        self.core.expand(&self.reads(), refs)
    }
}
