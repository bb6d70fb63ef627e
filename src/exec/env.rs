//! The environment a job runs with: the submitter's exported variables, then
//! the identity of the user it runs as, then the variables that describe the
//! job (ysched's `YS_*` and the `SLURM_*` names Slurm scripts read), which
//! nothing the submitter exported may override.

use super::spec::LaunchSpec;
use crate::model::tasks::{tasks_per_node_text, NodePart};

pub fn job_environment(spec: &LaunchSpec) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = spec
        .environment
        .iter()
        .filter(|(k, _)| crate::model::job::passes_to_job(k))
        .cloned()
        .collect();
    let mut set = |key: &str, value: String| {
        env.retain(|(k, _)| k != key);
        env.push((key.to_string(), value));
    };
    // Identity comes from the account the job runs as, not from the file.
    set("USER", spec.user.clone());
    set("LOGNAME", spec.user.clone());
    set("HOME", spec.home.display().to_string());
    set("SHELL", spec.shell.display().to_string());
    if !spec.environment.iter().any(|(k, _)| k == "PATH") {
        set("PATH", "/usr/local/bin:/usr/bin:/bin".to_string());
    }

    let id = spec.job_id.to_string();
    let gpus = spec
        .gpus
        .iter()
        .map(|g| g.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let restarts = spec.restart_count.to_string();
    let submit_dir = spec.submit_dir.display().to_string();
    let part = spec
        .part
        .clone()
        .unwrap_or_else(|| NodePart::single(&spec.node_name));
    let nodelist = crate::model::hostlist::compress(&part.nodes);
    let node_count = part.nodes.len() as u32;
    let most_tasks = part.most_tasks();
    let time_limit = spec
        .time_limit
        .map(|s| s.div_ceil(60).to_string())
        .unwrap_or_else(|| "UNLIMITED".into());
    let job = [
        ("JOB_ID", id.clone()),
        ("JOB_NAME", spec.name.clone()),
        ("JOB_ACCOUNT", spec.account.clone()),
        ("JOB_QOS", spec.qos.clone()),
        ("JOB_USER", spec.user.clone()),
        ("JOB_UID", spec.uid.to_string()),
        ("JOB_GPUS", gpus.clone()),
        (
            "JOB_CPUS_PER_NODE",
            tasks_per_node_text(&vec![spec.cpus; node_count as usize]),
        ),
        ("JOB_NODELIST", nodelist.clone()),
        ("SUBMIT_DIR", submit_dir.clone()),
        ("SUBMIT_HOST", spec.node_name.clone()),
        ("RESTART_COUNT", restarts.clone()),
        ("CPUS_PER_TASK", (spec.cpus / most_tasks).max(1).to_string()),
    ];
    for (suffix, value) in &job {
        set(&format!("YS_{suffix}"), value.clone());
        set(&format!("SLURM_{suffix}"), value.clone());
    }
    set("YS_TIME_LIMIT_MINUTES", time_limit);
    if let Some(task) = &spec.array {
        set_array_task(&mut set, task);
    }
    set_nodes(&mut set, &part, nodelist);
    for (key, value) in [
        ("SLURM_JOBID", id),
        ("SLURM_PROCID", "0".to_string()),
        ("SLURM_LOCALID", "0".to_string()),
        ("SLURMD_NODENAME", spec.node_name.clone()),
        ("SLURM_CPUS_ON_NODE", spec.cpus.to_string()),
        ("SLURM_CLUSTER_NAME", "ysched".to_string()),
        (
            "SLURM_JOB_PARTITION",
            crate::slurm_options::PARTITION.to_string(),
        ),
    ] {
        set(key, value);
    }
    if let Some(mem) = spec.mem_mb {
        set("SLURM_MEM_PER_NODE", mem.to_string());
    }
    if let Some(shards) = spec.shards {
        // Its part of a card it shares with other jobs (Slurm's shard GRES).
        set("SLURM_SHARDS_ON_NODE", shards.to_string());
        set("YS_SHARDS", shards.to_string());
    }
    if spec.borrowed {
        // It runs on GPUs another account lends: checkpoint often.
        set("YS_BORROWED", "1".to_string());
    }
    set_gpus(&mut set, spec, gpus);
    env
}

