//! Job steps as recorded: begun when `srun` asks for a number, ended
//! when it reports its tasks' end.

use rusqlite::{params, Connection};

use super::error::DbError;
use crate::model::job::{ExitStatus, JobId, JobState};
use crate::model::step::{Step, StepGpu, StepUsage};

/// The number the next step of run `restart` of `job` gets.
pub fn next_step(conn: &Connection, job: JobId, restart: u32) -> Result<u32, DbError> {
    Ok(conn
        .prepare_cached(
            "SELECT COALESCE(MAX(step) + 1, 0) FROM steps WHERE job = ?1 AND restart = ?2",
        )?
        .query_row(params![job, restart], |r| r.get(0))?)
}

/// Whether step `step` of run `restart` of `job` is recorded and has not
/// ended.
pub fn step_running(
    conn: &Connection,
    (job, restart, step): (JobId, u32, u32),
) -> Result<bool, DbError> {
    Ok(conn
        .prepare_cached(
            "SELECT COUNT(*) FROM steps WHERE job = ?1 AND restart = ?2 AND step = ?3 AND end_time IS NULL",
        )?
        .query_row(params![job, restart, step], |r| r.get::<_, i64>(0))?
        > 0)
}

/// Records `step` as begun, under its number (`next_step`).
pub fn begin_step(conn: &Connection, step: &Step) -> Result<(), DbError> {
    conn.prepare_cached(
        "INSERT INTO steps (job, restart, step, name, nodes, tasks, start, state, srun_pid,
                            gpu_begin_samples, gpu_begin_util)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
    )?
    .execute(params![
        step.job,
        step.restart,
        step.step,
        step.name,
        step.nodes,
        step.tasks,
        step.start,
        JobState::Running.name(),
        step.srun_pid,
        step.gpu_begin.map(|g| g.samples),
        step.gpu_begin.map(|g| g.utilization_sum as i64),
    ])?;
    Ok(())
}

/// Records the end of step `step` of run `restart` of `job`, if it has
/// not ended; whether it had not.
pub fn end_step(
    conn: &Connection,
    (job, restart, step): (JobId, u32, u32),
    (exit, usage, gpu): (ExitStatus, Option<StepUsage>, Option<StepGpu>),
    at: i64,
) -> Result<bool, DbError> {
    let big = |v: u64| v.min(i64::MAX as u64) as i64;
    let changed = conn
        .prepare_cached(
            "UPDATE steps SET end_time = ?4, exit_code = ?5, exit_signal = ?6, state = ?7,
                usage_tasks = ?8, max_rss = ?9, max_rss_task = ?10, rss_sum = ?11,
                user_usec = ?12, system_usec = ?13, gpu_samples = ?14, gpu_util = ?15
             WHERE job = ?1 AND restart = ?2 AND step = ?3 AND end_time IS NULL",
        )?
        .execute(params![
            job,
            restart,
            step,
            at,
            exit.code,
            exit.signal,
            Step::state_of(exit).name(),
            usage.map(|u| u.tasks),
            usage.map(|u| big(u.max_rss_bytes)),
            usage.map(|u| u.max_rss_task),
            usage.map(|u| big(u.rss_sum_bytes)),
            usage.map(|u| big(u.user_usec)),
            usage.map(|u| big(u.system_usec)),
            gpu.map(|g| g.samples),
            gpu.map(|g| big(g.utilization_sum)),
        ])?;
    Ok(changed == 1)
}

/// The steps of `job`, every run's, in order.
pub fn steps_of(conn: &Connection, job: JobId) -> Result<Vec<Step>, DbError> {
    let mut statement = conn.prepare_cached(
        "SELECT job, restart, step, name, nodes, tasks, start, end_time, state, exit_code, exit_signal,
                srun_pid, usage_tasks, max_rss, max_rss_task, rss_sum, user_usec, system_usec,
                gpu_begin_samples, gpu_begin_util, gpu_samples, gpu_util
         FROM steps WHERE job = ?1 ORDER BY restart, step",
    )?;
    let rows = statement.query_map([job], |r| {
        let exit = match (r.get::<_, Option<i32>>(9)?, r.get::<_, Option<i32>>(10)?) {
            (Some(code), signal) => Some(ExitStatus {
                code,
                signal: signal.unwrap_or(0),
            }),
            _ => None,
        };
        let state: String = r.get(8)?;
        Ok(Step {
            job: r.get(0)?,
            restart: r.get(1)?,
            step: r.get(2)?,
            name: r.get(3)?,
            nodes: r.get(4)?,
            tasks: r.get(5)?,
            start: r.get(6)?,
            end: r.get(7)?,
            state: JobState::parse(&state).unwrap_or(JobState::Completed),
            exit,
            srun_pid: r.get(11)?,
            usage: usage_of(r)?,
            gpu_begin: gpu_of(r, 18)?,
            gpu: gpu_of(r, 20)?,
        })
    })?;
    Ok(rows.collect::<Result<Vec<_>, _>>()?)
}

