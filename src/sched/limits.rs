//! Account limits: what an account, with everything below it, and each of
//! its users may hold at once. A job over a limit waits with the limit's
//! reason and does not hold up the jobs behind it. Limits hold up the tree:
//! a job of `vision` counts against `vision` and against `research` above
//! it, as Slurm's Grp limits do.

use super::window;
use std::collections::HashMap;

use super::reason::Reason;
use crate::config::{Account, Config};
use crate::model::gpu::Gpu;
use crate::model::job::Job;

/// The accounts' limits, looked up by name.
pub struct Policy<'a> {
    /// How many blocked jobs get a reservation in a pass.
    pub backfill_depth: usize,
    /// A job preempted this often no longer borrows: it waits for its
    /// own account's GPUs.
    pub max_preemptions: u32,
    accounts: HashMap<&'a str, &'a Account>,
    /// Whether any account has a limit the scheduler checks (decided once:
    /// a pass asks for every pending job).
    limited: bool,
    /// Whether any account may borrow beyond its guarantee.
    elastic: bool,
    /// QoS levels that keep GPUs for their own jobs.
    reserves: Vec<(&'a str, crate::config::Reserve)>,
    /// GPUs one user's running jobs of a QoS may hold at once.
    qos_gpus_per_user: HashMap<&'a str, u32>,
    /// For a QoS that lends its reserve: the QoS that may borrow it (those
    /// it may preempt, and that are preemptible).
    borrowers: HashMap<&'a str, Vec<&'a str>>,
    /// The time limits with windows are judged at, and the zone of those
    /// windows; without a time, the base limits hold.
    now: Option<i64>,
    timezone: &'a jiff::tz::TimeZone,
}

