//! Job priority. This first version ranks by the QoS's priority, then by
//! submit time; the multifactor formula (age, fair-share, size, nice) will
//! replace `priority` without changing its callers.

use std::cmp::Ordering;

use crate::config::Config;
use crate::job::Job;

/// A job's priority: the priority of its QoS (0 for a QoS no longer in the
/// config, so a reload that drops a QoS does not strand its jobs).
pub fn priority(job: &Job, config: &Config) -> i64 {
    config.qos_named(&job.qos).map_or(0, |q| q.priority)
}

/// Scheduling order: higher priority first, then earlier submission, then
/// lower id (submissions within one second keep their order).
pub fn order(a: (&Job, i64), b: (&Job, i64)) -> Ordering {
    b.1.cmp(&a.1)
        .then(a.0.submit_time.cmp(&b.0.submit_time))
        .then(a.0.id.cmp(&b.0.id))
}
