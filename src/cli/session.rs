//! An interactive allocation as `salloc` and `srun` (outside a job) hold
//! it: asked for, waited for (with why it waits, on the terminal; Ctrl-C
//! withdraws it), watched while the session runs, and ended with the
//! session's status. The controller ends an allocation whose holder
//! stops looking at it (`daemon::allocations`), so one left behind by a
//! killed salloc does not keep its GPUs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{ask, CliError};
use crate::config::Config;
use crate::model::job::{JobRequest, JobState};
use crate::proto::{AllocationView, Control, Reply, Request};

/// How often a pending allocation is looked at.
const PENDING_LOOK: Duration = Duration::from_millis(300);
/// How long a job may stay pending before it is said to wait: the
/// scheduler starts one that fits within it.
const QUEUED_AFTER: Duration = Duration::from_secs(1);
/// How often a running one is (the controller ends one not looked at
/// for `[interactive] unwatched_after`).
pub const RUNNING_LOOK: Duration = Duration::from_secs(2);

/// How long before an allocation's time limit its session is warned.
const TIME_WARNING: i64 = 60;

/// A granted allocation.
pub struct Allocation {
    pub config: Config,
    pub job: u64,
    /// What its commands run with (`SLURM_JOB_ID`, its nodes, its task
    /// servers and step key).
    pub environment: Vec<(String, String)>,
    /// The command's name for messages (`salloc`, `srun`).
    pub command: &'static str,
}

/// Submits `request` as an interactive allocation and waits until it
/// runs. Ctrl-C (or SIGTERM, SIGHUP) while it waits withdraws it.
///
/// It speaks as Slurm's command of that name does: salloc says `Pending
/// job allocation N` and `Granted job allocation N`; srun says nothing
/// when the allocation comes at once (with `verbose`, the job's id, nodes
/// and CPUs), and, for both, `job N queued and waiting for resources`
/// when it waits, then `job N has been allocated resources`. With
/// `immediate` (srun's `--immediate`) it waits for nothing: a job that
/// does not start at once is withdrawn, `Unable to allocate resources`.
pub fn allocate(
    command: &'static str,
    mut request: JobRequest,
    verbose: bool,
    immediate: bool,
) -> Result<Allocation, CliError> {
    let salloc = command != "srun";
    let submitted = Instant::now();
    request.interactive = true;
    let config = super::load_config()?;
    let job = match ask(&config, Request::Submit(Box::new(request)))? {
        Reply::Submitted { job_id, warning } => {
            if let Some(w) = warning {
                super::warn(command, &w);
            }
            job_id
        }
        Reply::Rejected { error } => return Err(CliError::failed(error)),
        other => return Err(CliError::failed(format!("unexpected reply: {other:?}"))),
    };
    if salloc {
        super::say(&format!("{command}: Pending job allocation {job}"));
    }
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        let _ = signal_hook::flag::register(signal, stop.clone());
    }
    let mut shown: Option<String> = None;
    loop {
        if stop.load(Ordering::SeqCst) {
            withdraw(&config, job);
            super::say(&format!(
                "{command}: Job allocation {job} has been revoked."
            ));
            return Err(CliError::failed(format!(
                "job {job} withdrawn before it started (interrupted)"
            )));
        }
        let view = look(&config, job)?;
        match view.state {
            // A job the scheduler has not looked at yet (no reason) may
            // start at once: it is not said to wait until it has a reason
            // or has waited QUEUED_AFTER.
            JobState::Pending
                if view.reason.as_deref().is_none_or(|r| r == "None")
                    && submitted.elapsed() < QUEUED_AFTER => {}
            JobState::Pending if immediate => {
                withdraw(&config, job);
                let why = view.reason.unwrap_or_else(|| "Resources".into());
                return Err(CliError::failed(format!(
                    "Unable to allocate resources: job {job} would wait ({why}), and --immediate waits for nothing"
                )));
            }
            JobState::Pending => {
                let why = view.reason.unwrap_or_else(|| "None".into());
                if shown.as_deref() != Some(why.as_str()) {
                    super::say(&format!(
                        "{command}: job {job} queued and waiting for resources ({why})"
                    ));
                    shown = Some(why);
                }
            }
            JobState::Running if !view.environment.is_empty() => {
                if shown.is_some() {
                    super::say(&format!(
                        "{command}: job {job} has been allocated resources"
                    ));
                }
                if salloc {
                    super::say(&format!("{command}: Granted job allocation {job}"));
                } else if verbose {
                    super::say(&format!("{command}: {}", job_line(job, &view.environment)));
                }
                return Ok(Allocation {
                    config,
                    job,
                    environment: view.environment,
                    command,
                });
            }
            JobState::Running => {
                let error = format!("job {job} runs, but the controller no longer knows its step link (it restarted since it started): the allocation is ended");
                withdraw(&config, job);
                return Err(CliError::failed(error));
            }
            state => {
                let why = view.reason.map(|r| format!(": {r}")).unwrap_or_default();
                return Err(CliError::failed(format!(
                    "job allocation {job} ended before its session began ({state}{why})"
                )));
            }
        }
        sleep_unless(&stop, PENDING_LOOK);
    }
}

