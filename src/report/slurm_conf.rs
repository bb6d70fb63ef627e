//! `ysctld export-slurm DIR`: ysched's configuration as Slurm's, for a
//! team that outgrows one controller. `slurm.conf` (the nodes with their
//! CPUs, memory and GPUs, one partition, multifactor priority with the
//! same weights and half-life, QoS preemption), `gres.conf`, a `sacctmgr`
//! load file (the account tree with fair-share shares, users with their
//! default account, coordinators, limits and the QoS they may use) and
//! `qos.sh` (the QoS with priorities, usage factors, grace times and who
//! each preempts: a load file cannot carry QoS). What Slurm has no
//! equivalent for is written as comments saying how it maps and what is
//! lost.

use std::fmt::Write as _;
use std::path::PathBuf;

use crate::config::{Account, Config, PreemptMode, Qos};

/// One node as Slurm declares it.
#[derive(Clone, Debug, PartialEq)]
pub struct ExportNode {
    pub name: String,
    pub cpus: u32,
    pub memory_mb: u64,
    /// Its temporary filesystem, MiB (TmpDisk, what `--tmp` asks of it).
    pub tmp_mb: u64,
    /// Per GPU type: how many, and their device files where known.
    pub gpus: Vec<(String, u32, Vec<PathBuf>)>,
}

/// The files, by name.
pub struct SlurmExport {
    pub files: Vec<(&'static str, String)>,
}

pub fn export(config: &Config, nodes: &[ExportNode], cluster: &str) -> SlurmExport {
    SlurmExport {
        files: vec![
            ("slurm.conf", slurm_conf(config, nodes, cluster)),
            ("gres.conf", gres_conf(nodes)),
            ("qos.sh", qos_script(config)),
            ("sacctmgr.cfg", associations(config, cluster)),
        ],
    }
}

const HEADER: &str = "# Written by `ysctld export-slurm` from ysched's configuration.\n";

/// Minutes, as Slurm's time limits take them (UNLIMITED without one).
fn minutes(secs: Option<u64>) -> String {
    secs.map_or("UNLIMITED".into(), |s| s.div_ceil(60).to_string())
}

fn slurm_conf(config: &Config, nodes: &[ExportNode], cluster: &str) -> String {
    let mut out = String::from(HEADER);
    let w = &config.priority;
    let controller = nodes
        .first()
        .map_or(config.node_name.as_str(), |n| n.name.as_str());
    let _ = writeln!(out, "ClusterName={cluster}\nSlurmctldHost={controller}");
    out.push_str(
        "AuthType=auth/munge\nSlurmUser=slurm\nStateSaveLocation=/var/spool/slurmctld\nSlurmdSpoolDir=/var/spool/slurmd\n\
         ProctrackType=proctrack/cgroup\nTaskPlugin=task/cgroup,task/affinity\nJobAcctGatherType=jobacct_gather/cgroup\n\
         SelectType=select/cons_tres\nSelectTypeParameters=CR_Core_Memory\nGresTypes=gpu\n\
         AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageEnforce=associations,limits,qos\n\
         AccountingStorageTRES=gres/gpu\nPreemptType=preempt/qos\n",
    );
    let suspends = config
        .qos
        .iter()
        .any(|q| q.preempt_mode == PreemptMode::Suspend);
    let _ = writeln!(
        out,
        "PreemptMode={}",
        if suspends { "SUSPEND,GANG" } else { "REQUEUE" }
    );
    let _ = writeln!(
        out,
        "PriorityType=priority/multifactor\nPriorityWeightAge={}\nPriorityWeightFairshare={}\nPriorityWeightQOS={}\nPriorityWeightJobSize={}\nPriorityMaxAge={}",
        w.age,
        w.fairshare,
        w.qos,
        w.size,
        minutes(Some(w.max_age))
    );
    match config.fairshare.half_life {
        Some(h) => {
            let _ = writeln!(out, "PriorityDecayHalfLife={}", minutes(Some(h)));
        }
        None => out.push_str("PriorityDecayHalfLife=0\n"),
    }
    let reset = match config.fairshare.reset {
        crate::config::UsageReset::None => "NONE",
        crate::config::UsageReset::Daily => "DAILY",
        crate::config::UsageReset::Weekly => "WEEKLY",
        crate::config::UsageReset::Monthly => "MONTHLY",
    };
    let _ = writeln!(
        out,
        "PriorityUsageResetPeriod={reset}\nMinJobAge={}",
        config.min_job_age_secs.max(2)
    );
    out.push('\n');
    for node in nodes {
        let gres: Vec<String> = node
            .gpus
            .iter()
            .map(|(t, n, _)| format!("gpu:{t}:{n}"))
            .collect();
        let gres = if gres.is_empty() {
            String::new()
        } else {
            format!(" Gres={}", gres.join(","))
        };
        let _ = writeln!(
            out,
            "NodeName={} CPUs={} RealMemory={} TmpDisk={}{gres} State=UNKNOWN",
            node.name, node.cpus, node.memory_mb, node.tmp_mb
        );
    }
    let _ = writeln!(
        out,
        "PartitionName={} Nodes=ALL Default=YES DefaultTime={} MaxTime={} State=UP",
        crate::slurm_options::PARTITION,
        minutes(config.default_time),
        minutes(config.max_time)
    );
    out
}

fn gres_conf(nodes: &[ExportNode]) -> String {
    let mut out = String::from(HEADER);
    for node in nodes {
        for (gpu_type, count, devices) in &node.gpus {
            if devices.len() == *count as usize {
                let files: Vec<String> = devices.iter().map(|d| d.display().to_string()).collect();
                let _ = writeln!(
                    out,
                    "NodeName={} Name=gpu Type={gpu_type} File={}",
                    node.name,
                    files.join(",")
                );
            } else {
                let _ = writeln!(
                    out,
                    "NodeName={} Name=gpu Type={gpu_type} Count={count} AutoDetect=nvml",
                    node.name
                );
            }
        }
    }
    out
}

/// The QoS as `sacctmgr` commands: made first, then each one's preemption
/// list (which names the others).
fn qos_script(config: &Config) -> String {
    let mut out =
        format!("#!/bin/sh\n{HEADER}# Run once, with slurmdbd and slurmctld (on the exported slurm.conf)\n# running, before `sacctmgr load sacctmgr.cfg`.\nset -e\n");
    for q in &config.qos {
        let mut line = format!(
            "sacctmgr -i add qos {} Priority={} UsageFactor={} GraceTime={} PreemptMode={} PreemptExemptTime={}",
            q.name,
            q.priority.max(0),
            q.usage_factor,
            q.grace_time,
            preempt_mode(q),
            minutes(Some(q.min_run_time))
        );
        if let Some(t) = q.max_time {
            let _ = write!(line, " MaxWall={}", minutes(Some(t)));
        }
        if let Some(g) = q.max_gpus_per_user {
            let _ = write!(line, " MaxTRESPerUser=gres/gpu={g}");
        }
        let _ = writeln!(out, "{line}");
        lost_for_qos(&mut out, q);
    }
    for q in config.qos.iter().filter(|q| !q.preempt.is_empty()) {
        let victims: Vec<&str> = q
            .preempt
            .iter()
            .filter(|v| config.qos_named(v).is_some_and(|v| v.preemptible))
            .map(String::as_str)
            .collect();
        if !victims.is_empty() {
            let _ = writeln!(
                out,
                "sacctmgr -i modify qos {} set Preempt={}",
                q.name,
                victims.join(",")
            );
        }
    }
    out
}

fn preempt_mode(q: &Qos) -> &'static str {
    match q.preempt_mode {
        PreemptMode::Requeue => "REQUEUE",
        PreemptMode::Cancel => "CANCEL",
        PreemptMode::Suspend => "SUSPEND",
    }
}

