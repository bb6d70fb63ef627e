//! Job arrays: the index specification of `--array` (`0-99%8`, `1,3,5-9`,
//! `0-30:10`), and references to jobs as users write them (`12`, `12_3`,
//! `12_[1-3,7]`). Each task of an array is a job of its own, with its own
//! id; the array is named by the id of its first task.

use std::fmt;

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::model::job::{Job, JobId, JobState};

/// No specification expands to more tasks than this, whatever the limit
/// (a client parses before it knows the daemon's config).
pub const MAX_TASKS: usize = 1_000_000;

/// `--array`: the task indices, in order, and how many may run at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArraySpec {
    pub indices: Vec<u32>,
    pub max_running: Option<u32>,
}

/// Why an `--array` is refused: it is not an index list, or it has more
/// tasks than an array may.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ArrayError {
    #[error("'%{0}': the task limit must be a positive number")]
    Throttle(String),
    #[error("'{0}' is not a task index")]
    NotAnIndex(String),
    #[error("index {index} is too large: indices go from 0 to {} (max_array_size = {max_size})", max_size.saturating_sub(1))]
    IndexTooLarge { index: u32, max_size: u32 },
    #[error("'{0}' has an empty element")]
    EmptyElement(String),
    #[error("'{0}': the step must be a positive number")]
    Step(String),
    #[error("range {0}-{1} goes backwards")]
    Backwards(u32, u32),
    #[error("'{0}': a step needs a range (A-B:STEP)")]
    StepWithoutRange(String),
    /// More tasks than any array may have.
    #[error("'{0}' makes more than {MAX_TASKS} tasks, more than any array may have")]
    MoreThanAny(String),
    /// More tasks than this server's `max_array_size`.
    #[error("'{text}' makes more tasks than max_array_size ({max_size})")]
    MoreThanMax { text: String, max_size: u32 },
    /// As many distinct indices as that, once repeats are merged.
    #[error("{tasks} tasks is more than max_array_size ({max_size})")]
    TasksOverMax { tasks: usize, max_size: u32 },
}

impl ArrayError {
    /// Too many tasks, rather than not an index list.
    pub fn is_too_many(&self) -> bool {
        matches!(
            self,
            ArrayError::MoreThanAny(_)
                | ArrayError::MoreThanMax { .. }
                | ArrayError::TasksOverMax { .. }
        )
    }
}

/// No max_array_size known: only what no array may exceed is checked.
pub const UNBOUNDED: u32 = u32::MAX;

impl ArraySpec {
    /// Parses `0-99%8`, `1,3,5-9`, `0-30:10`. Indices must be below
    /// `max_size` (the config's max_array_size; [`UNBOUNDED`] where it is
    /// not known yet, as when directives are read before the config).
    pub fn parse(text: &str, max_size: u32) -> Result<ArraySpec, ArrayError> {
        let text = text.trim();
        let (list, throttle) = match text.split_once('%') {
            Some((l, t)) => (l, Some(t)),
            None => (text, None),
        };
        let max_running = match throttle {
            None => None,
            Some(t) => match t.trim().parse::<u32>() {
                Ok(n) if n > 0 => Some(n),
                _ => return Err(ArrayError::Throttle(t.to_string())),
            },
        };
        let index = |s: &str| -> Result<u32, ArrayError> {
            let s = s.trim();
            let n = s
                .parse::<u32>()
                .map_err(|_| ArrayError::NotAnIndex(s.to_string()))?;
            if n >= max_size && max_size != UNBOUNDED {
                return Err(ArrayError::IndexTooLarge { index: n, max_size });
            }
            Ok(n)
        };
        let mut indices = Vec::new();
        for part in list.split(',') {
            let part = part.trim();
            if part.is_empty() {
                return Err(ArrayError::EmptyElement(text.to_string()));
            }
            let (range, step) = match part.split_once(':') {
                Some((r, s)) => {
                    let step = s
                        .trim()
                        .parse::<u32>()
                        .ok()
                        .filter(|&s| s > 0)
                        .ok_or_else(|| ArrayError::Step(s.to_string()))?;
                    (r, step)
                }
                None => (part, 1),
            };
            match range.split_once('-') {
                Some((a, b)) => {
                    let (first, last) = (index(a)?, index(b)?);
                    if first > last {
                        return Err(ArrayError::Backwards(first, last));
                    }
                    let count = ((last - first) / step) as usize + 1;
                    if indices.len() + count > MAX_TASKS {
                        return Err(ArrayError::MoreThanAny(text.to_string()));
                    }
                    if indices.len() + count > max_size as usize {
                        return Err(ArrayError::MoreThanMax {
                            text: text.to_string(),
                            max_size,
                        });
                    }
                    indices.extend((first..=last).step_by(step as usize));
                }
                None if step != 1 => return Err(ArrayError::StepWithoutRange(part.to_string())),
                None => indices.push(index(range)?),
            }
        }
        indices.sort_unstable();
        indices.dedup();
        if indices.len() > max_size as usize {
            return Err(ArrayError::TasksOverMax {
                tasks: indices.len(),
                max_size,
            });
        }
        Ok(ArraySpec {
            indices,
            max_running,
        })
    }

