//! Administering the nodes: drain one (it runs what it runs, takes
//! nothing new) or put it back in service, and the same for single GPUs.
//! A drain is recorded, so it outlives a restart, and audited. Handlers
//! over the core (`on_drain_node`, `on_drain_gpus`, `on_add_node`, a
//! node expected with its one-time join token, and `on_remove_node`);
//! the drains read back at a start here too.

use crate::db;
use crate::proto::Reply;
use crate::report::node::Drain;

use super::access::admins_only;
use super::effects::{Effects, Out, PoolRow, Row};
use super::error::DaemonError;
use super::reads::Reads;
use super::requester::Requester;
use super::state::{Core, Daemon};

/// The refusal of a command that names a node the pool lacks.
pub(super) fn unknown_node(reads: &dyn Reads, name: &str) -> Reply {
    Reply::Rejected {
        error: format!(
            "unknown node '{name}' (nodes: {})",
            reads.node_names().join(", ")
        ),
    }
}

/// Drains node `name` (`reason` given) or resumes it (admins).
pub(super) fn on_drain_node(
    core: &mut Core,
    reads: &dyn Reads,
    (name, reason): (&str, Option<String>),
    (who, now): (&Requester, i64),
    fx: &mut Effects,
) -> Result<Reply, DaemonError> {
    let verb = if reason.is_some() { "drain" } else { "resume" };
    if let Some(refused) = admins_only(who, &format!("{verb} nodes")) {
        return Ok(refused);
    }
    if reads.node_name(Some(name)).is_none() {
        return Ok(unknown_node(reads, name));
    }
    let drain = reason.map(|reason| Drain {
        reason,
        by: who.user.to_string(),
        since: now,
    });
    let was = reads.node_drained(name)?;
    fx.row(Row::Pool(PoolRow::NodeDrain {
        name: name.to_string(),
        drain: drain.clone(),
        time: now,
    }));
    let audit = (now, who.channel);
    let message = match &drain {
        Some(d) => {
            let running = core
                .jobs
                .all()
                .filter(|j| j.state.holds_gpus() && j.node.as_deref() == Some(name))
                .count();
            let detail = format!("{name}: {}", d.reason);
            fx.audit(audit, who.user, "drain-node", None, &detail);
            if running == 0 {
                format!("node {name} drained: {}", d.reason)
            } else {
                format!(
                    "node {name} draining: {}; {running} job(s) run on there until they end",
                    d.reason
                )
            }
        }
        None if was => {
            fx.audit(audit, who.user, "resume-node", None, name);
            format!("node {name} back in service")
        }
        None => format!("node {name} was not drained"),
    };
    tracing::info!(target: "ysched::daemon", "{message} (by {})", who.user);
    fx.queue_changed();
    Ok(Reply::Control {
        outcomes: Vec::new(),
        message: Some(message),
    })
}

/// `yscontrol node add NAME` (admins): a one-time token for it, and the
/// line to run on that server.
pub(super) fn on_add_node(
    core: &Core,
    reads: &dyn Reads,
    name: &str,
    (who, now): (&Requester, i64),
    fx: &mut Effects,
) -> Result<Reply, DaemonError> {
    let rejected = |error: String| Ok(Reply::Rejected { error });
    if let Some(refused) = admins_only(who, "add nodes") {
        return Ok(refused);
    }
    let Some((advertise, fingerprint)) = reads.pool_join() else {
        return rejected(format!(
            "the pool is off: set [pool] listen = \"HOST:PORT\" in {} and restart ysctld",
            core.config.path.display()
        ));
    };
    if let Err(e) = crate::validate::node_name(name) {
        return rejected(e.to_string());
    }
    if name == core.config.node_name {
        return rejected(format!("{name} is the controller's own name (node_name)"));
    }
    let record = reads.node_record(name)?;
    if record
        .as_ref()
        .is_some_and(|r| r.certificate.is_some() && r.removed.is_none())
    {
        return rejected(format!(
            "node {name} is in the pool already; to join it anew, yscontrol node remove {name} first"
        ));
    }
    let token = crate::net::pki::new_token()?;
    let lifetime = core.config.pool.token_lifetime_secs;
    fx.row(Row::Pool(PoolRow::Expected {
        name: name.to_string(),
        token_hash: crate::net::pki::hash_token(&token),
        expires: now + lifetime as i64,
        by: who.user.to_string(),
        time: now,
    }));
    let detail = format!("node {name} may join for {lifetime} s");
    fx.audit((now, who.channel), who.user, "add-node", None, &detail);
    Ok(Reply::Control {
        outcomes: Vec::new(),
        message: Some(format!(
            "ysnoded --join {advertise} --token {token} --authority {fingerprint}"
        )),
    })
}