impl<'a> Policy<'a> {
    pub fn new(config: &'a Config) -> Policy<'a> {
        let limited = config.accounts.iter().any(|a| {
            let l = &a.limits;
            l.max_gpus.is_some()
                || !l.max_gpus_windows.is_empty()
                || !l.max_gpus_by_type.is_empty()
                || l.max_running_jobs.is_some()
                || l.max_gpus_per_user.is_some()
                || l.max_running_jobs_per_user.is_some()
        }) || config.qos.iter().any(|q| q.max_gpus_per_user.is_some());
        Policy {
            backfill_depth: config.backfill_depth,
            max_preemptions: config.max_preemptions,
            accounts: config
                .accounts
                .iter()
                .map(|a| (a.name.as_str(), a))
                .collect(),
            limited,
            elastic: config
                .accounts
                .iter()
                .any(|a| a.limits.borrow_limit.is_some()),
            reserves: config
                .qos
                .iter()
                .filter_map(|q| Some((q.name.as_str(), q.reserve?)))
                .collect(),
            qos_gpus_per_user: config
                .qos
                .iter()
                .filter_map(|q| Some((q.name.as_str(), q.max_gpus_per_user?)))
                .collect(),
            borrowers: config
                .qos
                .iter()
                .filter(|q| q.reserve.is_some() && q.lend_reserve)
                .map(|q| {
                    let borrowers = q
                        .preempt
                        .iter()
                        .filter(|p| {
                            config.qos_named(p).is_some_and(|v| {
                                v.preemptible
                                    && v.preempt_mode != crate::config::PreemptMode::Suspend
                            })
                        })
                        .map(String::as_str)
                        .collect();
                    (q.name.as_str(), borrowers)
                })
                .collect(),
            now: None,
            timezone: config.timezone(),
        }
    }

    /// The policy as it holds at `now`: limits with time windows take the
    /// value of the window that holds then.
    pub fn at(config: &'a Config, now: i64) -> Policy<'a> {
        Policy {
            now: Some(now),
            ..Policy::new(config)
        }
    }

    /// An account's max_gpus in force now.
    pub fn max_gpus(&self, account: &Account) -> Option<u32> {
        let l = &account.limits;
        match self.now {
            Some(now) => window::max_gpus_at(&l.max_gpus_windows, l.max_gpus, now, self.timezone),
            None => l.max_gpus,
        }
    }

    /// Whether some account may borrow beyond its guarantee: only then is
    /// there borrowing to plan or reclaim.
    pub fn is_elastic(&self) -> bool {
        self.elastic
    }

    /// The accounts with a guarantee (`max_gpus`), whose idle part others
    /// may borrow.
    pub fn guaranteed(&self) -> impl Iterator<Item = &'a Account> + '_ {
        self.accounts
            .values()
            .copied()
            .filter(|a| a.limits.max_gpus.is_some())
    }

    /// When a limit window next opens or closes, if any account has one.
    pub fn next_change(&self) -> Option<i64> {
        let now = self.now?;
        self.accounts
            .values()
            .filter(|a| !a.limits.max_gpus_windows.is_empty())
            .filter_map(|a| window::next_change(&a.limits.max_gpus_windows, now, self.timezone))
            .min()
    }

    /// The GPUs each reserving QoS keeps on a server of `total` GPUs.
    pub fn reserves(&self, total: u32) -> Vec<(&'a str, u32)> {
        self.reserves
            .iter()
            .map(|(q, r)| (*q, r.gpus(total)))
            .filter(|(_, n)| *n > 0)
            .collect()
    }

    /// Whether jobs of `qos` may use the reserve of `reserving`, to be
    /// preempted when it needs it.
    pub fn may_borrow(&self, reserving: &str, qos: &str) -> bool {
        self.borrowers
            .get(reserving)
            .is_some_and(|b| b.contains(&qos))
    }

    /// The account and its ancestors, nearest first.
    pub fn chain(&self, account: &str) -> Vec<&'a Account> {
        let mut out = Vec::new();
        let mut at = self.accounts.get(account).copied();
        while let Some(a) = at {
            if out.iter().any(|x: &&Account| x.name == a.name) {
                break; // the config refuses cycles; never loop on one anyway
            }
            out.push(a);
            at = a
                .parent
                .as_deref()
                .and_then(|p| self.accounts.get(p).copied());
        }
        out
    }

    fn is_empty(&self) -> bool {
        !self.limited
    }
}

#[derive(Clone, Debug, Default)]
struct Held {
    gpus: u32,
    by_type: HashMap<String, u32>,
    jobs: u32,
}

/// What the running jobs (and those started in this pass) hold, by account
/// and by (account, user).
#[derive(Clone, Debug, Default)]
pub struct State {
    accounts: HashMap<String, Held>,
    users: HashMap<(String, String), Held>,
    /// GPUs held by (QoS, user).
    qos_users: HashMap<(String, String), u32>,
}

impl State {
    /// The GPUs an account's running jobs (and those below it) hold.
    pub fn gpus_of(&self, account: &str) -> u32 {
        self.accounts.get(account).map_or(0, |h| h.gpus)
    }

    /// Counts a job that runs on `gpus` (indices into `inventory`).
    pub fn add(&mut self, policy: &Policy, job: &Job, gpus: &[u32], inventory: &[Gpu]) {
        if policy.is_empty() {
            return;
        }
        let count = |held: &mut Held| {
            held.gpus += gpus.len() as u32;
            held.jobs += 1;
            for &g in gpus {
                if let Some(gpu) = inventory.get(g as usize) {
                    *held.by_type.entry(gpu.gpu_type.clone()).or_default() += 1;
                }
            }
        };
        for account in policy.chain(&job.account) {
            count(self.accounts.entry(account.name.clone()).or_default());
        }
        count(
            self.users
                .entry((job.account.clone(), job.user.clone()))
                .or_default(),
        );
        *self
            .qos_users
            .entry((job.qos.clone(), job.user.clone()))
            .or_default() += gpus.len() as u32;
    }