    pub fn min(&self) -> u32 {
        self.indices.first().copied().unwrap_or(0)
    }

    pub fn max(&self) -> u32 {
        self.indices.last().copied().unwrap_or(0)
    }

    /// The step between indices when they are evenly spaced, else 1.
    pub fn step(&self) -> u32 {
        match self.indices.as_slice() {
            [a, b, rest @ ..] => {
                let step = b - a;
                let mut prev = *b;
                for &i in rest {
                    if i - prev != step {
                        return 1;
                    }
                    prev = i;
                }
                step
            }
            _ => 1,
        }
    }
}

/// The canonical form: runs of consecutive indices as ranges
/// (`0-3,7,9-10%2`).
impl fmt::Display for ArraySpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_ranges(&self.indices))?;
        if let Some(n) = self.max_running {
            write!(f, "%{n}")?;
        }
        Ok(())
    }
}

/// `[0, 1, 2, 5]` → `0-2,5`.
pub fn format_ranges(indices: &[u32]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < indices.len() {
        let start = indices[i];
        let mut end = start;
        while i + 1 < indices.len() && indices[i + 1] == end + 1 {
            i += 1;
            end = indices[i];
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    parts.join(",")
}

/// The pending tasks that may not start now because their array runs as
/// many as its `%N` allows: the lowest-indexed pending tasks (not held) get
/// the free places, the others wait.
pub fn throttled<'a>(jobs: impl Iterator<Item = &'a Job>) -> Vec<JobId> {
    /// Per array: tasks holding GPUs, pending tasks (index, id), its `%N`.
    type Tally = (u32, Vec<(u32, JobId)>, Option<u32>);
    let mut arrays: HashMap<JobId, Tally> = HashMap::new();
    for job in jobs {
        let Some(task) = &job.array else { continue };
        if !task.spec.contains('%') {
            continue;
        }
        let entry = arrays.entry(task.job_id).or_insert_with(|| {
            let limit = ArraySpec::parse(&task.spec, u32::MAX)
                .ok()
                .and_then(|a| a.max_running);
            (0, Vec::new(), limit)
        });
        if job.state.holds_gpus() {
            entry.0 += 1;
        } else if job.state == JobState::Pending && job.hold.is_none() {
            entry.1.push((task.task_id, job.id));
        }
    }
    let mut waiting = Vec::new();
    for (running, mut pending, limit) in arrays.into_values() {
        let Some(limit) = limit else { continue };
        pending.sort_unstable();
        let free = limit.saturating_sub(running) as usize;
        waiting.extend(pending.into_iter().skip(free).map(|(_, id)| id));
    }
    waiting
}

/// A job as a user names it: by id (for an array's id, every task of it),
/// or one task of an array (`12_3`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum JobRef {
    Id(JobId),
    Task(JobId, u32),
}

impl JobRef {
    /// Parses `12`, `12_3` or `12_[1-3,7]` (several tasks).
    pub fn parse(text: &str) -> Result<Vec<JobRef>, JobRefError> {
        let text = text.trim();
        let bad = || JobRefError::Invalid(text.to_string());
        let id = |s: &str| s.parse::<JobId>().ok().filter(|&i| i > 0).ok_or_else(bad);
        match text.split_once('_') {
            None => Ok(vec![JobRef::Id(id(text)?)]),
            Some((array, tasks)) => {
                let array = id(array)?;
                let tasks = match tasks.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
                    Some(list) => {
                        ArraySpec::parse(list, u32::MAX)
                            .map_err(|e| JobRefError::Tasks(text.to_string(), e))?
                            .indices
                    }
                    None => vec![tasks.parse::<u32>().map_err(|_| bad())?],
                };
                Ok(tasks.into_iter().map(|t| JobRef::Task(array, t)).collect())
            }
        }
    }

    pub fn matches(&self, job: &Job) -> bool {
        match *self {
            JobRef::Id(id) => job.id == id || job.array.as_ref().is_some_and(|a| a.job_id == id),
            JobRef::Task(array, task) => job
                .array
                .as_ref()
                .is_some_and(|a| a.job_id == array && a.task_id == task),
        }
    }
}