/// A step's usage from its row (columns 12 to 17), if it was reported.
fn usage_of(r: &rusqlite::Row) -> rusqlite::Result<Option<StepUsage>> {
    let Some(tasks) = r.get::<_, Option<u32>>(12)? else {
        return Ok(None);
    };
    let figure =
        |i| -> rusqlite::Result<u64> { Ok(r.get::<_, Option<i64>>(i)?.unwrap_or(0).max(0) as u64) };
    Ok(Some(StepUsage {
        tasks,
        max_rss_bytes: figure(13)?,
        max_rss_task: r.get::<_, Option<u32>>(14)?.unwrap_or(0),
        rss_sum_bytes: figure(15)?,
        user_usec: figure(16)?,
        system_usec: figure(17)?,
    }))
}

/// GPU sums from the two columns from `first`, if set.
fn gpu_of(r: &rusqlite::Row, first: usize) -> rusqlite::Result<Option<StepGpu>> {
    let samples: Option<u32> = r.get(first)?;
    let sum: Option<i64> = r.get(first + 1)?;
    Ok(samples.map(|samples| StepGpu {
        samples,
        utilization_sum: sum.unwrap_or(0).max(0) as u64,
    }))
}

/// The jobs that have steps recorded: a listing reads the steps of
/// these only, not one query per job it lists.
pub fn jobs_with_steps(conn: &Connection) -> Result<std::collections::HashSet<JobId>, DbError> {
    let mut statement = conn.prepare_cached("SELECT DISTINCT job FROM steps")?;
    let jobs = statement.query_map([], |r| r.get(0))?;
    Ok(jobs.collect::<Result<_, _>>()?)
}

#[cfg(test)]
mod tests {
    use super::super::migrations::a_job;
    use super::*;

    #[test]
    fn steps_are_numbered_per_run_and_end_once() {
        let dir = tempfile::tempdir().unwrap();
        let conn = super::super::migrations::migrated(dir.path());
        a_job(&conn, 4);
        let step = |restart| Step {
            job: 4,
            restart,
            step: 0,
            name: "true".into(),
            nodes: "gpu01".into(),
            tasks: 2,
            start: 10,
            end: None,
            state: JobState::Running,
            exit: None,
            srun_pid: 42,
            usage: None,
            gpu_begin: Some(StepGpu {
                samples: 3,
                utilization_sum: 90,
            }),
            gpu: None,
        };
        let begin = |restart| {
            let number = next_step(&conn, 4, restart).unwrap();
            begin_step(
                &conn,
                &Step {
                    step: number,
                    ..step(restart)
                },
            )
            .unwrap();
            number
        };
        assert_eq!(begin(0), 0);
        assert_eq!(begin(0), 1);
        assert_eq!(begin(1), 0);
        let failed = ExitStatus { code: 2, signal: 0 };
        assert!(step_running(&conn, (4, 0, 1)).unwrap());
        let usage = StepUsage {
            tasks: 2,
            max_rss_bytes: 5 << 30,
            max_rss_task: 1,
            rss_sum_bytes: 6 << 30,
            user_usec: 7_000_000,
            system_usec: 1_000_000,
        };
        let share = StepGpu {
            samples: 2,
            utilization_sum: 130,
        };
        assert!(end_step(&conn, (4, 0, 1), (failed, Some(usage), Some(share)), 20).unwrap());
        assert!(!step_running(&conn, (4, 0, 1)).unwrap());
        assert!(!step_running(&conn, (4, 0, 7)).unwrap());
        assert!(!end_step(&conn, (4, 0, 1), (ExitStatus::default(), None, None), 30).unwrap());
        let steps = steps_of(&conn, 4).unwrap();
        let seen: Vec<_> = steps
            .iter()
            .map(|s| (s.restart, s.step, s.state, s.end))
            .collect();
        assert_eq!(
            seen,
            [
                (0, 0, JobState::Running, None),
                (0, 1, JobState::Failed, Some(20)),
                (1, 0, JobState::Running, None)
            ]
        );
        assert_eq!((steps[1].exit, steps[1].srun_pid), (Some(failed), 42));
        assert_eq!((steps[1].usage, steps[1].gpu), (Some(usage), Some(share)));
        assert_eq!((steps[0].usage, steps[0].gpu), (None, None));
        assert_eq!(steps[0].gpu_begin.map(|g| g.samples), Some(3));
        assert_eq!(jobs_with_steps(&conn).unwrap(), [4].into());
        // A job purged takes its steps with it.
        conn.execute_batch("PRAGMA foreign_keys = ON; DELETE FROM jobs WHERE id = 4")
            .unwrap();
        assert!(steps_of(&conn, 4).unwrap().is_empty());
    }
}