impl Allocation {
    /// Calls `revoked` (once, on a thread of its own) when the allocation
    /// stops running while its session goes on: cancelled, timed out,
    /// preempted. Also tells the controller, every `RUNNING_LOOK`, that
    /// the session is alive. Stops when `done` is set.
    pub fn watch(&self, done: Arc<AtomicBool>, revoked: impl FnOnce(String) + Send + 'static) {
        let (config, job, command) = (self.config.clone(), self.job, self.command);
        std::thread::spawn(move || {
            let mut failures = 0;
            let mut warned = false;
            while !done.load(Ordering::SeqCst) {
                sleep_unless(&done, RUNNING_LOOK);
                if done.load(Ordering::SeqCst) {
                    return;
                }
                match look(&config, job) {
                    // Suspended (preempted by suspension, or by an
                    // admin), it resumes later: the session waits.
                    Ok(view) if matches!(view.state, JobState::Running | JobState::Suspended) => {
                        failures = 0;
                        if !warned && view.time_left.is_some_and(|t| t <= TIME_WARNING) {
                            warned = true;
                            super::say(&format!(
                                "{command}: Job allocation {job} reaches its time limit in {} s",
                                view.time_left.unwrap_or(0).max(0)
                            ));
                        }
                    }
                    Ok(view) => {
                        let why = view.reason.map(|r| format!(" ({r})")).unwrap_or_default();
                        return revoked(format!("{}{why}", view.state));
                    }
                    // A controller briefly away (restarting) is waited for.
                    Err(_) => failures += 1,
                }
                if failures > 60 {
                    return revoked("the controller has not answered for 2 minutes".into());
                }
            }
        });
    }

    /// Ends the allocation with the session's status (0: COMPLETED); salloc
    /// says so (`Relinquishing job allocation N`), srun says nothing.
    pub fn end(&self, exit_code: i32, signal: i32) {
        let control = Control::EndAllocation {
            job_id: self.job,
            exit_code,
            signal,
        };
        match ask(&self.config, Request::Control(control)) {
            Ok(Reply::Control { .. }) if self.command == "srun" => {}
            Ok(Reply::Control { .. }) => super::say(&format!(
                "{}: Relinquishing job allocation {}",
                self.command, self.job
            )),
            Ok(Reply::Rejected { error }) => super::warn(self.command, &error),
            Ok(_) => {}
            Err(e) => super::warn(
                self.command,
                &format!("could not end job allocation {}: {}", self.job, e.message),
            ),
        }
    }
}

fn look(config: &Config, job: u64) -> Result<AllocationView, CliError> {
    match ask(config, Request::Control(Control::Attach { job_id: job }))? {
        Reply::Allocation(view) => Ok(*view),
        Reply::Rejected { error } => Err(CliError::failed(error)),
        other => Err(CliError::failed(format!("unexpected reply: {other:?}"))),
    }
}

/// Takes back an allocation: cancels it, pending or just started.
fn withdraw(config: &Config, job: u64) {
    let selector = crate::proto::JobSelector {
        job_ids: vec![crate::array::JobRef::Id(job)],
        ..Default::default()
    };
    let control = Control::Cancel {
        selector,
        signal: None,
        to: crate::proto::SignalTo::Job,
    };
    let _ = ask(config, Request::Control(control));
}

/// Sleeps `span`, or less once `flag` is set.
fn sleep_unless(flag: &AtomicBool, span: Duration) {
    let until = Instant::now() + span;
    while !flag.load(Ordering::SeqCst) {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        std::thread::sleep(left.min(Duration::from_millis(50)));
    }
}

/// `jobid N: nodes(2):`gpu[01-02]', cpu counts: 4(x2)`, as srun -v says
/// where its job runs, from the job's own variables.
pub fn job_line(job: u64, environment: &[(String, String)]) -> String {
    let get = |key: &str| {
        environment
            .iter()
            .find(|(k, _)| k == key)
            .map_or("", |(_, v)| v.as_str())
    };
    format!(
        "jobid {job}: nodes({}):`{}', cpu counts: {}",
        get("SLURM_NNODES"),
        get("SLURM_JOB_NODELIST"),
        get("SLURM_JOB_CPUS_PER_NODE")
    )
}
