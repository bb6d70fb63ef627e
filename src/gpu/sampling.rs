//! GPU utilisation, sampled every few seconds where an NVIDIA driver
//! answers, and summed per job: mean and peak utilisation, peak memory,
//! and time spent below a threshold (what the waste ranking needs). Where
//! no driver answers there is no data, and reports say "n/a" — never a
//! made-up number.

use crate::model::gpu::Sample;

/// Where samples come from.
pub trait Source: Send {
    /// What this source is, for the log.
    fn describe(&self) -> String;
    /// The GPUs now; `None` when this source has no data.
    fn sample(&mut self) -> Option<Vec<Sample>>;
    /// The processes computing on each GPU now, as (GPU, pid); `None` when
    /// this source cannot tell.
    fn processes(&mut self) -> Option<Vec<(u32, u32)>> {
        None
    }
}

/// A process on a GPU that the job holding the GPU does not own, or on a
/// GPU no job holds: a job trampling another's GPU, or work run outside
/// ysched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Intruder {
    pub gpu: u32,
    pub pid: u32,
    /// The job holding the GPU, if any.
    pub holder: Option<crate::model::job::JobId>,
}

/// What the system says of a process: its cgroup path and its uid.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProcessOwner {
    pub cgroup: String,
    pub uid: u32,
}

/// A process computing on a GPU, and whose it is: what a node sends the
/// controller, which alone knows which job holds which GPU.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GpuProcess {
    pub gpu: u32,
    pub pid: u32,
    pub owner: ProcessOwner,
}

/// The processes on GPUs, as (GPU, pid), with their owners as `owner`
/// tells them; processes that ended before it could look (`None`) are
/// left out.
pub fn owned(
    processes: &[(u32, u32)],
    owner: impl Fn(u32) -> Option<ProcessOwner>,
) -> Vec<GpuProcess> {
    processes
        .iter()
        .filter_map(|&(gpu, pid)| {
            Some(GpuProcess {
                gpu,
                pid,
                owner: owner(pid)?,
            })
        })
        .collect()
}

/// The processes on GPUs that are not their holder's: a process belongs
/// to the job when it is in the job's cgroup, or (a job without one) when
/// it runs as the job's user.
pub fn intruders<'a>(
    processes: &[GpuProcess],
    jobs: impl IntoIterator<Item = &'a crate::model::job::Job>,
) -> Vec<Intruder> {
    let holders: Vec<&crate::model::job::Job> =
        jobs.into_iter().filter(|j| j.state.holds_gpus()).collect();
    let mut out = Vec::new();
    for p in processes {
        let holder = holders.iter().find(|j| j.gpus_alloc.contains(&p.gpu));
        let belongs = holder.is_some_and(|job| match &job.cgroup {
            Some(_) => in_job_cgroup(&p.owner.cgroup, job.id),
            None => p.owner.uid == job.uid,
        });
        if !belongs {
            out.push(Intruder {
                gpu: p.gpu,
                pid: p.pid,
                holder: holder.map(|j| j.id),
            });
        }
    }
    out
}

/// Whether `/proc/PID/cgroup` text puts the process in the job's cgroup
/// (its `job_ID` group, or one below it) in any hierarchy.
fn in_job_cgroup(cgroups: &str, job: crate::model::job::JobId) -> bool {
    let group = format!("/{}", crate::model::isolation::group_name(job));
    cgroups.lines().any(|line| {
        let path = line.splitn(3, ':').nth(2).unwrap_or("");
        path.ends_with(&group) || path.contains(&format!("{group}/"))
    })
}

/// `/proc/PID/cgroup`'s paths and the real uid, if the process still runs.
pub fn process_owner(pid: u32) -> Option<ProcessOwner> {
    let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(ProcessOwner { cgroup, uid })
}

/// What a source says at one moment: each GPU's sample, and (where it
/// can tell) the processes on them with their owners on this host.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Reading {
    pub samples: Vec<Sample>,
    pub processes: Option<Vec<GpuProcess>>,
}

/// Reads `source` now; `None` when it has no data.
pub fn read(source: &mut dyn Source) -> Option<Reading> {
    let samples = source.sample()?;
    let processes = source.processes().map(|p| owned(&p, process_owner));
    Some(Reading { samples, processes })
}

/// No driver: no data.
pub struct NoData;

impl Source for NoData {
    fn describe(&self) -> String {
        "none (no NVIDIA driver answered: GPU utilisation is not known)".into()
    }

    fn sample(&mut self) -> Option<Vec<Sample>> {
        None
    }
}

/// The NVIDIA driver, through NVML. GPU `i` of the inventory is NVML's
/// device `i` (the inventory is NVML's order, or declared in that order).
pub struct Nvml {
    nvml: nvml_wrapper::Nvml,
    count: u32,
}

impl Source for Nvml {
    fn describe(&self) -> String {
        format!("NVML ({} GPUs)", self.count)
    }

    fn sample(&mut self) -> Option<Vec<Sample>> {
        let mut out = Vec::with_capacity(self.count as usize);
        for i in 0..self.count {
            let Ok(device) = self.nvml.device_by_index(i) else {
                continue;
            };
            let (Ok(rates), Ok(memory)) = (device.utilization_rates(), device.memory_info()) else {
                continue;
            };
            out.push(Sample {
                gpu: i,
                utilization_pct: rates.gpu.min(100),
                memory_used_mb: memory.used / (1 << 20),
            });
        }
        (!out.is_empty()).then_some(out)
    }

