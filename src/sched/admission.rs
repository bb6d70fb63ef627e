//! Whether a submission is acceptable at all: the user's account and QoS,
//! and a request the server could ever satisfy. A job that could never run
//! is refused at submit with the reason, instead of waiting forever.

use thiserror::Error;

use crate::config::Config;
use crate::gpu::Inventory;
use crate::model::job::JobRequest;
use crate::model::units;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum AdmissionError {
    #[error("jobs may not run as root; set allow_root_jobs = true in {config} to allow it")]
    RootJob { config: String },
    #[error("user {user} may not use account '{account}' (allowed: {allowed})")]
    Account {
        user: String,
        account: String,
        allowed: String,
    },
    #[error("user {user} belongs to no account; an administrator must add them to an [[accounts]] table in {config}")]
    NoAccount { user: String, config: String },
    #[error("unknown QoS '{qos}' (known: {known})")]
    Qos { qos: String, known: String },
    #[error("no GPU of type '{gpu_type}' on this server (it has: {available})")]
    GpuType { gpu_type: String, available: String },
    #[error("{requested} GPUs requested{of_type} but this server has at most {available} (GPUs: {inventory})")]
    GpuCount {
        requested: u32,
        of_type: String,
        available: u32,
        inventory: String,
    },
    #[error("--constraint '{constraint}': {requested} GPUs requested but at most {available} of one type match (GPUs: {inventory})")]
    Constraint {
        constraint: String,
        requested: u32,
        available: u32,
        inventory: String,
    },
    #[error("--gpus {request}: no GPU{of_type} is shared in shards here (GPUs: {inventory}); the config's [[gpus]] tables say which are, with shards = N")]
    NoShards {
        request: String,
        of_type: String,
        inventory: String,
    },
    #[error("--gpus {request}: a shard job runs on one GPU, and the matching GPUs have {available} shards each (GPUs: {inventory})")]
    ShardCount {
        request: String,
        available: u32,
        inventory: String,
    },
    #[error("{requested} CPUs requested but this server offers {available}")]
    Cpus { requested: u32, available: u32 },
    #[error("{requested} of memory requested but this server offers {available}")]
    Memory {
        requested: String,
        available: String,
    },
    #[error(
        "--tmp={requested}: this server's temporary disk (/tmp, its TmpDisk) holds {available}"
    )]
    TmpDisk {
        requested: String,
        available: String,
    },
    #[error("{0}")]
    AccountLimit(String),
    #[error("unknown node '{name}' (nodes: {known})")]
    UnknownNode { name: String, known: String },
    #[error("--nodelist={0} names several nodes, and a job runs on one")]
    NodeCount(String),
    #[error("no node can run it: {0}")]
    NoNode(String),
    #[error("--nodes={asked}: the pool has {size} node(s){which}")]
    PoolTooSmall {
        asked: String,
        size: usize,
        which: String,
    },
    #[error("--nodes={asked}: only {fit} node(s) can hold what it asks of each ({lacking})")]
    TooFewFit {
        asked: String,
        fit: usize,
        lacking: String,
    },
    #[error("user {user} may not use QoS '{qos}': it is for {who}. An admin can open it to you in the config's [[qos]] table (users, accounts)")]
    QosAccess {
        user: String,
        qos: String,
        who: String,
    },
    #[error(
        "a negative --nice ({0}) raises priority, which only root and the config's admins may do"
    )]
    NegativeNice(i64),
    #[error("time limit {requested} exceeds the maximum of {max} ({source_of_max})")]
    TimeLimit {
        requested: String,
        max: String,
        source_of_max: String,
    },
}

/// What a server can hand out, as the daemon measured or the config says.
#[derive(Clone, Debug)]
pub struct Capacity<'a> {
    pub name: &'a str,
    pub inventory: &'a Inventory,
    pub cpus: u32,
    pub mem_mb: u64,
    /// Its temporary filesystem, MiB (TmpDisk).
    pub tmp_mb: u64,
}

