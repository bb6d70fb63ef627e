//! Notifications: the config's `notify_command` run with one event as JSON
//! on its stdin — a job began, ended, failed, was requeued (its
//! `--mail-type` says which), or an account crossed its budget warning or
//! spent its budget. The command runs on a thread of its own, one event
//! at a time, killed after `notify_timeout_secs`; the event loop only
//! queues (and drops, with a warning, beyond a full queue), so a slow mail
//! server never holds up scheduling.

use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::time::Duration;

use serde::Serialize;

use crate::model::job::{Job, JobState, MailTypes};

/// Events queued for the command, at most.
const QUEUE: usize = 1_024;

/// What happened to a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobEvent {
    Began,
    Ended,
    Requeued,
}

/// One event as the command reads it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Notification {
    /// `job_began`, `job_ended`, `job_failed`, `job_time_limit`,
    /// `job_requeued`, `budget_warning`, `budget_exhausted`.
    pub event: String,
    pub time: i64,
    pub cluster: String,
    /// `--mail-user`, the job's user, or an account's coordinators.
    pub mail_user: String,
    /// A one-line summary, ready for a mail's subject.
    pub subject: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<JobFacts>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<BudgetFacts>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobFacts {
    pub id: String,
    pub name: String,
    pub user: String,
    pub account: String,
    pub qos: String,
    pub state: String,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// Seconds its last run lasted.
    pub elapsed: Option<i64>,
    pub gpus: Vec<u32>,
    pub reason: Option<String>,
    pub restarts: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BudgetFacts {
    pub account: String,
    pub period: String,
    pub budget_tokens: f64,
    pub used_tokens: f64,
    pub used_fraction: f64,
}

/// The event name for a job's event, if its `--mail-type` asks for it:
/// BEGIN for a start; END for any end, FAIL for a failure (FAILED,
/// OUT_OF_MEMORY, NODE_FAIL, TIMEOUT), TIME_LIMIT for a timeout; REQUEUE for
/// a requeue (after preemption, or `yscontrol requeue`) and for a job that
/// was preempted for good.
pub fn event_name(types: MailTypes, event: JobEvent, state: JobState) -> Option<&'static str> {
    match event {
        JobEvent::Began => types.contains(MailTypes::BEGIN).then_some("job_began"),
        JobEvent::Requeued => types.contains(MailTypes::REQUEUE).then_some("job_requeued"),
        JobEvent::Ended => {
            let failed = matches!(
                state,
                JobState::Failed | JobState::OutOfMemory | JobState::NodeFail | JobState::Timeout
            );
            if state == JobState::Timeout && types.contains(MailTypes::TIME_LIMIT) {
                Some("job_time_limit")
            } else if failed && types.contains(MailTypes::FAIL) {
                Some("job_failed")
            } else if state == JobState::Preempted && types.contains(MailTypes::REQUEUE) {
                Some("job_requeued")
            } else if types.contains(MailTypes::END) {
                Some(if failed { "job_failed" } else { "job_ended" })
            } else {
                None
            }
        }
    }
}

/// The notification for `event` of `job`, if it asked for one.
pub fn for_job(job: &Job, event: JobEvent, now: i64, cluster: &str) -> Option<Notification> {
    let name = event_name(job.mail_type, event, job.state)?;
    let elapsed = job
        .start_time
        .map(|s| job.end_time.unwrap_or(now).max(s) - s);
    let what = match event {
        JobEvent::Began => format!(
            "began on GPUs [{}]",
            crate::db::format_index_list(&job.gpus_alloc)
        ),
        JobEvent::Requeued => format!("requeued (restart {})", job.restart_count),
        JobEvent::Ended => format!(
            "ended: {}{}{}",
            job.state.name(),
            job.exit
                .map(|e| format!(", exit {}", e.code))
                .unwrap_or_default(),
            elapsed
                .map(|e| format!(
                    ", ran {}",
                    crate::model::units::format_duration(e.max(0) as u64)
                ))
                .unwrap_or_default()
        ),
    };
    Some(Notification {
        event: name.to_string(),
        time: now,
        cluster: cluster.to_string(),
        mail_user: job.mail_user.clone().unwrap_or_else(|| job.user.clone()),
        subject: format!("ysched job {} ({}) {what}", job.display_id(), job.name),
        job: Some(JobFacts {
            id: job.display_id(),
            name: job.name.clone(),
            user: job.user.clone(),
            account: job.account.clone(),
            qos: job.qos.clone(),
            state: job.state.name().to_string(),
            exit_code: job.exit.map(|e| e.code),
            signal: job.exit.map(|e| e.signal).filter(|&s| s != 0),
            elapsed,
            gpus: job.gpus_alloc.clone(),
            reason: job.reason.clone(),
            restarts: job.restart_count,
        }),
        budget: None,
    })
}