/// `yscontrol node remove NAME` (admins): the node leaves the pool and
/// its certificate is no longer accepted. Refused while jobs run there.
/// Its link is cut, and it is told why, once the removal is committed.
pub(super) fn on_remove_node(
    core: &Core,
    reads: &dyn Reads,
    name: &str,
    (who, now): (&Requester, i64),
    fx: &mut Effects,
) -> Result<Reply, DaemonError> {
    let rejected = |error: String| Ok(Reply::Rejected { error });
    if let Some(refused) = admins_only(who, "remove nodes") {
        return Ok(refused);
    }
    let record = reads.node_record(name)?;
    if record.is_none_or(|r| r.removed.is_some()) || reads.pool_join().is_none() {
        return rejected(format!("no node {name} is in the pool"));
    }
    let running: Vec<String> = core
        .jobs
        .all()
        .filter(|j| j.state.holds_gpus() && j.runs_on(name))
        .map(|j| j.display_id())
        .collect();
    if !running.is_empty() {
        return rejected(format!(
            "jobs run on node {name} ({}): drain it (yscontrol node drain {name} --reason ...) and let them end, or cancel them, first",
            running.join(", ")
        ));
    }
    fx.row(Row::Pool(PoolRow::Removed {
        name: name.to_string(),
        time: now,
    }));
    fx.audit((now, who.channel), who.user, "remove-node", None, name);
    fx.out(Out::Removed {
        name: name.to_string(),
    });
    fx.queue_changed();
    Ok(Reply::Control {
        outcomes: Vec::new(),
        message: Some(format!(
            "node {name} removed from the pool; its certificate is no longer accepted"
        )),
    })
}

/// Drains GPUs `gpus` of `node` (the controller's own server when
/// `None`) or, without a `reason`, puts them back in service (admins).
pub(super) fn on_drain_gpus(
    core: &mut Core,
    reads: &dyn Reads,
    (node, gpus, reason): (Option<String>, &[u32], Option<String>),
    (who, now): (&Requester, i64),
    fx: &mut Effects,
) -> Result<Reply, DaemonError> {
    let verb = if reason.is_some() { "drain" } else { "resume" };
    if let Some(refused) = admins_only(who, &format!("{verb} GPUs")) {
        return Ok(refused);
    }
    let node = match gpus_named(reads, node, gpus, verb) {
        Ok(node) => node,
        Err(refused) => return Ok(refused),
    };
    let mut lines = Vec::new();
    for &gpu in gpus {
        let key = (node.clone(), gpu);
        let line = match &reason {
            Some(reason) => drain_gpu(core, reads, (key, reason), (who, now), fx),
            None => resume_gpu(core, reads, key, (who, now), fx),
        };
        lines.push(line);
    }
    fx.queue_changed();
    Ok(Reply::Control {
        outcomes: Vec::new(),
        message: Some(lines.join("\n")),
    })
}

/// The node whose GPUs a drain names, once they are known to exist; else
/// the refusal.
fn gpus_named(
    reads: &dyn Reads,
    node: Option<String>,
    gpus: &[u32],
    verb: &str,
) -> Result<String, Reply> {
    let refuse = |error: String| Reply::Rejected { error };
    let Some(node) = node.or_else(|| reads.node_name(None)) else {
        return Err(refuse(format!(
            "this controller has no GPUs of its own: name the node, as NODE:GPU (yscontrol {verb} gpu02:1)"
        )));
    };
    if reads.node_name(Some(&node)).is_none() {
        return Err(refuse(format!(
            "no node {node} is in the pool (ysinfo -N lists them)"
        )));
    }
    let count = reads.node_gpus(Some(&node)).len() as u32;
    let server = if is_only_server(reads, &node) {
        "this server".to_string()
    } else {
        node.clone()
    };
    if let Some(bad) = gpus.iter().find(|&&g| g >= count) {
        return Err(refuse(match count {
            0 => format!("GPU {bad} does not exist: {server} has no GPUs"),
            _ => format!(
                "GPU {bad} does not exist: {server} has GPUs 0 to {}",
                count - 1
            ),
        }));
    }
    if gpus.is_empty() {
        return Err(refuse(format!("name the GPUs to {verb}")));
    }
    Ok(node)
}