/// The choices the daemon fills in for an accepted job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admitted {
    pub account: String,
    pub qos: String,
    pub time_limit: Option<u64>,
    /// The memory limit: as asked, or the config's default per GPU.
    pub mem_mb: Option<u64>,
    /// The nodes whose temporary disk is smaller than `--tmp` asks: the
    /// job never runs there.
    pub short_of_disk: Vec<String>,
}

/// Admits a request: the account and QoS it may use, limits, and a node
/// of `nodes` (one it may run on) that can satisfy it.
pub fn admit(
    request: &JobRequest,
    uid: u32,
    user: &str,
    config: &Config,
    nodes: &[Capacity],
) -> Result<Admitted, AdmissionError> {
    if uid == 0 && !config.allow_root_jobs {
        return Err(AdmissionError::RootJob {
            config: config.path.display().to_string(),
        });
    }
    if request.nice < 0 && !config.is_admin(uid, user) {
        return Err(AdmissionError::NegativeNice(request.nice));
    }
    let account = account_of(request, user, config)?;
    let qos = qos_of(request, config)?;
    check_qos_access(config, &qos, &account, uid, user)?;
    let total_gpus = request.gpus.gpus_held() * request.tasks.nodes_min;
    if let Some(max) = config.qos_named(&qos).and_then(|q| q.max_gpus_per_user) {
        if total_gpus > max {
            return Err(AdmissionError::AccountLimit(format!(
                "QoS '{qos}' allows a user at most {max} GPUs at once (max_gpus_per_user); the job asks for {total_gpus}"
            )));
        }
    }
    let mem_mb = memory_of(request, config);
    check_nodes(request, mem_mb, nodes)?;
    let policy = super::limits::Policy::new(config);
    let time_limit = time_limit_of(request, config, &policy, &account, &qos)?;
    if let Some(why) = super::limits::refuse_at_submit(&policy, &account, total_gpus, time_limit) {
        return Err(AdmissionError::AccountLimit(why));
    }
    let short_of_disk = nodes
        .iter()
        .filter(|n| request.tmp_mb.is_some_and(|t| n.tmp_mb < t))
        .map(|n| n.name.to_string())
        .collect();
    Ok(Admitted {
        account,
        qos,
        time_limit,
        mem_mb,
        short_of_disk,
    })
}

/// The account: the one asked for, if the user may use it, else the
/// user's first.
fn account_of(request: &JobRequest, user: &str, config: &Config) -> Result<String, AdmissionError> {
    let allowed = config.accounts_for(user);
    let config_name = config.path.display().to_string();
    Ok(match &request.account {
        Some(a) if allowed.contains(&a.as_str()) => a.clone(),
        Some(a) => {
            return Err(AdmissionError::Account {
                user: user.to_string(),
                account: a.clone(),
                allowed: if allowed.is_empty() {
                    "none".to_string()
                } else {
                    allowed.join(", ")
                },
            })
        }
        None => match allowed.first() {
            Some(a) => a.to_string(),
            None => {
                return Err(AdmissionError::NoAccount {
                    user: user.to_string(),
                    config: config_name,
                })
            }
        },
    })
}

/// The QoS: the one asked for, if it exists, else the default.
fn qos_of(request: &JobRequest, config: &Config) -> Result<String, AdmissionError> {
    Ok(match &request.qos {
        Some(q) if config.qos_named(q).is_some() => q.clone(),
        Some(q) => {
            return Err(AdmissionError::Qos {
                qos: q.clone(),
                known: config.qos_names(", "),
            })
        }
        None => config.default_qos.clone(),
    })
}

/// The memory limit: as asked, or the config's default per GPU.
fn memory_of(request: &JobRequest, config: &Config) -> Option<u64> {
    request.mem_mb.or_else(|| {
        let gpus = u64::from(request.gpus.gpus_held());
        config
            .default_mem_per_gpu
            .filter(|_| gpus > 0)
            .map(|per_gpu| per_gpu * gpus)
    })
}

