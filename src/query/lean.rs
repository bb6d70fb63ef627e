//! Which stored columns a listing's fields read: a month of `ysacct`
//! shows a few fields of some 180,000 jobs, and reading every column of
//! each was most of its cost. The test below renders every field of jobs
//! in each state from the whole row and from the columns named here: a
//! field that reads a column not named fails it.

use crate::db::JobColumns;
use crate::report::Field;

/// What every row reads whatever it shows: who may see it (uid, account)
/// and whether it folds into an array's row (array, state).
const ALWAYS: [&str; 7] = [
    "uid",
    "user",
    "account",
    "state",
    "array_job_id",
    "array_task_id",
    "array_spec",
];

/// Its times: what elapsed, start and end are made of.
const TIMES: [&str; 4] = ["submit_time", "begin_time", "start_time", "end_time"];

/// The GPU request and what its GPUs did.
const GPUS: [&str; 13] = [
    "gpu_count",
    "gpu_type",
    "gpu_shard",
    "gpu_constraint",
    "gpu_samples",
    "gpu_util_sum",
    "gpu_util_max",
    "gpu_mem_max_mb",
    "gpu_low_secs",
    "gpu_devices",
    "start_time",
    "end_time",
    "node",
];

/// The columns `fields` read, or `None` when one of them reads more of a
/// job than is named here (its paths, expanded from several columns):
/// then the whole row is read.
pub(crate) fn columns_for(fields: &[Field]) -> Option<JobColumns> {
    let mut names: Vec<&str> = ALWAYS.to_vec();
    for &field in fields {
        names.extend_from_slice(reads(field)?);
    }
    Some(JobColumns::only(&names))
}