/// The job's nodes and tasks, and this node's place among them; for a job
/// over several nodes, what srun and torchrun's rendezvous need: where
/// each node is reached, its task server's port (for srun), and a port on
/// the first for the rendezvous: ports the controller chose at random for
/// this run, so that another user cannot take them first by guessing.
fn set_nodes(set: &mut impl FnMut(&str, String), part: &NodePart, nodelist: String) {
    let node_count = part.nodes.len();
    for (key, value) in [
        ("SLURM_NTASKS", part.task_count().to_string()),
        ("SLURM_NPROCS", part.task_count().to_string()),
        ("SLURM_JOB_NUM_NODES", node_count.to_string()),
        ("SLURM_NNODES", node_count.to_string()),
        ("SLURM_NODELIST", nodelist),
        (
            "SLURM_TASKS_PER_NODE",
            tasks_per_node_text(&part.tasks_per_node),
        ),
        ("SLURM_NODEID", part.index.to_string()),
    ] {
        set(key, value);
    }
    if let Some(g) = part.gpus_per_task {
        set("SLURM_GPUS_PER_TASK", g.to_string());
    }
    if node_count > 1 || part.interactive {
        set("YS_NODE_ADDRS", part.addresses.join(","));
        set("YS_STEP_KEY", part.step_key.clone());
        let ports: Vec<String> = part.ports.task_servers.iter().map(u16::to_string).collect();
        set("YS_STEP_PORTS", ports.join(","));
        let spare: Vec<String> = part.ports.spare.iter().map(u16::to_string).collect();
        set("YS_STEP_SPARE_PORTS", spare.join(","));
        if let Some(first) = part.addresses.first() {
            set("MASTER_ADDR", first.clone());
        }
        set("MASTER_PORT", part.ports.master.to_string());
    }
}

/// An array task's `*_ARRAY_*` variables.
fn set_array_task(set: &mut impl FnMut(&str, String), task: &crate::model::job::ArrayTask) {
    // The spec was checked at submit; an unreadable one leaves these out.
    let (count, min, max, step) = match crate::array::ArraySpec::parse(&task.spec, u32::MAX) {
        Ok(a) => (a.indices.len() as u32, a.min(), a.max(), a.step()),
        Err(_) => (1, task.task_id, task.task_id, 1),
    };
    for (suffix, value) in [
        ("ARRAY_JOB_ID", task.job_id.to_string()),
        ("ARRAY_TASK_ID", task.task_id.to_string()),
        ("ARRAY_TASK_COUNT", count.to_string()),
        ("ARRAY_TASK_MIN", min.to_string()),
        ("ARRAY_TASK_MAX", max.to_string()),
        ("ARRAY_TASK_STEP", step.to_string()),
    ] {
        set(&format!("YS_{suffix}"), value.clone());
        set(&format!("SLURM_{suffix}"), value);
    }
}

