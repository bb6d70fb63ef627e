//! `scontrol show step(s) [JOBID[.STEP]]`: the steps running in the
//! running jobs, a record each, as slurmctld shows them — the batch and
//! extern steps beside each srun's.

use super::{accounting_views, job_filter, print, CliError, CliResult};
use crate::model::job::JobState;
use crate::report::view::JobView;
use crate::report::Field;

/// The step `which` names (`N.S`: S), and the running jobs' views it
/// selects (`N`: job N's, with their steps; none: all).
pub(super) fn running_views(
    config: &crate::config::Config,
    which: Option<&str>,
) -> Result<(Option<String>, Vec<JobView>, i64), CliError> {
    let (job, step) = match which {
        Some(id) => match id.split_once('.') {
            Some((job, step)) => (Some(job.to_string()), Some(step.to_string())),
            None => (Some(id.to_string()), None),
        },
        None => (None, None),
    };
    let mut filter = job_filter(&job.iter().cloned().collect::<Vec<_>>(), &[], &[], &[], &[])?;
    filter.states = vec![JobState::Running];
    let (views, now) = accounting_views("scontrol", config, filter)?;
    Ok((step, views, now))
}

/// Prints the running steps `which` names (`N`: job N's; `N.S`: that
/// one; none: all), each record on one line with `one_line`.
pub fn show_steps(
    config: &crate::config::Config,
    which: Option<&str>,
    one_line: bool,
) -> CliResult {
    let (step, views, now) = running_views(config, which)?;
    let running: Vec<&JobView> = views
        .iter()
        .filter(|v| v.job.state == JobState::Running)
        .filter(|v| {
            v.step
                .is_some_and(|s| step.as_deref().is_none_or(|want| s.id.to_string() == want))
        })
        .collect();
    if running.is_empty() {
        return match which {
            Some(id) => Err(CliError::failed(format!(
                "job step {id} is not running (Invalid job id specified)"
            ))),
            None => print("No job steps in the system\n"),
        };
    }
    let text: String = running.iter().map(|v| record(v, now, one_line)).collect();
    print(&text)
}

/// One step's record: its lines, or one line with `one_line`; then a
/// blank line.
fn record(view: &JobView, now: i64, one_line: bool) -> String {
    let job = &view.job;
    let Some(step) = view.step else {
        return String::new();
    };
    let start = job
        .start_time
        .map_or_else(|| "Unknown".into(), crate::model::units::format_timestamp);
    let lines = [
        format!(
            "StepId={}.{} UserId={} StartTime={start} TimeLimit={}",
            job.display_id(),
            step.id,
            job.uid,
            crate::model::units::format_time_limit(job.time_limit)
        ),
        format!(
            "State={} Partition={} NodeList={}",
            job.state.name(),
            crate::slurm_options::PARTITION,
            job.nodelist()
        ),
        format!(
            "Nodes={} CPUs={} Tasks={} Name={} Network=(null)",
            job.node_count(),
            job.cpus,
            step.tasks,
            job.name
        ),
        format!("TRES={}", Field::AllocTres.value(view, now)),
    ];
    if one_line {
        format!("{}\n", lines.join(" "))
    } else {
        format!("{}\n\n", lines.join("\n   "))
    }
}