/// Queues events for the command's thread.
pub struct Notifier {
    queue: Option<SyncSender<Notification>>,
}

impl Notifier {
    /// No command: events go nowhere.
    pub fn off() -> Notifier {
        Notifier { queue: None }
    }

    /// Starts the thread that runs `command` for each event.
    pub fn start(command: Vec<String>, timeout: Duration) -> std::io::Result<Notifier> {
        let (tx, rx) = mpsc::sync_channel::<Notification>(QUEUE);
        std::thread::Builder::new()
            .name("notify".into())
            .spawn(move || {
                for event in rx {
                    if let Err(e) = deliver(&command, timeout, &event) {
                        tracing::warn!(
                            target: "ysched::daemon",
                            "notification {} ({}) not delivered: {e}",
                            event.event,
                            event.subject
                        );
                    }
                }
            })?;
        Ok(Notifier { queue: Some(tx) })
    }

    /// Queues an event; never waits.
    pub fn send(&self, event: Notification) {
        let Some(queue) = &self.queue else { return };
        match queue.try_send(event) {
            Ok(()) => {}
            Err(TrySendError::Full(e)) => tracing::warn!(
                target: "ysched::daemon",
                "notification {} ({}) dropped: {QUEUE} are already waiting for notify_command",
                e.event,
                e.subject
            ),
            Err(TrySendError::Disconnected(_)) => {}
        }
    }
}

/// Why one notification did not reach the notifier.
#[derive(Debug, thiserror::Error)]
enum DeliveryError {
    #[error("cannot encode the event: {0}")]
    Encode(#[from] serde_json::Error),
    #[error(transparent)]
    Command(#[from] crate::exec::command::CommandError),
}

/// Runs the command once with the event on stdin, waiting at most `timeout`.
fn deliver(
    command: &[String],
    timeout: Duration,
    event: &Notification,
) -> Result<(), DeliveryError> {
    let json = serde_json::to_string(event)?;
    // The variables end up in mail headers: one line each, whatever a job
    // name or address held (new ones are checked at submit; old rows not).
    let one_line = |v: &str| crate::report::escape_controls(v, false).into_owned();
    let env = [
        ("YSCHED_EVENT", one_line(&event.event)),
        ("YSCHED_MAIL_USER", one_line(&event.mail_user)),
        ("YSCHED_SUBJECT", one_line(&event.subject)),
    ];
    crate::exec::command::run_with_input(command, &env, format!("{json}\n").as_bytes(), timeout)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mail_types_choose_the_events() {
        let t = |s: &str| MailTypes::parse(s).unwrap();
        assert_eq!(
            event_name(t("END"), JobEvent::Began, JobState::Running),
            None
        );
        assert_eq!(
            event_name(t("BEGIN"), JobEvent::Began, JobState::Running),
            Some("job_began")
        );
        assert_eq!(
            event_name(t("END"), JobEvent::Ended, JobState::Completed),
            Some("job_ended")
        );
        assert_eq!(
            event_name(t("END"), JobEvent::Ended, JobState::Failed),
            Some("job_failed")
        );
        assert_eq!(
            event_name(t("FAIL"), JobEvent::Ended, JobState::Completed),
            None
        );
        assert_eq!(
            event_name(t("ALL"), JobEvent::Ended, JobState::Timeout),
            Some("job_time_limit")
        );
        assert_eq!(
            event_name(t("FAIL"), JobEvent::Ended, JobState::Timeout),
            Some("job_failed")
        );
        assert_eq!(
            event_name(t("REQUEUE"), JobEvent::Requeued, JobState::Pending),
            Some("job_requeued")
        );
        assert_eq!(
            event_name(t("NONE"), JobEvent::Ended, JobState::Failed),
            None
        );
        assert_eq!(t("end,fail").names(), "END,FAIL");
        assert!(MailTypes::parse("END,SOMETIMES")
            .unwrap_err()
            .to_string()
            .contains("unknown mail type 'SOMETIMES' (allowed: NONE, BEGIN, END"));
    }
}