/// Whether a node the request may run on (`--nodelist`, `--exclude`)
/// can satisfy it: its GPUs, CPUs and memory. With one such node, what
/// it lacks; with several, what each lacks.
fn check_nodes(
    request: &JobRequest,
    mem_mb: Option<u64>,
    nodes: &[Capacity],
) -> Result<(), AdmissionError> {
    let known = || {
        let names: Vec<&str> = nodes.iter().map(|n| n.name).collect();
        if names.is_empty() {
            "none yet".to_string()
        } else {
            names.join(", ")
        }
    };
    for name in request.nodelist.iter().chain(&request.exclude) {
        if !nodes.iter().any(|n| n.name == name) {
            return Err(AdmissionError::UnknownNode {
                name: name.clone(),
                known: known(),
            });
        }
    }
    if request.nodelist.len() > 1 && !request.tasks.is_multi_node() {
        return Err(AdmissionError::NodeCount(request.nodelist.join(",")));
    }
    let allowed: Vec<&Capacity> = nodes
        .iter()
        .filter(|n| request.nodelist.is_empty() || request.nodelist.iter().any(|x| x == n.name))
        .filter(|n| !request.exclude.iter().any(|x| x == n.name))
        .collect();
    if request.tasks.is_multi_node() {
        return check_several_nodes(request, mem_mb, nodes, &allowed);
    }
    let mut lacking = Vec::new();
    for node in &allowed {
        match check_node(request, mem_mb, node) {
            Ok(()) => return Ok(()),
            Err(e) => lacking.push((node.name, e)),
        }
    }
    match lacking.len() {
        0 => Err(AdmissionError::NoNode(if nodes.is_empty() {
            "the pool has no nodes yet".to_string()
        } else {
            format!("--exclude leaves none of {}", known())
        })),
        1 => Err(lacking.remove(0).1),
        _ => Err(AdmissionError::NoNode(
            lacking
                .iter()
                .map(|(name, e)| format!("{name}: {e}"))
                .collect::<Vec<_>>()
                .join("; "),
        )),
    }
}

/// Whether at least `--nodes`' minimum of the `allowed` nodes can each
/// hold the request's share (GPUs, CPUs and memory are per node).
fn check_several_nodes(
    request: &JobRequest,
    mem_mb: Option<u64>,
    pool: &[Capacity],
    allowed: &[&Capacity],
) -> Result<(), AdmissionError> {
    let wanted = request.tasks.nodes_min as usize;
    let asked = request.tasks.nodes_text();
    if allowed.len() < wanted {
        let names: Vec<&str> = allowed.iter().map(|n| n.name).collect();
        let narrowed = allowed.len() < pool.len();
        return Err(AdmissionError::PoolTooSmall {
            asked,
            size: allowed.len(),
            which: match (names.is_empty(), narrowed) {
                (true, _) => String::new(),
                (false, false) => format!(" ({})", crate::model::hostlist::compress(&names)),
                (false, true) => format!(
                    " it may use ({} of {}, after --nodelist and --exclude)",
                    crate::model::hostlist::compress(&names),
                    pool.len()
                ),
            },
        });
    }
    let lacking: Vec<String> = allowed
        .iter()
        .filter_map(|n| {
            check_node(request, mem_mb, n)
                .err()
                .map(|e| format!("{}: {e}", n.name))
        })
        .collect();
    let fit = allowed.len() - lacking.len();
    if fit < wanted {
        return Err(AdmissionError::TooFewFit {
            asked,
            fit,
            lacking: lacking.join("; "),
        });
    }
    Ok(())
}

/// What one server lacks for the request, if anything.
fn check_node(
    request: &JobRequest,
    mem_mb: Option<u64>,
    node: &Capacity,
) -> Result<(), AdmissionError> {
    check_gpus(request, node.inventory)?;
    if request.cpus > node.cpus {
        return Err(AdmissionError::Cpus {
            requested: request.cpus,
            available: node.cpus,
        });
    }
    if let Some(mem) = mem_mb.filter(|&m| m > node.mem_mb) {
        return Err(AdmissionError::Memory {
            requested: units::format_memory_mb(mem),
            available: units::format_memory_mb(node.mem_mb),
        });
    }
    if let Some(tmp) = request.tmp_mb.filter(|&t| t > node.tmp_mb) {
        return Err(AdmissionError::TmpDisk {
            requested: units::format_memory_mb(tmp),
            available: units::format_memory_mb(node.tmp_mb),
        });
    }
    Ok(())
}

