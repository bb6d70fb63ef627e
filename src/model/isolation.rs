//! Job isolation as the config asks for it and as a node has it: cgroup
//! v1, v2 or none, where the jobs' groups go, and each job's group name.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::job::JobId;

pub const DEFAULT_ROOT: &str = "/sys/fs/cgroup";
/// The group under each hierarchy that holds the jobs' groups, by default.
pub const DEFAULT_PARENT: &str = "ysched";

/// What the config asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Setting {
    Auto,
    V1,
    V2,
    Off,
}

/// What is in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    V1,
    V2,
    Off,
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Layout::V1 => "cgroup v1",
            Layout::V2 => "cgroup v2",
            Layout::Off => "off",
        })
    }
}

/// The name of a job's group.
pub fn group_name(job: JobId) -> String {
    format!("job_{job}")
}