fn lost_for_qos(out: &mut String, q: &Qos) {
    if q.reserve.is_some() {
        let _ = writeln!(
            out,
            "# {}: its reserve of GPUs kept free has no QoS equivalent; a Slurm reservation (scontrol create reservation ... Flags=FLEX) for the QoS's users comes nearest.",
            q.name
        );
    }
    if !q.preemptible {
        let _ = writeln!(
            out,
            "# {}: not preemptible: it is left out of every Preempt list.",
            q.name
        );
    }
}

/// The account tree, its users and their limits, as `sacctmgr load`
/// reads it.
fn associations(config: &Config, cluster: &str) -> String {
    let mut out = String::from(HEADER);
    let _ = writeln!(
        out,
        "# Load with: sacctmgr -i load file=sacctmgr.cfg, after slurmctld has run once on the\n# exported slurm.conf (it registers the cluster and its gres/gpu TRES, which\n# GrpTRES=gres/gpu needs) and after qos.sh"
    );
    let _ = writeln!(
        out,
        "Cluster - '{cluster}':Fairshare=1:QOS='{}'",
        all_qos(config).join(",")
    );
    let _ = writeln!(out, "Parent - 'root'");
    let _ = writeln!(
        out,
        "User - 'root':DefaultAccount='root':AdminLevel='Administrator':Fairshare=1"
    );
    for admin in config.admins.iter().filter(|a| *a != "root") {
        let _ = writeln!(
            out,
            "User - '{admin}':DefaultAccount='root':AdminLevel='Administrator':Fairshare=1"
        );
    }
    write_children(&mut out, config, None);
    out
}

