//! Job dependencies, Slurm's `--dependency`: `after`, `afterany`, `afterok`,
//! `afternotok` on job ids, and `singleton`. Conditions joined by `,` must
//! all hold; joined by `?`, any one. Evaluated as a pure function of the
//! states of the jobs named, so the daemon and the tests share it.

use std::fmt;

use crate::model::job::{JobId, JobState};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The named jobs have started (or were cancelled before they could).
    After,
    /// The named jobs have ended, however.
    AfterAny,
    /// The named jobs have ended COMPLETED (exit code 0).
    AfterOk,
    /// The named jobs have ended otherwise: failed, timed out, cancelled,
    /// out of memory, lost with their node.
    AfterNotOk,
    /// No earlier job of the same user and name is still active.
    Singleton,
}

impl Kind {
    const ALL: [Kind; 5] = [
        Kind::After,
        Kind::AfterAny,
        Kind::AfterOk,
        Kind::AfterNotOk,
        Kind::Singleton,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::After => "after",
            Kind::AfterAny => "afterany",
            Kind::AfterOk => "afterok",
            Kind::AfterNotOk => "afternotok",
            Kind::Singleton => "singleton",
        }
    }
}

/// One condition: a kind and the jobs it names (none for `singleton`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Condition {
    pub kind: Kind,
    pub jobs: Vec<JobId>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dependency {
    /// `?`-joined: one satisfied condition is enough.
    pub any: bool,
    pub conditions: Vec<Condition>,
}

/// Where a dependency stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Satisfied,
    Waiting,
    /// Can never be satisfied (an `afterok` job failed, ...).
    Never,
}

/// The most job ids one dependency may name.
pub const MAX_JOBS: usize = 1000;

/// Why a `--dependency` does not read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DependencyError {
    #[error("empty dependency")]
    Empty,
    #[error("'{0}' mixes ',' (all of) and '?' (any of); use one of them")]
    Mixed(String),
    #[error(
        "unknown dependency type '{0}' (allowed: after, afterany, afterok, afternotok, singleton)"
    )]
    Kind(String),
    #[error("{kind}: '{id}' is not a job id")]
    NotAnId { kind: String, id: String },
    #[error("singleton takes no job ids")]
    SingletonIds,
    #[error("{0} needs job ids ({0}:ID[:ID...])")]
    NoIds(String),
    #[error("more than {MAX_JOBS} job ids")]
    TooMany,
}