/// Which GPUs CUDA shows the job, and in what order.
fn set_gpus(set: &mut impl FnMut(&str, String), spec: &LaunchSpec, gpus: String) {
    // Confined to its GPUs by its cgroup, a job sees them numbered from 0,
    // as under Slurm; otherwise it is told its GPUs' global indices. Either
    // way CUDA is asked to number GPUs as NVML does, and a job without GPUs
    // gets an empty list: it must not wander onto GPU 0.
    let visible = if spec.gpus_confined {
        (0..spec.gpus.len())
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",")
    } else {
        gpus
    };
    set("CUDA_VISIBLE_DEVICES", visible.clone());
    set("CUDA_DEVICE_ORDER", "PCI_BUS_ID".to_string());
    set("GPU_DEVICE_ORDINAL", visible);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> LaunchSpec {
        LaunchSpec {
            job_id: 17,
            name: "yolo".into(),
            user: "alice".into(),
            uid: 1000,
            gid: 1000,
            home: "/home/alice".into(),
            shell: "/bin/bash".into(),
            account: "vision".into(),
            qos: "medium".into(),
            restart_count: 2,
            gpus: vec![1, 3],
            node_name: "gpu01".into(),
            work_dir: "/w".into(),
            submit_dir: "/s".into(),
            stdout: "/w/o".into(),
            stderr: None,
            open_append: false,
            environment: vec![
                ("PATH".into(), "/opt/bin".into()),
                ("USER".into(), "mallory".into()),
                ("SLURM_JOB_ID".into(), "999".into()),
                ("CUDA_VISIBLE_DEVICES".into(), "0,1,2,3".into()),
                ("MY_VAR".into(), "x".into()),
                ("YS_CONF".into(), "/etc/ysched/team.toml".into()),
                ("YS_ARRAY_TASK_ID".into(), "5".into()),
            ],
            args: vec![],
            cpus: 4,
            mem_mb: Some(8192),
            time_limit: Some(90),
            submit_time: 0,
            switch_user: true,
            cgroup: crate::exec::cgroup::Placement::off(),
            limits: Default::default(),
            gpus_confined: false,
            array: None,
            shards: None,
            lease_file: None,
            borrowed: false,
            part: None,
            container: None,
            step_containers: None,
        }
    }

    fn get<'a>(env: &'a [(String, String)], key: &str) -> Option<&'a str> {
        env.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    #[test]
    fn job_variables_win_over_exported_ones() {
        let env = job_environment(&spec());
        assert_eq!(get(&env, "CUDA_VISIBLE_DEVICES"), Some("1,3"));
        assert_eq!(get(&env, "CUDA_DEVICE_ORDER"), Some("PCI_BUS_ID"));
        assert_eq!(get(&env, "SLURM_JOB_ID"), Some("17"));
        assert_eq!(get(&env, "YS_JOB_ID"), Some("17"));
        assert_eq!(get(&env, "SLURM_JOB_GPUS"), Some("1,3"));
        assert_eq!(get(&env, "YS_RESTART_COUNT"), Some("2"));
        assert_eq!(get(&env, "SLURM_RESTART_COUNT"), Some("2"));
        assert_eq!(get(&env, "SLURM_NTASKS"), Some("1"));
        assert_eq!(get(&env, "SLURM_JOB_NODELIST"), Some("gpu01"));
        assert_eq!(get(&env, "SLURM_SUBMIT_DIR"), Some("/s"));
        assert_eq!(
            get(&env, "USER"),
            Some("alice"),
            "identity is not taken from the submitted environment"
        );
        assert_eq!(get(&env, "PATH"), Some("/opt/bin"));
        assert_eq!(get(&env, "MY_VAR"), Some("x"));
        assert_eq!(get(&env, "YS_TIME_LIMIT_MINUTES"), Some("2"));
        assert_eq!(env.iter().filter(|(k, _)| k == "SLURM_JOB_ID").count(), 1);
        assert_eq!(
            get(&env, "YS_CONF"),
            Some("/etc/ysched/team.toml"),
            "ysbatch inside the job talks to the same daemon"
        );
        assert_eq!(get(&env, "YS_ARRAY_TASK_ID"), None, "not an array task");
    }

    #[test]
    fn confined_gpus_are_numbered_from_zero_but_keep_their_global_ids() {
        let mut s = spec();
        s.gpus_confined = true;
        let env = job_environment(&s);
        assert_eq!(get(&env, "CUDA_VISIBLE_DEVICES"), Some("0,1"));
        assert_eq!(get(&env, "SLURM_JOB_GPUS"), Some("1,3"));
        assert_eq!(get(&env, "YS_JOB_GPUS"), Some("1,3"));
    }

    #[test]
    fn no_gpus_means_an_empty_device_list() {
        let mut s = spec();
        s.gpus.clear();
        s.environment.clear();
        let env = job_environment(&s);
        assert_eq!(get(&env, "CUDA_VISIBLE_DEVICES"), Some(""));
        assert_eq!(get(&env, "PATH"), Some("/usr/local/bin:/usr/bin:/bin"));
    }
}