fn all_qos(config: &Config) -> Vec<String> {
    config.qos.iter().map(|q| q.name.clone()).collect()
}

/// The accounts under `parent` (`None`: the root), then each one's users
/// and children.
fn write_children(out: &mut String, config: &Config, parent: Option<&str>) {
    let children: Vec<&Account> = config
        .accounts
        .iter()
        .filter(|a| a.parent.as_deref() == parent)
        .collect();
    if children.is_empty() {
        return;
    }
    for account in &children {
        let _ = writeln!(out, "{}", account_line(account));
        lost_for_account(out, account);
    }
    for account in children {
        if account.users.iter().any(|u| u == "*") {
            let _ = writeln!(out, "# {}: users = [\"*\"] admits everyone; Slurm needs each user added (sacctmgr add user NAME account={}).", account.name, account.name);
        }
        let users: Vec<&String> = account.users.iter().filter(|u| *u != "*").collect();
        let has_children = config
            .accounts
            .iter()
            .any(|a| a.parent.as_deref() == Some(&account.name));
        if users.is_empty() && !has_children {
            continue;
        }
        let _ = writeln!(out, "Parent - '{}'", account.name);
        for user in users {
            let _ = writeln!(out, "{}", user_line(config, account, user));
        }
        write_children(out, config, Some(&account.name));
    }
}

fn account_line(a: &Account) -> String {
    let l = &a.limits;
    let mut line = format!(
        "Account - '{}':Description='{}':Organization='{}':Fairshare={}",
        a.name,
        a.name,
        a.name,
        slurm_shares(a.shares)
    );
    if let Some(g) = l.max_gpus {
        let _ = write!(line, ":GrpTRES=gres/gpu={g}");
    }
    if let Some(j) = l.max_running_jobs {
        let _ = write!(line, ":GrpJobs={j}");
    }
    if let Some(j) = l.max_submitted_jobs {
        let _ = write!(line, ":GrpSubmitJobs={j}");
    }
    if let Some(g) = l.max_gpus_per_job {
        let _ = write!(line, ":MaxTRES=gres/gpu={g}");
    }
    if let Some(t) = l.max_time {
        let _ = write!(line, ":MaxWall={}", minutes(Some(t)));
    }
    line
}

/// The QoS `user` may use in `account`, in config order.
pub fn qos_of_user(config: &Config, account: &str, user: &str) -> Vec<String> {
    config
        .qos
        .iter()
        .filter(|q| {
            crate::sched::admission::check_qos_access(config, &q.name, account, u32::MAX, user)
                .is_ok()
        })
        .map(|q| q.name.clone())
        .collect()
}

/// An account's fair-share shares as Slurm takes them: a whole number,
/// at least 1.
pub fn slurm_shares(shares: f64) -> f64 {
    shares.round().max(1.0)
}

fn user_line(config: &Config, account: &Account, user: &str) -> String {
    let allowed = qos_of_user(config, &account.name, user);
    let mut line = format!(
        "User - '{user}':DefaultAccount='{}':Fairshare=1:QOS='{}':DefaultQOS='{}'",
        account.name,
        allowed.join(","),
        config.default_qos
    );
    if account.coordinators.iter().any(|c| c == user) {
        let _ = write!(line, ":Coordinator='{}'", account.name);
    }
    if let Some(g) = account.limits.max_gpus_per_user {
        let _ = write!(line, ":GrpTRES=gres/gpu={g}");
    }
    if let Some(j) = account.limits.max_running_jobs_per_user {
        let _ = write!(line, ":GrpJobs={j}");
    }
    line
}