impl fmt::Display for JobRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JobRef::Id(id) => write!(f, "{id}"),
            JobRef::Task(array, task) => write!(f, "{array}_{task}"),
        }
    }
}

impl From<JobRef> for String {
    fn from(r: JobRef) -> String {
        r.to_string()
    }
}

impl TryFrom<String> for JobRef {
    type Error = JobRefError;

    fn try_from(text: String) -> Result<JobRef, JobRefError> {
        match JobRef::parse(&text)?.as_slice() {
            [one] => Ok(*one),
            _ => Err(JobRefError::Several(text)),
        }
    }
}

/// Why a job reference does not read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JobRefError {
    #[error("invalid job id '{0}'")]
    Invalid(String),
    #[error("invalid job id '{0}': {1}")]
    Tasks(String, ArrayError),
    #[error("'{0}' names several jobs")]
    Several(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_to_indices() {
        let s = ArraySpec::parse("0-99%8", 1001).unwrap();
        assert_eq!(s.indices.len(), 100);
        assert_eq!(s.max_running, Some(8));
        assert_eq!((s.min(), s.max(), s.step()), (0, 99, 1));
        assert_eq!(s.to_string(), "0-99%8");
        let s = ArraySpec::parse("1,3,5-7", 1001).unwrap();
        assert_eq!(s.indices, vec![1, 3, 5, 6, 7]);
        assert_eq!(s.step(), 1);
        assert_eq!(s.to_string(), "1,3,5-7");
        let s = ArraySpec::parse("0-30:10", 1001).unwrap();
        assert_eq!(s.indices, vec![0, 10, 20, 30]);
        assert_eq!(s.step(), 10);
        assert_eq!(s.to_string(), "0,10,20,30");
        assert_eq!(ArraySpec::parse("4", 1001).unwrap().indices, vec![4]);
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        let err = |t: &str| ArraySpec::parse(t, 1001).unwrap_err().to_string();
        assert!(err("5-1").contains("range 5-1 goes backwards"));
        assert!(err("0-5000").contains("index 5000 is too large: indices go from 0 to 1000"));
        assert!(err("a-3").contains("'a' is not a task index"));
        assert!(err("0-9%0").contains("task limit must be a positive number"));
        assert!(err("0-9:0").contains("step must be a positive number"));
        assert!(err("1,,2").contains("empty element"));
        assert!(err("3:2").contains("a step needs a range"));
        assert!(err("-1").contains("is not a task index"));
    }

    #[test]
    fn a_task_limit_lets_the_lowest_pending_tasks_through() {
        let task = |id: JobId, index: u32, state: JobState| Job {
            id,
            state,
            array: Some(crate::model::job::ArrayTask {
                job_id: 10,
                task_id: index,
                spec: "0-5%2".into(),
            }),
            ..crate::model::job::example_job(id)
        };
        let jobs = [
            task(10, 0, JobState::Running),
            task(11, 1, JobState::Completed),
            task(12, 2, JobState::Pending),
            task(13, 3, JobState::Pending),
            task(14, 4, JobState::Pending),
        ];
        // One runs, so one more may start: task 2.
        assert_eq!(throttled(jobs.iter()), vec![13, 14]);
        let mut held = jobs.clone();
        held[2].hold = Some(crate::model::job::Hold::User);
        assert_eq!(
            throttled(held.iter()),
            vec![14],
            "a held task takes no place"
        );
        let unthrottled = Job {
            array: Some(crate::model::job::ArrayTask {
                job_id: 20,
                task_id: 0,
                spec: "0-5".into(),
            }),
            ..crate::model::job::example_job(20)
        };
        assert!(throttled([unthrottled].iter()).is_empty());
    }

    #[test]
    fn references_name_jobs_and_tasks() {
        assert_eq!(JobRef::parse("12").unwrap(), vec![JobRef::Id(12)]);
        assert_eq!(JobRef::parse("12_3").unwrap(), vec![JobRef::Task(12, 3)]);
        assert_eq!(
            JobRef::parse("12_[1-2,7]").unwrap(),
            vec![
                JobRef::Task(12, 1),
                JobRef::Task(12, 2),
                JobRef::Task(12, 7)
            ]
        );
        for bad in ["x", "0", "12_", "_3", "12_x", "12_[2-1]", "12_[1"] {
            assert!(JobRef::parse(bad).is_err(), "{bad}");
        }
        let json = serde_json::to_string(&JobRef::Task(12, 3)).unwrap();
        assert_eq!(json, "\"12_3\"");
        assert_eq!(
            serde_json::from_str::<JobRef>(&json).unwrap(),
            JobRef::Task(12, 3)
        );
    }
}
