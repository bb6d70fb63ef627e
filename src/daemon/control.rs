//! Control requests: one handler per variant of [`Control`]. Users act on
//! their own jobs; root and the config's admins on every job.

use crate::array::JobRef;
use crate::model::job::JobId;
use crate::proto::{Control, JobOutcome, Reply};

pub(super) use super::access::AccessRefusal;
use super::effects::{PoolRow, Row};
use super::error::DaemonError;
pub(super) use super::requester::{Proven, Requester};
use super::state::Daemon;

/// The refusal a request gets that only admins may make (`what` they
/// may do), if `who` is not one.
pub(super) fn admins_only(who: &Requester, what: &str) -> Option<Reply> {
    (!who.admin).then(|| Reply::Rejected {
        error: format!("permission denied: only root and the config's admins may {what}"),
    })
}

/// A token asked for: by whom, for whom, what for, for how long.
pub(super) struct TokenAsk {
    pub(super) lifespan: Option<u64>,
    pub(super) user: Option<String>,
    pub(super) audience: Option<String>,
}

/// A step asked for: in which job, what it runs, where, how many tasks.
pub(super) struct StepAsk {
    pub(super) job: JobId,
    pub(super) name: String,
    pub(super) nodes: String,
    pub(super) tasks: u32,
    pub(super) pid: u32,
}

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
            Control::Cancel { selector, signal } => {
                let ask = super::cancel::CancelAsk { selector, signal };
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
            Control::Drain { gpus, reason, node } => {
                Ok(self.drain(node, &gpus, Some(reason), who, now)?)
            }
            Control::NodeDrain { node, reason } => self.drain_node(&node, Some(reason), who, now),
            Control::NodeResume { node } => self.drain_node(&node, None, who, now),
            Control::NodeAdd { node } => self.add_node(&node, who, now),
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
                self.make_token(ask, who, now)
            }
            Control::Attach { job_id } => self.attach(job_id, who, now),
            Control::EndAllocation {
                job_id,
                exit_code,
                signal,
            } => self.end_allocation(job_id, (exit_code, signal), who, now),
            Control::Tokens { user, all_users } => self.list_tokens(user, all_users, who, now),
            Control::RevokeTokens { jti, user } => self.revoke_tokens(jti, user, who, now),
            step @ (Control::StepBegin { .. }
            | Control::StepEnd { .. }
            | Control::CancelStep { .. }) => self.step_control(step, who, now),
            Control::NodeRemove { node } => self.remove_node(&node, who, now),
            Control::ImagePull { image, node } => Ok(self.pull_image(&image, node.as_deref(), who)),
            Control::Undrain { gpus, node } => Ok(self.drain(node, &gpus, None, who, now)?),
            Control::Reload => Ok(self.reload_for(who)),
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
                self.begin_step(ask, who, now)
            }
            Control::StepEnd {
                job_id,
                restart,
                step,
                exit_code,
                signal,
            } => {
                let exit = crate::model::job::ExitStatus {
                    code: exit_code,
                    signal,
                };
                self.end_step((job_id, restart, step), exit, who, now)
            }
            Control::CancelStep {
                job_id,
                step,
                signal,
            } => self.cancel_step((job_id, step), signal, who),
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
        match self.reload(Some(who.user)) {
            Ok(message) => Reply::Control {
                outcomes: Vec::new(),
                message: Some(message),
            },
            Err(e) => Reply::Rejected {
                error: e.to_string(),
            },
        }
    }

    /// Drains GPUs of `node` (the controller's own server when `None`) or,
    /// without a `reason`, puts them back in service (admins).
    fn drain(
        &mut self,
        node: Option<String>,
        gpus: &[u32],
        reason: Option<String>,
        who: &Requester,
        now: i64,
    ) -> Result<Reply, DaemonError> {
        let verb = if reason.is_some() { "drain" } else { "resume" };
        if let Some(refused) = admins_only(who, &format!("{verb} GPUs")) {
            return Ok(refused);
        }
        let node = match self.gpus_named(node, gpus, verb) {
            Ok(node) => node,
            Err(refused) => return Ok(refused),
        };
        let mut lines = Vec::new();
        for &gpu in gpus {
            let key = (node.clone(), gpu);
            let line = match &reason {
                Some(reason) => self.drain_gpu(key, reason, who.user, now)?,
                None => self.resume_gpu(key, who.user, now)?,
            };
            lines.push(line);
        }
        self.reschedule = true;
        self.snapshot = None;
        Ok(Reply::Control {
            outcomes: Vec::new(),
            message: Some(lines.join("\n")),
        })
    }

    /// The node whose GPUs a drain names, once they are known to exist;
    /// else the refusal.
    fn gpus_named(&self, node: Option<String>, gpus: &[u32], verb: &str) -> Result<String, Reply> {
        let refuse = |error: String| Reply::Rejected { error };
        let node = match node.or_else(|| self.nodes.local().map(|l| l.name().to_string())) {
            Some(name) => name,
            None => {
                return Err(refuse(format!(
                    "this controller has no GPUs of its own: name the node, as NODE:GPU (yscontrol {verb} gpu02:1)"
                )))
            }
        };
        let Some(named) = self.nodes.named(&node) else {
            return Err(refuse(format!(
                "no node {node} is in the pool (ysinfo -N lists them)"
            )));
        };
        let count = named.facts().inventory.gpus.len() as u32;
        let server = if self.is_only_server(&node) {
            "this server".to_string()
        } else {
            node.clone()
        };
        if let Some(bad) = gpus.iter().find(|&&g| g >= count) {
            return Err(refuse(match count {
                0 => format!("GPU {bad} does not exist: {server} has no GPUs"),
                _ => format!(
                    "GPU {bad} does not exist: {server} has GPUs 0 to {}",
                    count - 1
                ),
            }));
        }
        if gpus.is_empty() {
            return Err(refuse(format!("name the GPUs to {verb}")));
        }
        Ok(node)
    }

    /// Takes one GPU out of service; a job on it runs to its end.
    fn drain_gpu(
        &mut self,
        key: crate::db::DrainKey,
        reason: &str,
        by: &str,
        now: i64,
    ) -> Result<String, DaemonError> {
        let (node, gpu) = key.clone();
        let holders: Vec<String> = self
            .core
            .jobs
            .all()
            .filter(|j| j.state.holds_gpus())
            .filter(|j| {
                j.share_on(&node)
                    .is_some_and(|share| share.gpus_alloc.contains(&gpu))
            })
            .map(|j| j.display_id())
            .collect();
        let drain = crate::report::node::Drain {
            reason: reason.to_string(),
            by: by.to_string(),
            since: now,
        };
        self.write(Row::Pool(PoolRow::GpuDrain {
            key: key.clone(),
            drain: Some(drain.clone()),
        }))?;
        self.core.policy.drains.insert(key, drain);
        let of = self.gpu_of(&node, gpu);
        self.audit(now, by, "drain", None, &format!("{of}: {reason}"))?;
        Ok(if holders.is_empty() {
            format!("{of} drained: {reason}")
        } else {
            format!(
                "{of} draining: {reason}; job {} runs on there until it ends",
                holders.join(", ")
            )
        })
    }

    /// Puts one GPU back in service.
    fn resume_gpu(
        &mut self,
        key: crate::db::DrainKey,
        by: &str,
        now: i64,
    ) -> Result<String, DaemonError> {
        let of = self.gpu_of(&key.0, key.1);
        if self.core.policy.drains.remove(&key).is_none() {
            return Ok(format!("{of} was not drained"));
        }
        self.write(Row::Pool(PoolRow::GpuDrain { key, drain: None }))?;
        self.audit(now, by, "resume-gpu", None, &of)?;
        Ok(format!("{of} back in service"))
    }

    /// How a GPU is named to people: `GPU 2` on a single server, `GPU 2
    /// of gpu02` in a pool.
    fn gpu_of(&self, node: &str, gpu: u32) -> String {
        if self.is_only_server(node) {
            format!("GPU {gpu}")
        } else {
            format!("GPU {gpu} of {node}")
        }
    }

    /// Whether `node` is the controller's own server and there is no other.
    fn is_only_server(&self, node: &str) -> bool {
        self.nodes.layout().is_single() && self.nodes.local().is_some_and(|l| l.name() == node)
    }

    /// The jobs the references name (see [`Core::expand`]).
    fn expand(&self, refs: &[JobRef]) -> Result<(Vec<JobId>, Vec<JobOutcome>), DaemonError> {
        self.core.expand(&self.reads(), refs)
    }
}