    fn processes(&mut self) -> Option<Vec<(u32, u32)>> {
        let mut out = Vec::new();
        for i in 0..self.count {
            let device = self.nvml.device_by_index(i).ok()?;
            let running = device.running_compute_processes().ok()?;
            out.extend(running.into_iter().map(|p| (i, p.pid)));
        }
        Some(out)
    }
}

/// NVML where a driver answers with GPUs, else no data.
pub fn detect() -> Box<dyn Source> {
    match nvml_wrapper::Nvml::init() {
        Ok(nvml) => match nvml.device_count() {
            Ok(count) if count > 0 => Box::new(Nvml { nvml, count }),
            _ => Box::new(NoData),
        },
        Err(_) => Box::new(NoData),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::gpu::JobGpuUsage;

    #[test]
    fn processes_on_gpus_their_holder_does_not_own_are_intruders() {
        let mut job = crate::model::job::example_job(17);
        job.state = crate::model::job::JobState::Running;
        job.gpus_alloc = vec![0, 1];
        job.uid = 1000;
        job.cgroup = Some("/sys/fs/cgroup/<controller>/ysched/job_17".into());
        let owners = |pid: u32| match pid {
            1 => Some(ProcessOwner {
                cgroup: "5:devices:/ysched/job_17\n4:memory:/ysched/job_17\n".into(),
                uid: 1000,
            }),
            2 => Some(ProcessOwner {
                cgroup: "0::/user.slice/session-4.scope\n".into(),
                uid: 1000,
            }),
            3 => Some(ProcessOwner {
                cgroup: "0::/ysched/job_170\n".into(),
                uid: 1001,
            }),
            _ => None,
        };
        // pid 1 is the job's; 2 runs outside it on its GPU; 3 is on a GPU
        // no job holds (and job_170 is not job_17); 4 has ended.
        let found = intruders(&owned(&[(0, 1), (1, 2), (3, 3), (1, 4)], owners), [&job]);
        assert_eq!(
            found,
            vec![
                Intruder {
                    gpu: 1,
                    pid: 2,
                    holder: Some(17)
                },
                Intruder {
                    gpu: 3,
                    pid: 3,
                    holder: None
                },
            ]
        );
        // Without a cgroup, the job's user is what counts.
        job.cgroup = None;
        assert_eq!(intruders(&owned(&[(1, 2)], owners), [&job]), vec![]);
    }

    /// A scripted source, for tests only.
    struct Scripted(Vec<Vec<Sample>>);

    impl Source for Scripted {
        fn describe(&self) -> String {
            "scripted".into()
        }

        fn sample(&mut self) -> Option<Vec<Sample>> {
            (!self.0.is_empty()).then(|| self.0.remove(0))
        }
    }

    fn s(gpu: u32, pct: u32, mb: u64) -> Sample {
        Sample {
            gpu,
            utilization_pct: pct,
            memory_used_mb: mb,
        }
    }

    #[test]
    fn a_jobs_gpus_are_summed_and_idle_time_counted() {
        let mut source = Scripted(vec![
            vec![s(0, 90, 1_000), s(1, 70, 3_000), s(2, 100, 9_000)],
            vec![s(0, 10, 1_000), s(1, 0, 500), s(2, 100, 9_000)],
        ]);
        let mut usage = JobGpuUsage::default();
        while let Some(samples) = source.sample() {
            usage.add(&samples, ("gpu01", &[0, 1]), 30, 20);
        }
        // Means 80 and 5: 42.5 on average; the second sample was idle.
        assert_eq!(usage.mean(), Some(42.5));
        assert_eq!(usage.utilization_max, 90);
        assert_eq!(usage.memory_max_mb, 3_000);
        assert_eq!(usage.low_secs, 30);
        // GPU 0 was read busy then idle, GPU 1 busy then idle too.
        let each: Vec<_> = usage
            .devices
            .iter()
            .map(|d| (d.gpu, d.mean(), d.memory_max_mb, d.idle_secs))
            .collect();
        assert_eq!(
            each,
            [(0, Some(50.0), 1_000, 30), (1, Some(35.0), 3_000, 30)]
        );
        assert_eq!(usage.idle_gpu_hours(), 60.0 / 3600.0);
        assert_eq!(usage.verdict(2), "2 of 2 GPUs idle 50 % of the time");
        usage.add(&[s(0, 95, 1), s(1, 1, 1)], ("gpu01", &[0, 1]), 30, 20);
        assert_eq!(usage.verdict(2), "1 of 2 GPUs idle 67 % of the time");
        assert!(JobGpuUsage::default()
            .verdict(4)
            .starts_with("no GPU readings"));
    }

    #[test]
    fn no_data_is_no_number() {
        let mut none = NoData;
        assert_eq!(none.sample(), None);
        let usage = JobGpuUsage::default();
        assert_eq!(usage.mean(), None);
        let mut other = JobGpuUsage::default();
        other.add(&[s(5, 50, 1)], ("gpu01", &[0]), 30, 20);
        assert_eq!(other.samples, 0, "samples of other GPUs are not the job's");
    }
}