    /// The reason `job` may not start now, if a limit says so: on the
    /// GPUs `placed` (indices into `inventory`), or before placement on
    /// what it asks for (its count, and its type if it names one).
    pub fn check(
        &self,
        policy: &Policy,
        job: &Job,
        placed: Option<&[u32]>,
        inventory: &[Gpu],
    ) -> Option<Reason> {
        if policy.is_empty() {
            return None;
        }
        let empty = Held::default();
        let chain = policy.chain(&job.account);
        let mut wanted_by_type: HashMap<&str, u32> = HashMap::new();
        let wanted = match placed {
            Some(gpus) => {
                for &g in gpus {
                    if let Some(gpu) = inventory.get(g as usize) {
                        *wanted_by_type.entry(gpu.gpu_type.as_str()).or_default() += 1;
                    }
                }
                gpus.len() as u32
            }
            None => {
                if let Some(t) = &job.gpus.gpu_type {
                    wanted_by_type.insert(t, job.gpus_wanted());
                }
                job.gpus_wanted()
            }
        };
        for account in &chain {
            let l = &account.limits;
            let held = self.accounts.get(&account.name).unwrap_or(&empty);
            // Up to its guarantee, and beyond it what it may borrow
            // (whether there is anything to borrow is `elastic`'s).
            let borrow = l.borrow_limit.unwrap_or(0);
            if policy
                .max_gpus(account)
                .is_some_and(|max| held.gpus + wanted > max.saturating_add(borrow))
            {
                return Some(Reason::AssocGrpGRES);
            }
            for (gpu_type, n) in &wanted_by_type {
                let max = l.max_gpus_by_type.get(*gpu_type);
                if max
                    .is_some_and(|&max| held.by_type.get(*gpu_type).copied().unwrap_or(0) + n > max)
                {
                    return Some(Reason::AssocGrpGRES);
                }
            }
            if l.max_running_jobs.is_some_and(|max| held.jobs + 1 > max) {
                return Some(Reason::AssocGrpJobsLimit);
            }
        }
        if let Some(&max) = policy.qos_gpus_per_user.get(job.qos.as_str()) {
            let held = self
                .qos_users
                .get(&(job.qos.clone(), job.user.clone()))
                .copied()
                .unwrap_or(0);
            if held + wanted > max {
                return Some(Reason::QosMaxGresPerUser);
            }
        }
        // Per-user limits come from the job's own account.
        if let Some(own) = chain.first() {
            let held = self
                .users
                .get(&(job.account.clone(), job.user.clone()))
                .unwrap_or(&empty);
            if own
                .limits
                .max_gpus_per_user
                .is_some_and(|max| held.gpus + wanted > max)
            {
                return Some(Reason::AssocMaxGRESPerUser);
            }
            if own
                .limits
                .max_running_jobs_per_user
                .is_some_and(|max| held.jobs + 1 > max)
            {
                return Some(Reason::AssocMaxJobsLimit);
            }
        }
        None
    }
}

/// What a job must not ask for at all, from its account's (and its
/// ancestors') limits: too many GPUs for one job, or too long.
pub fn refuse_at_submit(
    policy: &Policy,
    account: &str,
    gpus: u32,
    time_limit: Option<u64>,
) -> Option<String> {
    for a in policy.chain(account) {
        if let Some(max) = a.limits.max_gpus_per_job {
            if gpus > max {
                return Some(format!(
                    "{gpus} GPUs requested, but jobs of account '{}' may have at most {max} (max_gpus_per_job)",
                    a.name
                ));
            }
        }
        if let Some(max) = a.limits.max_time {
            if time_limit.is_none_or(|t| t > max) {
                return Some(format!(
                    "time limit {} exceeds the {} that account '{}' allows (its max_time)",
                    crate::model::units::format_time_limit(time_limit),
                    crate::model::units::format_duration(max),
                    a.name
                ));
            }
        }
    }
    None
}

/// Refuses a submission that would take the account (or an ancestor) over
/// its `max_submitted_jobs`; `active` counts its pending and running jobs.
/// Whether `new_jobs` more jobs (the tasks of an array, or one) would take
/// an account over its max_submitted_jobs.
pub fn refuse_submission(
    policy: &Policy,
    account: &str,
    new_jobs: u32,
    active: impl Fn(&str) -> u32,
) -> Option<String> {
    for a in policy.chain(account) {
        if let Some(max) = a.limits.max_submitted_jobs {
            let n = active(&a.name);
            if n.saturating_add(new_jobs) > max {
                let adding = if new_jobs == 1 {
                    String::new()
                } else {
                    format!("; {new_jobs} more would pass")
                };
                return Some(format!(
                    "account '{}' already has {n} jobs pending or running{adding}, its limit (max_submitted_jobs = {max})",
                    a.name
                ));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::job::example_job;
    use std::path::Path;

    fn config() -> Config {
        Config::parse(
            "[[gpus]]\ntype = \"a100\"\ncount = 4\nmemory = \"80G\"\n[[gpus]]\ntype = \"t4\"\ncount = 4\nmemory = \"16G\"\n\
             [[accounts]]\nname = \"research\"\nmax_gpus = 6\nmax_running_jobs = 3\n\
             [[accounts]]\nname = \"vision\"\nparent = \"research\"\nusers = [\"alice\", \"bob\"]\nmax_gpus_by_type = { a100 = 2 }\nmax_gpus_per_user = 3\nmax_running_jobs_per_user = 2\nmax_gpus_per_job = 4\nmax_time = \"1-00:00:00\"\nmax_submitted_jobs = 2\n",
            Path::new("x.toml"),
        )
        .unwrap()
    }

    fn job(id: u64, user: &str) -> Job {
        let mut j = example_job(id);
        j.account = "vision".into();
        j.user = user.into();
        j
    }

    #[test]
    fn group_limits_hold_up_the_tree_and_per_user_limits_in_the_account() {
        let c = config();
        let inv = crate::gpu::Inventory::declared(&c);
        let p = Policy::new(&c);
        let mut s = State::default();
        assert_eq!(
            p.chain("vision")
                .iter()
                .map(|a| a.name.as_str())
                .collect::<Vec<_>>(),
            ["vision", "research"]
        );
        // alice: two a100 (the type limit), then one t4 → she holds 3 GPUs.
        assert_eq!(
            s.check(&p, &job(1, "alice"), Some(&[0, 1]), &inv.gpus),
            None
        );
        s.add(&p, &job(1, "alice"), &[0, 1], &inv.gpus);
        assert_eq!(
            s.check(&p, &job(2, "bob"), Some(&[2]), &inv.gpus),
            Some(Reason::AssocGrpGRES),
            "a third a100 for vision"
        );
        assert_eq!(
            s.check(&p, &job(2, "alice"), Some(&[4, 5]), &inv.gpus),
            Some(Reason::AssocMaxGRESPerUser)
        );
        assert_eq!(s.check(&p, &job(2, "alice"), Some(&[4]), &inv.gpus), None);
        s.add(&p, &job(2, "alice"), &[4], &inv.gpus);
        assert_eq!(
            s.check(&p, &job(3, "alice"), Some(&[]), &inv.gpus),
            Some(Reason::AssocMaxJobsLimit)
        );
        // bob: research may hold 6 GPUs; 3 are held.
        assert_eq!(
            s.check(&p, &job(3, "bob"), Some(&[5, 6, 7, 4]), &inv.gpus),
            Some(Reason::AssocGrpGRES)
        );
        assert_eq!(s.check(&p, &job(3, "bob"), Some(&[5, 6]), &inv.gpus), None);
        s.add(&p, &job(3, "bob"), &[5, 6], &inv.gpus);
        assert_eq!(
            s.check(&p, &job(4, "bob"), Some(&[]), &inv.gpus),
            Some(Reason::AssocGrpJobsLimit),
            "research runs 3 jobs"
        );
    }

    #[test]
    fn submit_time_limits() {
        let c = config();
        let p = Policy::new(&c);
        assert!(refuse_at_submit(&p, "vision", 5, Some(60))
            .unwrap()
            .contains("at most 4 (max_gpus_per_job)"));
        assert!(refuse_at_submit(&p, "vision", 1, None)
            .unwrap()
            .contains("UNLIMITED exceeds the 1-00:00:00"));
        assert_eq!(refuse_at_submit(&p, "vision", 4, Some(3_600)), None);
        assert_eq!(
            refuse_at_submit(&p, "elsewhere", 99, None),
            None,
            "no limits on unknown accounts"
        );
        assert!(refuse_submission(&p, "vision", 1, |_| 2)
            .unwrap()
            .contains("already has 2 jobs pending or running"));
        assert_eq!(refuse_submission(&p, "vision", 1, |_| 1), None);
        assert!(refuse_submission(&p, "vision", 2, |_| 1)
            .unwrap()
            .contains("already has 1 jobs pending or running; 2 more would pass"));
    }

    #[test]
    fn a_window_changes_max_gpus_while_it_holds() {
        let config = Config::parse(
            "timezone = \"UTC\"\n[[gpus]]\ntype = \"a100\"\ncount = 8\nmemory = \"80G\"\n\
             [[accounts]]\nname = \"vision\"\nusers = [\"alice\"]\nmax_gpus = 2\n\
             max_gpus_windows = [{ days = \"mon-fri\", hours = \"06:00-12:00\", max_gpus = 6 }]\n",
            Path::new("x.toml"),
        )
        .unwrap();
        // 2026-11-30 is a Monday.
        let monday_9 = 1_795_996_800 + 9 * 3600;
        let monday_13 = monday_9 + 4 * 3600;
        let inventory = crate::gpu::test_a100s(8);
        let job = Job {
            account: "vision".into(),
            ..example_job(1)
        };
        let running = Job {
            gpus_alloc: vec![0, 1],
            ..job.clone()
        };
        let mut state = State::default();
        let morning = Policy::at(&config, monday_9);
        state.add(&morning, &running, &running.gpus_alloc, &inventory);
        assert_eq!(
            state.check(&morning, &job, None, &inventory),
            None,
            "6 in the morning"
        );
        assert_eq!(morning.next_change(), Some(monday_9 + 3 * 3600));
        let afternoon = Policy::at(&config, monday_13);
        assert_eq!(
            state.check(&afternoon, &job, None, &inventory),
            Some(Reason::AssocGrpGRES),
            "2 otherwise"
        );
    }

    #[test]
    fn a_qos_limits_each_users_gpus() {
        let config = Config::parse(
            "[[gpus]]\ntype = \"a100\"\ncount = 8\nmemory = \"80G\"\n\
             [[qos]]\nname = \"low\"\npriority = 0\nmax_gpus_per_user = 2\n\
             [[qos]]\nname = \"medium\"\npriority = 10\n",
            Path::new("x.toml"),
        )
        .unwrap();
        let inventory = crate::gpu::test_a100s(8);
        let policy = Policy::new(&config);
        let job = |user: &str, qos: &str| Job {
            user: user.into(),
            qos: qos.into(),
            ..example_job(1)
        };
        let mut state = State::default();
        let running = Job {
            gpus_alloc: vec![0, 1],
            ..job("alice", "low")
        };
        state.add(&policy, &running, &running.gpus_alloc, &inventory);
        assert_eq!(
            state.check(&policy, &job("alice", "low"), None, &inventory),
            Some(Reason::QosMaxGresPerUser)
        );
        assert_eq!(
            state.check(&policy, &job("bob", "low"), None, &inventory),
            None
        );
        assert_eq!(
            state.check(&policy, &job("alice", "medium"), None, &inventory),
            None
        );
    }
}