/// The time limit: as asked, or the default (no more than the account
/// allows); within the config's and the QoS's maximum.
fn time_limit_of(
    request: &JobRequest,
    config: &Config,
    policy: &super::limits::Policy,
    account: &str,
    qos: &str,
) -> Result<Option<u64>, AdmissionError> {
    let time_limit = match request.time_limit {
        Some(limit) => limit,
        None => {
            // The default, but no more than the account allows.
            let account_max = policy
                .chain(account)
                .iter()
                .filter_map(|a| a.limits.max_time)
                .min();
            let qos_level = config.qos_named(qos);
            let default = qos_level
                .and_then(|q| q.default_time.or(q.max_time))
                .or(config.default_time)
                .or(config.max_time);
            match (default, account_max) {
                (Some(d), Some(m)) => Some(d.min(m)),
                (d, m) => d.or(m),
            }
        }
    };
    let qos_max = config.qos_named(qos).and_then(|q| q.max_time);
    for (max, source_of_max) in [
        (config.max_time, "max_time in the config".to_string()),
        (qos_max, format!("max_time of QoS '{qos}'")),
    ] {
        let Some(max) = max else { continue };
        if time_limit.is_none_or(|t| t > max) {
            return Err(AdmissionError::TimeLimit {
                requested: units::format_time_limit(time_limit),
                max: units::format_duration(max),
                source_of_max,
            });
        }
    }
    Ok(time_limit)
}

/// Whether `user` may submit to `account` with `qos`: admins always may;
/// others as the QoS's `users`, `accounts` (the job's account or one above
/// it) and `coordinators` say.
pub fn check_qos_access(
    config: &Config,
    qos: &str,
    account: &str,
    uid: u32,
    user: &str,
) -> Result<(), AdmissionError> {
    let Some(access) = config.qos_named(qos).and_then(|q| q.allowed.as_ref()) else {
        return Ok(());
    };
    if config.is_admin(uid, user) {
        return Ok(());
    }
    let policy = super::limits::Policy::new(config);
    let chain = policy.chain(account);
    let coordinator = access.coordinators && super::approval::may_approve(&policy, account, user);
    if access.users.iter().any(|u| u == user)
        || chain.iter().any(|a| access.accounts.contains(&a.name))
        || coordinator
    {
        return Ok(());
    }
    let mut who = Vec::new();
    if !access.users.is_empty() {
        who.push(format!("users {}", access.users.join(", ")));
    }
    if !access.accounts.is_empty() {
        who.push(format!("accounts {}", access.accounts.join(", ")));
    }
    if access.coordinators {
        let names = super::approval::coordinators(&policy, account);
        who.push(if names.is_empty() {
            format!("coordinators of account {account} (it has none)")
        } else {
            format!("coordinators of account {account} ({})", names.join(", "))
        });
    }
    let admins = if config.admins.is_empty() {
        "root".to_string()
    } else {
        format!("root, {}", config.admins.join(", "))
    };
    who.push(format!("admins ({admins})"));
    Err(AdmissionError::QosAccess {
        user: user.to_string(),
        qos: qos.to_string(),
        who: who.join(", "),
    })
}