impl Dependency {
    /// Parses Slurm's syntax, e.g. `afterok:12:13,afterany:9` or
    /// `afterok:12?afternotok:12` or `singleton`.
    pub fn parse(text: &str) -> Result<Dependency, DependencyError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(DependencyError::Empty);
        }
        if text.contains(',') && text.contains('?') {
            return Err(DependencyError::Mixed(text.to_string()));
        }
        let any = text.contains('?');
        let mut conditions = Vec::new();
        let mut named = 0;
        for part in text.split([',', '?']) {
            let mut fields = part.trim().split(':');
            let word = fields.next().unwrap_or("").trim();
            let kind = Kind::ALL
                .into_iter()
                .find(|k| k.name().eq_ignore_ascii_case(word))
                .ok_or_else(|| DependencyError::Kind(word.to_string()))?;
            let ids = fields
                .map(|f| {
                    let f = f.trim();
                    // `afterok:12+30`: Slurm's delay after the condition; not supported.
                    f.parse::<JobId>().ok().filter(|&id| id > 0).ok_or_else(|| {
                        DependencyError::NotAnId {
                            kind: word.to_string(),
                            id: f.to_string(),
                        }
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            match (kind, ids.is_empty()) {
                (Kind::Singleton, false) => return Err(DependencyError::SingletonIds),
                (Kind::Singleton, true) => {}
                (_, true) => return Err(DependencyError::NoIds(word.to_string())),
                _ => {}
            }
            named += ids.len();
            if named > MAX_JOBS {
                return Err(DependencyError::TooMany);
            }
            conditions.push(Condition { kind, jobs: ids });
        }
        Ok(Dependency { any, conditions })
    }

    /// Every job id named.
    pub fn job_ids(&self) -> impl Iterator<Item = JobId> + '_ {
        self.conditions.iter().flat_map(|c| c.jobs.iter().copied())
    }

    pub fn has_singleton(&self) -> bool {
        self.conditions.iter().any(|c| c.kind == Kind::Singleton)
    }

    /// Where the dependency stands, given the state of each job it names
    /// (`None`: no such job, which never satisfies anything) and whether
    /// an earlier job of the same user and name is still active.
    pub fn evaluate(
        &self,
        state_of: impl Fn(JobId) -> Option<JobState>,
        earlier_namesake_active: bool,
    ) -> Status {
        let statuses = self.conditions.iter().map(|c| match c.kind {
            Kind::Singleton if earlier_namesake_active => Status::Waiting,
            Kind::Singleton => Status::Satisfied,
            kind => all_of(c.jobs.iter().map(|&id| job_status(kind, state_of(id)))),
        });
        if self.any {
            any_of(statuses)
        } else {
            all_of(statuses)
        }
    }
}

fn job_status(kind: Kind, state: Option<JobState>) -> Status {
    let Some(state) = state else {
        return Status::Never;
    };
    let ended = !state.is_active();
    match kind {
        Kind::After if state == JobState::Pending => Status::Waiting,
        Kind::After => Status::Satisfied,
        _ if !ended => Status::Waiting,
        Kind::AfterAny => Status::Satisfied,
        Kind::AfterOk if state == JobState::Completed => Status::Satisfied,
        Kind::AfterNotOk if state != JobState::Completed => Status::Satisfied,
        _ => Status::Never,
    }
}

fn all_of(statuses: impl Iterator<Item = Status>) -> Status {
    let mut result = Status::Satisfied;
    for s in statuses {
        match s {
            Status::Never => return Status::Never,
            Status::Waiting => result = Status::Waiting,
            Status::Satisfied => {}
        }
    }
    result
}

fn any_of(statuses: impl Iterator<Item = Status>) -> Status {
    let mut result = Status::Never;
    for s in statuses {
        match s {
            Status::Satisfied => return Status::Satisfied,
            Status::Waiting => result = Status::Waiting,
            Status::Never => {}
        }
    }
    result
}

/// The canonical form, as stored and shown (`afterok:12:13,afterany:9`).
impl fmt::Display for Dependency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let separator = if self.any { "?" } else { "," };
        for (i, c) in self.conditions.iter().enumerate() {
            if i > 0 {
                f.write_str(separator)?;
            }
            f.write_str(c.kind.name())?;
            for id in &c.jobs {
                write!(f, ":{id}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use JobState::*;

    fn states(list: &[(JobId, JobState)]) -> impl Fn(JobId) -> Option<JobState> + '_ {
        move |id| list.iter().find(|(j, _)| *j == id).map(|(_, s)| *s)
    }

    #[test]
    fn parses_and_prints_slurm_syntax() {
        let d = Dependency::parse("afterok:12:13,afterany:9").unwrap();
        assert!(!d.any);
        assert_eq!(d.conditions.len(), 2);
        assert_eq!(d.job_ids().collect::<Vec<_>>(), vec![12, 13, 9]);
        assert_eq!(d.to_string(), "afterok:12:13,afterany:9");
        let d = Dependency::parse(" AfterOK:5?afternotok:5 ").unwrap();
        assert!(d.any);
        assert_eq!(d.to_string(), "afterok:5?afternotok:5");
        assert!(Dependency::parse("singleton").unwrap().has_singleton());
    }

    #[test]
    fn bad_dependencies_say_what_is_wrong() {
        let err = |t: &str| Dependency::parse(t).unwrap_err().to_string();
        assert!(err("afterwards:1").contains("unknown dependency type 'afterwards'"));
        assert!(err("afterok:x").contains("'x' is not a job id"));
        assert!(err("afterok:0").contains("'0' is not a job id"));
        assert!(err("afterok").contains("afterok needs job ids"));
        assert!(err("singleton:3").contains("singleton takes no job ids"));
        assert!(err("afterok:1,afterany:2?after:3").contains("mixes"));
        assert!(err("afterok:1+60").contains("'1+60' is not a job id"));
        assert!(err("").contains("empty"));
    }

    #[test]
    fn each_kind_against_each_outcome() {
        let check = |text: &str, state: Option<JobState>| {
            let list: Vec<(JobId, JobState)> = state.map(|s| (7, s)).into_iter().collect();
            Dependency::parse(text)
                .unwrap()
                .evaluate(states(&list), false)
        };
        use Status::*;
        assert_eq!(check("after:7", Some(Pending)), Waiting);
        assert_eq!(check("after:7", Some(Running)), Satisfied);
        assert_eq!(check("after:7", Some(Cancelled)), Satisfied);
        assert_eq!(check("afterany:7", Some(Running)), Waiting);
        assert_eq!(check("afterany:7", Some(Failed)), Satisfied);
        assert_eq!(check("afterok:7", Some(Completing)), Waiting);
        assert_eq!(check("afterok:7", Some(Completed)), Satisfied);
        assert_eq!(check("afterok:7", Some(Failed)), Never);
        assert_eq!(check("afterok:7", Some(Cancelled)), Never);
        assert_eq!(check("afternotok:7", Some(Timeout)), Satisfied);
        assert_eq!(check("afternotok:7", Some(OutOfMemory)), Satisfied);
        assert_eq!(check("afternotok:7", Some(Completed)), Never);
        assert_eq!(check("afternotok:7", Some(Suspended)), Waiting);
        assert_eq!(check("afterany:7", None), Never);
    }

    #[test]
    fn all_of_and_any_of() {
        let list = [(1, Completed), (2, Running), (3, Failed)];
        let eval = |t: &str| Dependency::parse(t).unwrap().evaluate(states(&list), false);
        assert_eq!(eval("afterok:1:2"), Status::Waiting);
        assert_eq!(eval("afterok:1:3"), Status::Never, "one failure is enough");
        assert_eq!(eval("afterok:1,afternotok:3"), Status::Satisfied);
        assert_eq!(eval("afterok:3?afterok:2"), Status::Waiting);
        assert_eq!(eval("afterok:3?afterok:1"), Status::Satisfied);
        assert_eq!(eval("afterok:3?afternotok:1"), Status::Never);
    }

    #[test]
    fn singleton_waits_for_an_earlier_namesake() {
        let d = Dependency::parse("singleton").unwrap();
        assert_eq!(d.evaluate(|_| None, true), Status::Waiting);
        assert_eq!(d.evaluate(|_| None, false), Status::Satisfied);
    }
}