/// Takes one GPU out of service; a job on it runs to its end.
fn drain_gpu(
    core: &mut Core,
    reads: &dyn Reads,
    (key, reason): (db::DrainKey, &str),
    (who, now): (&Requester, i64),
    fx: &mut Effects,
) -> String {
    let (node, gpu) = key.clone();
    let holders: Vec<String> = core
        .jobs
        .all()
        .filter(|j| j.state.holds_gpus())
        .filter(|j| {
            j.share_on(&node)
                .is_some_and(|share| share.gpus_alloc.contains(&gpu))
        })
        .map(|j| j.display_id())
        .collect();
    let drain = Drain {
        reason: reason.to_string(),
        by: who.user.to_string(),
        since: now,
    };
    fx.row(Row::Pool(PoolRow::GpuDrain {
        key: key.clone(),
        drain: Some(drain.clone()),
    }));
    core.policy.drains.insert(key, drain);
    let of = gpu_of(reads, &node, gpu);
    let detail = format!("{of}: {reason}");
    fx.audit((now, who.channel), who.user, "drain", None, &detail);
    if holders.is_empty() {
        format!("{of} drained: {reason}")
    } else {
        format!(
            "{of} draining: {reason}; job {} runs on there until it ends",
            holders.join(", ")
        )
    }
}

/// Puts one GPU back in service.
fn resume_gpu(
    core: &mut Core,
    reads: &dyn Reads,
    key: db::DrainKey,
    (who, now): (&Requester, i64),
    fx: &mut Effects,
) -> String {
    let of = gpu_of(reads, &key.0, key.1);
    if core.policy.drains.remove(&key).is_none() {
        return format!("{of} was not drained");
    }
    fx.row(Row::Pool(PoolRow::GpuDrain { key, drain: None }));
    fx.audit((now, who.channel), who.user, "resume-gpu", None, &of);
    format!("{of} back in service")
}

/// How a GPU is named to people: `GPU 2` on a single server, `GPU 2 of
/// gpu02` in a pool.
fn gpu_of(reads: &dyn Reads, node: &str, gpu: u32) -> String {
    if is_only_server(reads, node) {
        format!("GPU {gpu}")
    } else {
        format!("GPU {gpu} of {node}")
    }
}

/// Whether `node` is the controller's own server and there is no other.
fn is_only_server(reads: &dyn Reads, node: &str) -> bool {
    reads.single_server() && reads.node_name(None).as_deref() == Some(node)
}

impl Daemon {
    /// At start: the drains recorded for the nodes there are.
    /// The drained GPUs as recorded; those recorded before the pool
    /// (node '') are the controller's own server's.
    pub(super) fn load_gpu_drains(&mut self) -> Result<(), DaemonError> {
        let local = self.core.config.node_name.clone();
        self.core.policy.drains = db::drains(&self.store.db)?
            .into_iter()
            .map(|((node, gpu), d)| {
                let node = if node.is_empty() { local.clone() } else { node };
                ((node, gpu), d)
            })
            .collect();
        Ok(())
    }

    /// The drained GPUs of the nodes in the pool now, in pool numbers
    /// (what the scheduling pass and the metrics count).
    pub(super) fn drained_pool_gpus(&self) -> Vec<u32> {
        let layout = self.nodes.layout();
        self.core
            .policy
            .drains
            .keys()
            .filter_map(|(node, gpu)| {
                let room = &layout.nodes[layout.slot(node)?];
                (*gpu < room.gpu_count).then_some(room.first_gpu + gpu)
            })
            .collect()
    }