/// The columns `field` reads besides [`ALWAYS`]; `None`: more than a
/// list says (the whole row).
fn reads(field: Field) -> Option<&'static [&'static str]> {
    use Field::*;
    Some(match field {
        JobId | JobIdRaw | ArrayJobId | ArrayTaskId | User | Uid | Account | StateCompact
        | State | NTasks | Partition | NotKept | NotAvailable => &[],
        // A stored job has no queue facts: those come from the snapshot.
        Priority | PrioAge | PrioFairshare | PrioQos | PrioSize => &[],
        Name => &["name"],
        Qos => &["qos"],
        TimeUsed | Elapsed | ElapsedRaw => &["start_time", "end_time"],
        TimeLimit => &["time_limit"],
        TimeLeft => &["time_limit", "start_time", "end_time"],
        Nodes => &["node", "peers", "start_time", "task_layout"],
        NodeList | NodeListReason | BatchHost => &["node", "peers"],
        Reason => &["reason", "borrowed"],
        ReasonCode => &["exit_code", "exit_signal"],
        Gpus | TresPerNode => &["gpu_count", "gpu_type", "gpu_shard"],
        AllocTres | ReqTres => &[
            "cpus",
            "mem_mb",
            "gpu_count",
            "gpu_type",
            "gpu_shard",
            "start_time",
        ],
        Cpus => &["cpus"],
        ReqMem => &["mem_mb"],
        Nice => &["nice"],
        Submit | Eligible | Start | End => &TIMES,
        GpuUtil | GpuUtilMax | GpuMemMax | GpuLowTime | GpuIdleHours | GpuEach | GpuVerdict => {
            &GPUS
        }
        AveRss | MaxRssTask | UserCpu | SystemCpu | AveCpu => &["max_rss_bytes", "cpu_usec"],
        CpuTime | CpuTimeRaw => &["cpus", "start_time", "end_time"],
        ExitCode => &["exit_code", "exit_signal"],
        Restarts => &["restart_count"],
        Preemptions => &["preempt_count"],
        Borrowed => &["borrowed"],
        MaxRss => &["max_rss_bytes"],
        TresUsage => &[
            "cpu_usec",
            "max_rss_bytes",
            "gpu_samples",
            "gpu_util_sum",
            "gpu_mem_max_mb",
        ],
        MailType => &["mail_type"],
        AcctState => &["reason"],
        Billing => &["billing"],
        TotalCpu => &["cpu_usec"],
        Cgroup => &["cgroup"],
        WorkDir => &["work_dir"],
        Comment => &["comment"],
        Dependency => &["dependency"],
        ContainerImage => &["container", "image_reference", "image_digest"],
        // Expanded from the pattern with the job's id, name, user, node...
        StdOut | StdErr => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db;
    use crate::model::job::{example_job, Job, JobState};
    use crate::proto::JobFilter;
    use crate::report::view::JobView;

    /// Every field sacct or squeue can ask for.
    fn every_field() -> Vec<Field> {
        let letters = ('a'..='z')
            .chain('A'..='Z')
            .filter_map(Field::from_squeue_code);
        let long = crate::report::squeue_long::FIELDS
            .iter()
            .filter_map(|(_, f)| *f);
        let mut fields: Vec<Field> = Field::SACCT
            .iter()
            .map(|(_, f)| *f)
            .chain(letters)
            .chain(long)
            .collect();
        fields.sort_by_key(|f| format!("{f:?}"));
        fields.dedup();
        fields
    }

    /// Jobs in each state, every column with a value of its own.
    fn varied_jobs() -> Vec<crate::model::job::Job> {
        let states = [
            JobState::Pending,
            JobState::Running,
            JobState::Suspended,
            JobState::Completed,
            JobState::Failed,
            JobState::Cancelled,
            JobState::Timeout,
            JobState::OutOfMemory,
        ];
        states
            .iter()
            .enumerate()
            .map(|(i, &state)| {
                let mut job = fill_every_field(example_job(0), i as u32);
                job.state = state;
                job
            })
            .collect()
    }

    /// `job` with a value in each field a listing could show, varied by
    /// `n` (an array task, a multi-node run, GPU readings, a container).
    fn fill_every_field(job: Job, n: u32) -> Job {
        use crate::model::container::{ContainerRequest, ImageRecord};
        use crate::model::gpu::{DeviceUse, JobGpuUsage};
        use crate::model::job::{ArrayTask, ExitStatus, MailTypes};
        let start = 2_000 + i64::from(n) * 10;
        Job {
            uid: 1000 + n,
            name: format!("train-{n}"),
            qos: "high".into(),
            begin_time: Some(1_500 + i64::from(n)),
            start_time: Some(start),
            end_time: (n % 2 == 1).then_some(start + 3_600),
            gpus_alloc: vec![0, 1],
            node: Some("gpu01".into()),
            peers: if n.is_multiple_of(3) {
                vec!["gpu02".into()]
            } else {
                Vec::new()
            },
            exit: Some(ExitStatus {
                code: n as i32,
                signal: (n % 2) as i32 * 9,
            }),
            restart_count: n + 1,
            reason: Some(format!("cancelled by bob (uid {})", 1001 + n)),
            borrowed: n.is_multiple_of(2),
            max_rss_bytes: Some(1 << (20 + n)),
            cpu_usec: Some(5_000_000 * u64::from(n + 1)),
            cgroup: Some(format!("/ysched/job_{n}")),
            suspended_secs: 30,
            nice: i64::from(n) - 3,
            billing: Some(7_200 + i64::from(n)),
            dependency: Some("afterok:1".into()),
            array: n.is_multiple_of(2).then(|| ArrayTask {
                job_id: 900,
                task_id: n,
                spec: "0-9%2".into(),
            }),
            preempt_count: n,
            gpu_seconds: 7_200,
            gpu_usage: JobGpuUsage {
                samples: 10 + n,
                utilization_sum: 500 + u64::from(n),
                utilization_max: 90,
                memory_max_mb: 12_000,
                low_secs: 60 * u64::from(n),
                devices: vec![DeviceUse {
                    node: "gpu01".into(),
                    gpu: 1,
                    samples: 10,
                    utilization_sum: 400,
                    memory_max_mb: 9_000,
                    idle_samples: 2,
                    idle_secs: 60,
                }],
            },
            mail_type: MailTypes::parse("END,FAIL").unwrap(),
            container: Some(ContainerRequest::new("yolo:v8").unwrap()),
            image: n.is_multiple_of(2).then(|| ImageRecord {
                reference: "yolo:v8".into(),
                digest: "sha256:ab".into(),
            }),
            ..job
        }
    }

    #[test]
    fn each_field_reads_only_the_columns_it_names() {
        let dir = tempfile::tempdir().unwrap();
        let conn = db::open(&dir.path().join("t.db")).unwrap();
        let payload = db::Payload {
            script: "#!/bin/sh\ntrue\n".into(),
            args: Vec::new(),
            environment: Vec::new(),
        };
        for job in varied_jobs() {
            let id = db::insert_job(&conn, &job, &payload).unwrap();
            db::update_job(&conn, &Job { id, ..job }).unwrap();
        }
        let now = 1_000_000;
        let read = |columns: Option<&JobColumns>| {
            let mut jobs = Vec::new();
            db::for_each_job_reading(&conn, &JobFilter::default(), columns, |j| {
                jobs.push(JobView::stored(j.job()?));
                Ok::<(), db::DbError>(())
            })
            .unwrap();
            jobs
        };
        let whole = read(None);
        assert_eq!(whole.len(), 8);
        let mut lean_fields = 0;
        for field in every_field() {
            let Some(columns) = columns_for(&[field]) else {
                continue;
            };
            lean_fields += 1;
            for (full, lean) in whole.iter().zip(read(Some(&columns))) {
                assert_eq!(
                    field.value(&lean, now),
                    field.value(full, now),
                    "{field:?} of a {} job reads a column it does not name",
                    full.job.state.name()
                );
            }
        }
        assert!(lean_fields > 60, "only {lean_fields} fields read lean");
    }

    #[test]
    fn every_column_named_is_a_column_of_jobs() {
        for field in every_field() {
            for name in reads(field).unwrap_or_default().iter().chain(&ALWAYS) {
                assert!(db::is_job_column(name), "{field:?}: no column {name}");
            }
        }
    }

    #[test]
    fn a_field_expanded_from_several_columns_reads_the_whole_row() {
        assert!(columns_for(&[Field::JobId, Field::StdOut]).is_none());
        assert!(columns_for(&[Field::JobId, Field::Elapsed]).is_some());
    }
}