/// What an account has that Slurm cannot say, as comments.
fn lost_for_account(out: &mut String, a: &Account) {
    let name = &a.name;
    if let Some(b) = &a.budget {
        let tokens = b.amount as f64 / crate::model::policy::TOKEN;
        let _ = writeln!(
            out,
            "# {name}: a budget of {tokens} tokens per {} maps to GrpTRESMins=billing={} on the account, reset by PriorityUsageResetPeriod; ysched's warning at {:.0}% and going over it ({}) are lost: Slurm holds jobs over GrpTRESMins instead.",
            match b.period {
                crate::model::policy::Period::Day => "day",
                crate::model::policy::Period::Week => "week",
                crate::model::policy::Period::Month => "month",
            },
            (tokens * 60.0).round(),
            b.warning * 100.0,
            match b.over {
                crate::model::policy::OverBudget::Refuse => "refused at submit",
                crate::model::policy::OverBudget::LowestQos => "demoted to the lowest QoS",
            }
        );
    }
    if !a.limits.max_gpus_windows.is_empty() {
        let _ = writeln!(out, "# {name}: max_gpus by time of day has no association equivalent; a cron job running `sacctmgr modify account {name} set GrpTRES=gres/gpu=N` at each window's edge comes nearest.");
    }
    if !a.limits.max_gpus_by_type.is_empty() {
        let by_type: Vec<String> = a
            .limits
            .max_gpus_by_type
            .iter()
            .map(|(t, n)| format!("gres/gpu:{t}={n}"))
            .collect();
        let _ = writeln!(out, "# {name}: max_gpus by type: add GrpTRES={} (needs AccountingStorageTRES=gres/gpu:TYPE for each type).", by_type.join(","));
    }
    if a.approval.above_gpu_hours.is_some() || !a.approval.gpu_types.is_empty() {
        let _ = writeln!(out, "# {name}: approval of big jobs is lost: Slurm has no approval step (a job_submit Lua plugin holding such jobs for a coordinator's `scontrol release` comes nearest).");
    }
    if a.limits.borrow_limit.is_some() {
        let _ = writeln!(out, "# {name}: elastic quotas (borrow_limit) are lost: GrpTRES is a hard cap in Slurm; a preemptible QoS without the cap comes nearest.");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        Config::parse(
            r#"
node_name = "gpu01"
admins = ["carol"]
default_time = "1:00:00"
[[gpus]]
type = "a100"
count = 4
memory = "80GiB"
[[accounts]]
name = "vision"
shares = 60
users = ["alice", "bob"]
coordinators = ["alice"]
max_gpus = 6
budget = 500
approval_above_gpu_hours = 16
[[accounts]]
name = "detection"
parent = "vision"
users = ["dan"]
"#,
            std::path::Path::new("/etc/ysched/ysched.toml"),
        )
        .unwrap()
    }

    fn node() -> ExportNode {
        ExportNode {
            name: "gpu01".into(),
            cpus: 64,
            memory_mb: 515_000,
            tmp_mb: 100_000,
            gpus: vec![(
                "a100".into(),
                4,
                (0..4)
                    .map(|i| PathBuf::from(format!("/dev/nvidia{i}")))
                    .collect(),
            )],
        }
    }

    fn file<'a>(e: &'a SlurmExport, name: &str) -> &'a str {
        &e.files.iter().find(|(n, _)| *n == name).unwrap().1
    }

    #[test]
    fn nodes_accounts_qos_and_what_is_lost_are_written() {
        let e = export(&config(), &[node()], "ysched");
        let conf = file(&e, "slurm.conf");
        assert!(
            conf.contains(
                "NodeName=gpu01 CPUs=64 RealMemory=515000 TmpDisk=100000 Gres=gpu:a100:4 State=UNKNOWN"
            ),
            "{conf}"
        );
        assert!(
            conf.contains("PartitionName=ysched Nodes=ALL Default=YES DefaultTime=60"),
            "{conf}"
        );
        assert!(conf.contains("PreemptType=preempt/qos"));
        let gres = file(&e, "gres.conf");
        assert!(gres.contains("NodeName=gpu01 Name=gpu Type=a100 File=/dev/nvidia0,/dev/nvidia1,/dev/nvidia2,/dev/nvidia3"), "{gres}");
        let load = file(&e, "sacctmgr.cfg");
        assert!(load.contains("Account - 'vision':Description='vision':Organization='vision':Fairshare=60:GrpTRES=gres/gpu=6"), "{load}");
        assert!(
            load.contains("User - 'alice':DefaultAccount='vision'"),
            "{load}"
        );
        assert!(load.contains(":Coordinator='vision'"), "{load}");
        assert!(load.contains("Parent - 'vision'\n"), "{load}");
        assert!(load.contains("Account - 'detection'"), "{load}");
        assert!(load.contains("GrpTRESMins=billing=30000"), "{load}");
        assert!(load.contains("approval of big jobs is lost"), "{load}");
        assert!(
            load.contains("User - 'carol':DefaultAccount='root':AdminLevel='Administrator'"),
            "{load}"
        );
        let qos = file(&e, "qos.sh");
        assert!(
            qos.contains("sacctmgr -i add qos critical Priority="),
            "{qos}"
        );
        assert!(
            qos.contains("sacctmgr -i modify qos critical set Preempt="),
            "{qos}"
        );
    }
}