    pub(super) fn load_node_drains(&mut self) -> Result<(), DaemonError> {
        // As recorded, and only so: a drain whose commit failed is none.
        let names: Vec<String> = self.nodes.iter().map(|n| n.name().to_string()).collect();
        for name in names {
            self.nodes.change(&name, |node| node.drain = None);
        }
        for (name, drain) in db::node_drains(&self.store.db)? {
            tracing::warn!(
                target: "ysched::daemon",
                "node {name} is drained since {} by {}: {}",
                crate::model::units::format_timestamp(drain.since),
                drain.by,
                drain.reason
            );
            self.nodes.change(&name, |node| node.drain = Some(drain));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{core_with, requester, Archive};
    use super::*;
    use crate::model::job::JobState;

    fn message(reply: Reply) -> String {
        match reply {
            Reply::Control {
                message: Some(m), ..
            } => m,
            Reply::Rejected { error } => format!("refused: {error}"),
            other => panic!("{other:?}"),
        }
    }

    fn audited(fx: &Effects) -> Vec<&str> {
        fx.rows()
            .iter()
            .filter_map(|r| match r {
                Row::Audit { action, .. } => Some(action.as_str()),
                _ => None,
            })
            .collect()
    }

    /// Job 1, alice's, running on gpu01's GPUs 0 and 1.
    fn core() -> Core {
        let mut job = crate::model::job::example_job(1);
        job.state = JobState::Running;
        job.node = Some("gpu01".into());
        job.gpus_alloc = vec![0, 1];
        core_with(vec![job])
    }

    #[test]
    fn only_administrators_drain_and_a_node_the_pool_lacks_is_named() {
        let (mut core, reads, mut fx) = (core(), Archive::default(), Effects::default());
        let alice = requester(1000, "alice", false);
        let why = Some("fans".to_string());
        let refused = on_drain_node(
            &mut core,
            &reads,
            ("gpu01", why.clone()),
            (&alice, 10),
            &mut fx,
        );
        assert_eq!(
            message(refused.unwrap()),
            "refused: permission denied: only root and the config's admins may drain nodes"
        );
        let root = requester(0, "root", true);
        let unknown = on_drain_node(&mut core, &reads, ("gpu07", why), (&root, 10), &mut fx);
        assert_eq!(
            message(unknown.unwrap()),
            "refused: unknown node 'gpu07' (nodes: gpu01)"
        );
        assert!(fx.rows().is_empty());
    }

    #[test]
    fn a_node_drains_with_its_jobs_running_on_and_comes_back_in_service() {
        let (mut core, mut reads, mut fx) = (core(), Archive::default(), Effects::default());
        let root = requester(0, "root", true);
        let why = Some("fans".to_string());
        let drained = on_drain_node(&mut core, &reads, ("gpu01", why), (&root, 10), &mut fx);
        assert_eq!(
            message(drained.unwrap()),
            "node gpu01 draining: fans; 1 job(s) run on there until they end"
        );
        assert!(fx.rows().iter().any(|r| matches!(
            r,
            Row::Pool(PoolRow::NodeDrain { name, drain: Some(d), .. }) if name == "gpu01" && d.by == "root"
        )));
        assert!(fx.reschedule);
        let resumed = on_drain_node(&mut core, &reads, ("gpu01", None), (&root, 20), &mut fx);
        assert_eq!(message(resumed.unwrap()), "node gpu01 was not drained");
        reads.drained.insert("gpu01".into());
        let resumed = on_drain_node(&mut core, &reads, ("gpu01", None), (&root, 30), &mut fx);
        assert_eq!(message(resumed.unwrap()), "node gpu01 back in service");
        assert_eq!(audited(&fx), ["drain-node", "resume-node"]);
    }

    #[test]
    fn a_node_is_expected_with_a_one_time_token_only_once_and_never_under_the_controllers_name() {
        let (core, mut reads, mut fx) = (core(), Archive::default(), Effects::default());
        let root = requester(0, "root", true);
        let reply = on_add_node(&core, &reads, "gpu02", (&root, 100), &mut fx).unwrap();
        let line = message(reply);
        let token = line
            .split_whitespace()
            .skip_while(|w| *w != "--token")
            .nth(1)
            .unwrap()
            .to_string();
        assert!(
            line.starts_with("ysnoded --join ctl:6820 --token ")
                && line.ends_with(" --authority SHA256:00"),
            "{line}"
        );
        assert!(fx.rows().iter().any(|r| matches!(
            r,
            Row::Pool(PoolRow::Expected { name, token_hash, by, .. })
                if name == "gpu02" && *token_hash == crate::net::pki::hash_token(&token) && by == "root"
        )));
        assert_eq!(audited(&fx), ["add-node"]);
        let own = on_add_node(&core, &reads, "gpu01", (&root, 100), &mut fx).unwrap();
        assert_eq!(
            message(own),
            "refused: gpu01 is the controller's own name (node_name)"
        );
        reads.node_records.insert(
            "gpu03".into(),
            crate::db::NodeRecord {
                name: "gpu03".into(),
                added: 0,
                added_by: "root".into(),
                token_hash: None,
                token_expires: None,
                certificate: Some("01".into()),
                previous_certificate: None,
                facts: None,
                removed: None,
            },
        );
        let again = on_add_node(&core, &reads, "gpu03", (&root, 100), &mut fx).unwrap();
        assert!(message(again).contains("node gpu03 is in the pool already"));
        let alice = requester(1000, "alice", false);
        let refused = on_add_node(&core, &reads, "gpu04", (&alice, 100), &mut fx).unwrap();
        assert!(message(refused).contains("only root and the config's admins may add nodes"));
    }

    fn record(name: &str, removed: Option<i64>) -> crate::db::NodeRecord {
        crate::db::NodeRecord {
            name: name.into(),
            added: 0,
            added_by: "root".into(),
            token_hash: None,
            token_expires: None,
            certificate: Some("01".into()),
            previous_certificate: None,
            facts: None,
            removed,
        }
    }

    #[test]
    fn a_node_is_removed_only_by_an_administrator_once_no_job_runs_there_and_cut_off_after_the_commit(
    ) {
        let (mut core, mut reads, mut fx) = (core(), Archive::default(), Effects::default());
        reads
            .node_records
            .insert("gpu01".into(), record("gpu01", None));
        reads
            .node_records
            .insert("gpu02".into(), record("gpu02", Some(50)));
        let alice = requester(1000, "alice", false);
        let refused = on_remove_node(&core, &reads, "gpu01", (&alice, 100), &mut fx).unwrap();
        assert!(message(refused).contains("only root and the config's admins may remove nodes"));
        let root = requester(0, "root", true);
        let busy = on_remove_node(&core, &reads, "gpu01", (&root, 100), &mut fx).unwrap();
        assert_eq!(
            message(busy),
            "refused: jobs run on node gpu01 (1): drain it (yscontrol node drain gpu01 --reason ...) and let them end, or cancel them, first"
        );
        for gone in ["gpu02", "gpu09"] {
            let reply = on_remove_node(&core, &reads, gone, (&root, 100), &mut fx).unwrap();
            assert_eq!(
                message(reply),
                format!("refused: no node {gone} is in the pool")
            );
        }
        assert!(fx.rows().is_empty() && fx.out.is_empty());
        core.jobs.job_mut(&1).unwrap().state = JobState::Completed;
        let removed = on_remove_node(&core, &reads, "gpu01", (&root, 100), &mut fx).unwrap();
        assert_eq!(
            message(removed),
            "node gpu01 removed from the pool; its certificate is no longer accepted"
        );
        assert!(matches!(
            fx.rows(),
            [Row::Pool(PoolRow::Removed { name, time: 100 }), Row::Audit { .. }] if name == "gpu01"
        ));
        assert!(matches!(&fx.out[..], [Out::Removed { name }] if name == "gpu01"));
        assert!(fx.reschedule);
    }

    #[test]
    fn a_gpu_drains_with_its_job_running_on_and_only_gpus_that_exist() {
        let (mut core, reads, mut fx) = (core(), Archive::default(), Effects::default());
        let root = requester(0, "root", true);
        let why = Some("ECC errors".to_string());
        let missing = on_drain_gpus(
            &mut core,
            &reads,
            (None, &[5], why.clone()),
            (&root, 10),
            &mut fx,
        );
        assert_eq!(
            message(missing.unwrap()),
            "refused: GPU 5 does not exist: this server has GPUs 0 to 3"
        );
        let drained = on_drain_gpus(
            &mut core,
            &reads,
            (None, &[1, 3], why),
            (&root, 10),
            &mut fx,
        );
        assert_eq!(
            message(drained.unwrap()),
            "GPU 1 draining: ECC errors; job 1 runs on there until it ends\nGPU 3 drained: ECC errors"
        );
        assert!(core.policy.drains.contains_key(&("gpu01".to_string(), 1)));
        let resumed = on_drain_gpus(&mut core, &reads, (None, &[1], None), (&root, 20), &mut fx);
        assert_eq!(message(resumed.unwrap()), "GPU 1 back in service");
        let again = on_drain_gpus(&mut core, &reads, (None, &[1], None), (&root, 30), &mut fx);
        assert_eq!(message(again.unwrap()), "GPU 1 was not drained");
        assert!(!core.policy.drains.contains_key(&("gpu01".to_string(), 1)));
        assert_eq!(audited(&fx), ["drain", "drain", "resume-gpu"]);
    }
}