fn check_gpus(request: &JobRequest, inventory: &Inventory) -> Result<(), AdmissionError> {
    let wanted = &request.gpus;
    if wanted.count == 0 {
        return Ok(());
    }
    let counts = inventory.type_counts();
    let describe = || inventory.describe();
    match &wanted.gpu_type {
        Some(t) => {
            let Some((_, n)) = counts.iter().find(|(name, _)| name == t) else {
                return Err(AdmissionError::GpuType {
                    gpu_type: t.clone(),
                    available: describe(),
                });
            };
            if wanted.count > *n && !wanted.shard {
                return Err(AdmissionError::GpuCount {
                    requested: wanted.count,
                    of_type: format!(" of type {t}"),
                    available: *n,
                    inventory: describe(),
                });
            }
        }
        None if !wanted.shard => {
            // One job's GPUs are of one type, so the largest pool bounds it.
            let largest = counts.iter().map(|(_, n)| *n).max().unwrap_or(0);
            if wanted.count > largest {
                return Err(AdmissionError::GpuCount {
                    requested: wanted.count,
                    of_type: String::new(),
                    available: largest,
                    inventory: describe(),
                });
            }
        }
        None => {}
    }
    let matching = inventory.gpus.iter().filter(|g| wanted.accepts(g));
    if wanted.shard {
        let most = matching.map(|g| g.shards).max();
        let of_type = wanted
            .gpu_type
            .as_ref()
            .map(|t| format!(" of type {t}"))
            .unwrap_or_default();
        return match most {
            None => Err(AdmissionError::NoShards {
                request: wanted.to_string(),
                of_type,
                inventory: inventory.describe_details(),
            }),
            Some(most) if wanted.count > most => Err(AdmissionError::ShardCount {
                request: wanted.to_string(),
                available: most,
                inventory: inventory.describe_details(),
            }),
            Some(_) => Ok(()),
        };
    }
    if let Some(constraint) = &wanted.constraint {
        let mut per_type: Vec<(&str, u32)> = Vec::new();
        for g in matching {
            match per_type.iter_mut().find(|(t, _)| *t == g.gpu_type) {
                Some((_, n)) => *n += 1,
                None => per_type.push((&g.gpu_type, 1)),
            }
        }
        let largest = per_type.iter().map(|(_, n)| *n).max().unwrap_or(0);
        if wanted.count > largest {
            return Err(AdmissionError::Constraint {
                constraint: constraint.to_string(),
                requested: wanted.count,
                available: largest,
                inventory: inventory.describe_details(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::job::GpuRequest;
    use std::path::Path;

    fn config(extra: &str) -> Config {
        // `extra` comes first: top-level keys must precede the tables.
        let text = format!(
            "{extra}\n[[gpus]]\ntype = \"a100\"\ncount = 4\nmemory = \"80G\"\n[[gpus]]\ntype = \"t4\"\ncount = 2\nmemory = \"16G\"\n"
        );
        Config::parse(&text, Path::new("/etc/ysched/ysched.toml")).unwrap()
    }

    fn request() -> JobRequest {
        crate::model::job::example_request()
    }

    fn check(req: &JobRequest, cfg: &Config) -> Result<Admitted, AdmissionError> {
        let inv = Inventory::declared(cfg);
        admit(
            req,
            1000,
            "alice",
            cfg,
            &[Capacity {
                name: "gpu01",
                inventory: &inv,
                cpus: 8,
                mem_mb: 64 * 1024,
                tmp_mb: 100 << 10,
            }],
        )
    }

    #[test]
    fn defaults_are_filled_in() {
        let a = check(&request(), &config("default_time = \"1:00:00\"")).unwrap();
        assert_eq!(
            a,
            Admitted {
                account: "default".into(),
                qos: "medium".into(),
                time_limit: Some(3_600),
                mem_mb: None,
                short_of_disk: Vec::new(),
            }
        );
    }

    #[test]
    fn memory_defaults_to_the_configured_amount_per_gpu() {
        let cfg = config("default_mem_per_gpu = \"16G\"");
        let mut r = request();
        r.gpus.count = 2;
        assert_eq!(check(&r, &cfg).unwrap().mem_mb, Some(32 * 1024));
        r.mem_mb = Some(1024);
        assert_eq!(check(&r, &cfg).unwrap().mem_mb, Some(1024), "--mem wins");
        r.mem_mb = None;
        r.gpus.count = 0;
        assert_eq!(check(&r, &cfg).unwrap().mem_mb, None, "no GPUs, no default");
    }

    #[test]
    fn impossible_requests_are_refused_with_the_numbers() {
        let cfg = config("");
        let mut r = request();
        r.gpus = GpuRequest {
            count: 5,
            gpu_type: None,
            ..GpuRequest::default()
        };
        assert_eq!(
            check(&r, &cfg).unwrap_err().to_string(),
            "5 GPUs requested but this server has at most 4 (GPUs: a100 x4, t4 x2)"
        );
        r.gpus = GpuRequest {
            count: 3,
            gpu_type: Some("t4".into()),
            ..GpuRequest::default()
        };
        assert!(check(&r, &cfg)
            .unwrap_err()
            .to_string()
            .contains("3 GPUs requested of type t4 but this server has at most 2"));
        r.gpus.gpu_type = Some("v100".into());
        assert_eq!(
            check(&r, &cfg).unwrap_err().to_string(),
            "no GPU of type 'v100' on this server (it has: a100 x4, t4 x2)"
        );
        let mut r = request();
        r.cpus = 9;
        assert!(matches!(check(&r, &cfg), Err(AdmissionError::Cpus { .. })));
        let mut r = request();
        r.mem_mb = Some(100 * 1024);
        assert!(check(&r, &cfg)
            .unwrap_err()
            .to_string()
            .contains("100G of memory requested"));
    }

    #[test]
    fn accounts_and_qos_are_checked() {
        let cfg = config("[[accounts]]\nname = \"vision\"\nusers = [\"alice\"]\n[[accounts]]\nname = \"nlp\"\nusers = [\"bob\"]\n");
        assert_eq!(check(&request(), &cfg).unwrap().account, "vision");
        let mut r = request();
        r.account = Some("nlp".into());
        assert_eq!(
            check(&r, &cfg).unwrap_err().to_string(),
            "user alice may not use account 'nlp' (allowed: vision)"
        );
        let mut r = request();
        r.qos = Some("urgent".into());
        assert_eq!(
            check(&r, &cfg).unwrap_err().to_string(),
            "unknown QoS 'urgent' (known: critical, high, medium, low)"
        );
        let cfg = config("[[accounts]]\nname = \"nlp\"\nusers = [\"bob\"]\n");
        assert!(matches!(
            check(&request(), &cfg),
            Err(AdmissionError::NoAccount { .. })
        ));
    }

    #[test]
    fn root_and_time_limits() {
        let cfg = config("max_time = \"2:00:00\"");
        let inv = Inventory::declared(&cfg);
        let cap = [Capacity {
            name: "gpu01",
            inventory: &inv,
            cpus: 8,
            mem_mb: 1024,
            tmp_mb: 100 << 10,
        }];
        assert!(matches!(
            admit(&request(), 0, "root", &cfg, &cap),
            Err(AdmissionError::RootJob { .. })
        ));
        assert_eq!(
            check(&request(), &cfg).unwrap().time_limit,
            Some(7_200),
            "max_time is the default"
        );
        let mut r = request();
        r.time_limit = Some(Some(3 * 3_600));
        assert_eq!(
            check(&r, &cfg).unwrap_err().to_string(),
            "time limit 3:00:00 exceeds the maximum of 2:00:00 (max_time in the config)"
        );
        r.time_limit = Some(None);
        assert!(check(&r, &cfg).is_err(), "UNLIMITED exceeds any max_time");

        // critical is for coordinators and admins; others are told who.
        let cfg = config(
            "admins = [\"ops\"]\n[[accounts]]\nname = \"vision\"\nusers = [\"*\"]\ncoordinators = [\"alice\"]\n",
        );
        let mut r = request();
        r.qos = Some("critical".into());
        let cap = [Capacity {
            name: "gpu01",
            inventory: &inv,
            cpus: 8,
            mem_mb: 1 << 20,
            tmp_mb: 100 << 10,
        }];
        assert_eq!(
            admit(&r, 1001, "carol", &cfg, &cap).unwrap_err().to_string(),
            "user carol may not use QoS 'critical': it is for coordinators of account vision (alice), \
             admins (root, ops). An admin can open it to you in the config's [[qos]] table (users, accounts)"
        );
        assert!(
            admit(&r, 1000, "alice", &cfg, &cap).is_ok(),
            "a coordinator"
        );
        assert!(admit(&r, 1002, "ops", &cfg, &cap).is_ok(), "an admin");
        r.qos = Some("high".into());
        assert!(admit(&r, 1001, "carol", &cfg, &cap).is_ok(), "high is open");

        // A QoS's own default and maximum.
        let cfg = config(
            "default_time = \"1:00:00\"\n\
             [[qos]]\nname = \"medium\"\npriority = 10\n\
             [[qos]]\nname = \"debug\"\npriority = 20\ndefault_time = \"10:00\"\nmax_time = \"30:00\"\n",
        );
        let mut r = request();
        r.qos = Some("debug".into());
        assert_eq!(check(&r, &cfg).unwrap().time_limit, Some(600));
        r.qos = Some("medium".into());
        assert_eq!(check(&r, &cfg).unwrap().time_limit, Some(3_600));
        r.qos = Some("debug".into());
        r.time_limit = Some(Some(3_600));
        assert_eq!(
            check(&r, &cfg).unwrap_err().to_string(),
            "time limit 1:00:00 exceeds the maximum of 30:00 (max_time of QoS 'debug')"
        );
    }

    #[test]
    fn tmp_is_held_against_each_nodes_disk_and_the_nodes_short_of_it_are_left_out() {
        let cfg = config("");
        let inventory = Inventory::declared(&cfg);
        let node = |name, tmp_mb| Capacity {
            name,
            inventory: &inventory,
            cpus: 64,
            mem_mb: 1 << 20,
            tmp_mb,
        };
        let nodes = [node("gpu01", 10 << 10), node("gpu02", 100 << 10)];
        let mut r = request();
        r.tmp_mb = Some(50 << 10);
        let admitted = admit(&r, 1000, "alice", &cfg, &nodes).unwrap();
        assert_eq!(admitted.short_of_disk, ["gpu01"]);
        r.tmp_mb = Some(0);
        assert!(admit(&r, 1000, "alice", &cfg, &nodes)
            .unwrap()
            .short_of_disk
            .is_empty());
        r.tmp_mb = Some(200 << 10);
        r.nodelist = vec!["gpu02".into()];
        assert_eq!(
            admit(&r, 1000, "alice", &cfg, &nodes)
                .unwrap_err()
                .to_string(),
            "--tmp=200G: this server's temporary disk (/tmp, its TmpDisk) holds 100G"
        );
    }

    #[test]
    fn a_pool_admits_what_one_node_it_may_use_can_run() {
        let cfg = config("");
        let big = Inventory::declared(&cfg);
        let small = Inventory {
            gpus: big.gpus[..1].to_vec(),
            source: big.source,
        };
        let nodes = [
            Capacity {
                name: "gpu01",
                inventory: &small,
                cpus: 4,
                mem_mb: 1024,
                tmp_mb: 100 << 10,
            },
            Capacity {
                name: "gpu02",
                inventory: &big,
                cpus: 64,
                mem_mb: 1 << 20,
                tmp_mb: 100 << 10,
            },
        ];
        let mut r = request();
        r.gpus.count = 3;
        assert!(admit(&r, 1000, "alice", &cfg, &nodes).is_ok(), "on gpu02");
        r.nodelist = vec!["gpu01".into()];
        assert_eq!(
            admit(&r, 1000, "alice", &cfg, &nodes)
                .unwrap_err()
                .to_string(),
            "3 GPUs requested but this server has at most 1 (GPUs: a100 x1)"
        );
        r.nodelist = vec!["gpu09".into()];
        assert_eq!(
            admit(&r, 1000, "alice", &cfg, &nodes)
                .unwrap_err()
                .to_string(),
            "unknown node 'gpu09' (nodes: gpu01, gpu02)"
        );
        r.nodelist.clear();
        r.exclude = vec!["gpu02".into()];
        assert!(admit(&r, 1000, "alice", &cfg, &nodes).is_err());
        r.exclude.clear();
        r.gpus.count = 9;
        let e = admit(&r, 1000, "alice", &cfg, &nodes)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("no node can run it: gpu01: 9 GPUs"), "{e}");
        assert!(admit(&r, 1000, "alice", &cfg, &[]).is_err(), "no nodes");
    }
}
