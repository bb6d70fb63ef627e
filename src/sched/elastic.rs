//! Elastic quotas, as Kueue's cohorts have them: an account's `max_gpus`
//! is its guarantee; with a `borrow_limit` its jobs may hold more, on
//! GPUs that other accounts' guarantees leave idle, and those borrowing
//! jobs are the first to give them back when a lender's job needs its
//! guarantee (reclaim). Pure functions of what runs, what waits and the
//! limits in force.

use std::collections::{HashMap, HashSet};

use super::limits::{Policy, State};
use crate::model::job::{Job, JobId};

/// Whether starting `job` on `wanted` GPUs takes an account of its chain
/// that may borrow beyond its guarantee: it would run on borrowed GPUs.
pub fn borrows(policy: &Policy, held: &State, job: &Job, wanted: u32) -> bool {
    policy.is_elastic()
        && policy.chain(&job.account).iter().any(|a| {
            a.limits.borrow_limit.is_some()
                && policy
                    .max_gpus(a)
                    .is_some_and(|max| held.gpus_of(&a.name) + wanted > max)
        })
}

/// Whether `job`, on `wanted` GPUs, stays within the guarantee of every
/// account of its chain that has one (and one has): then it may take back
/// what others borrowed.
pub fn within_guarantee(policy: &Policy, held: &State, job: &Job, wanted: u32) -> bool {
    let mut guarantees = policy
        .chain(&job.account)
        .into_iter()
        .filter_map(|a| Some((a, policy.max_gpus(a)?)))
        .peekable();
    guarantees.peek().is_some() && guarantees.all(|(a, max)| held.gpus_of(&a.name) + wanted <= max)
}

/// The accounts with a job waiting within its guarantee: their idle
/// guarantee is not lent, since they are about to use it.
pub fn wanting<'a, 'j>(
    policy: &Policy<'a>,
    held: &State,
    pending: impl IntoIterator<Item = &'j Job>,
) -> HashSet<&'a str> {
    let mut out = HashSet::new();
    if !policy.is_elastic() {
        return out;
    }
    for job in pending {
        if within_guarantee(policy, held, job, job.gpus_wanted()) {
            out.extend(policy.chain(&job.account).iter().map(|a| a.name.as_str()));
        }
    }
    out
}

/// The GPUs a borrowing job of `job`'s account must leave free: the idle
/// guarantees of the other accounts that want theirs now, or that do not
/// lend them (`lend = false`, beyond `lend_limit`).
pub fn kept_for_lenders(policy: &Policy, held: &State, job: &Job, wanting: &HashSet<&str>) -> u32 {
    let own: Vec<&str> = policy
        .chain(&job.account)
        .iter()
        .map(|a| a.name.as_str())
        .collect();
    policy
        .guaranteed()
        .filter(|a| !own.contains(&a.name.as_str()))
        .map(|a| {
            let idle = policy
                .max_gpus(a)
                .unwrap_or(0)
                .saturating_sub(held.gpus_of(&a.name));
            let lendable = if wanting.contains(a.name.as_str()) {
                0
            } else {
                a.limits.lend_limit.map_or(idle, |l| l.min(idle))
            };
            idle - lendable
        })
        .sum()
}

/// The account whose guarantee `job` borrows beyond, when it does: the
/// first of its chain that may borrow.
pub fn borrowing_account<'a>(policy: &Policy<'a>, job: &Job) -> Option<&'a str> {
    policy
        .chain(&job.account)
        .into_iter()
        .find(|a| a.limits.borrow_limit.is_some())
        .map(|a| a.name.as_str())
}

/// How many GPUs each account that may borrow holds beyond its guarantee
/// now: what reclaims may take from it, from any of its jobs, and no more.
pub fn excess(policy: &Policy, running: &[&Job]) -> HashMap<String, u32> {
    let mut held: HashMap<&str, u32> = HashMap::new();
    if !policy.is_elastic() {
        return HashMap::new();
    }
    for job in running {
        if let Some(a) = borrowing_account(policy, job) {
            *held.entry(a).or_default() += job.gpus_alloc.len() as u32;
        }
    }
    held.into_iter()
        .filter_map(|(name, gpus)| {
            let account = policy.chain(name).into_iter().next()?;
            let over = gpus.saturating_sub(policy.max_gpus(account)?);
            (over > 0).then(|| (name.to_string(), over))
        })
        .collect()
}

/// The running jobs that borrow now: in each account over its guarantee,
/// the latest started, as many as cover the excess. Ending (or
/// reclaiming) them all brings the account back to its guarantee, never
/// below it.
pub fn borrowing_now(policy: &Policy, running: &[&Job]) -> HashSet<JobId> {
    let mut out = HashSet::new();
    if !policy.is_elastic() {
        return out;
    }
    let mut by_account: HashMap<&str, Vec<&Job>> = HashMap::new();
    for job in running {
        for a in policy.chain(&job.account) {
            if a.limits.borrow_limit.is_some() {
                by_account.entry(a.name.as_str()).or_default().push(job);
            }
        }
    }
    let mut names: Vec<&str> = by_account.keys().copied().collect();
    names.sort_unstable();
    for name in names {
        let Some(account) = policy.chain(name).into_iter().next() else {
            continue;
        };
        let Some(max) = policy.max_gpus(account) else {
            continue;
        };
        let jobs = by_account.get_mut(name).expect("a key of the map");
        let held: u32 = jobs.iter().map(|j| j.gpus_alloc.len() as u32).sum();
        let mut excess = held.saturating_sub(max);
        jobs.sort_by_key(|j| std::cmp::Reverse((j.start_time, j.id)));
        for job in jobs.iter() {
            if excess == 0 {
                break;
            }
            out.insert(job.id);
            excess = excess.saturating_sub(job.gpus_alloc.len() as u32);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::model::job::{example_job, GpuRequest, JobState};
    use std::path::Path;

    fn config(extra: &str) -> Config {
        Config::parse(
            &format!(
                "[[gpus]]\ntype = \"a100\"\ncount = 4\nmemory = \"80G\"\n\
                 [[accounts]]\nname = \"a\"\nusers = [\"alice\"]\nmax_gpus = 2\nborrow_limit = 2\n\
                 [[accounts]]\nname = \"b\"\nusers = [\"bob\"]\nmax_gpus = 2\n{extra}"
            ),
            Path::new("x.toml"),
        )
        .unwrap()
    }

    fn job(id: JobId, account: &str, alloc: &[u32]) -> Job {
        Job {
            account: account.into(),
            gpus: GpuRequest {
                count: alloc.len().max(1) as u32,
                ..GpuRequest::default()
            },
            gpus_alloc: alloc.to_vec(),
            start_time: Some(id as i64),
            state: if alloc.is_empty() {
                JobState::Pending
            } else {
                JobState::Running
            },
            ..example_job(id)
        }
    }

    fn held(policy: &Policy, running: &[&Job]) -> State {
        let inventory = crate::gpu::test_a100s(4);
        let mut s = State::default();
        for j in running {
            s.add(policy, j, &j.gpus_alloc, &inventory);
        }
        s
    }

    #[test]
    fn jobs_beyond_the_guarantee_borrow_and_the_latest_are_the_borrowers() {
        let c = config("");
        let p = Policy::new(&c);
        let running = [job(1, "a", &[0]), job(2, "a", &[1]), job(3, "a", &[2])];
        let refs: Vec<&Job> = running.iter().collect();
        let s = held(&p, &refs);
        assert!(borrows(&p, &s, &job(4, "a", &[]), 1));
        assert!(!borrows(&p, &s, &job(4, "b", &[]), 1), "b may not borrow");
        assert_eq!(borrowing_now(&p, &refs), HashSet::from([3]));
        // b's job is within its guarantee: it may take back; a's is not.
        assert!(within_guarantee(&p, &s, &job(4, "b", &[]), 2));
        assert!(!within_guarantee(&p, &s, &job(4, "b", &[]), 3));
        assert!(!within_guarantee(&p, &s, &job(4, "a", &[]), 1));
        assert!(!within_guarantee(&p, &s, &job(4, "nobody", &[]), 1));
    }

    #[test]
    fn idle_guarantees_are_lent_unless_kept_or_wanted() {
        let lends_all = config("");
        let p = Policy::new(&lends_all);
        let s = held(&p, &[]);
        let borrower = job(9, "a", &[]);
        assert_eq!(kept_for_lenders(&p, &s, &borrower, &HashSet::new()), 0);
        let waiting = job(10, "b", &[]);
        let w = wanting(&p, &s, [&waiting]);
        assert_eq!(w, HashSet::from(["b"]));
        assert_eq!(kept_for_lenders(&p, &s, &borrower, &w), 2, "b wants it");
        let keeps = config("lend = false\n");
        let p = Policy::new(&keeps);
        assert_eq!(kept_for_lenders(&p, &s, &borrower, &HashSet::new()), 2);
        let lends_one = config("lend_limit = 1\n");
        let p = Policy::new(&lends_one);
        assert_eq!(kept_for_lenders(&p, &s, &borrower, &HashSet::new()), 1);
        // b uses one of its two: one idle, lent.
        let b_runs = job(5, "b", &[3]);
        let s = held(&p, &[&b_runs]);
        assert_eq!(kept_for_lenders(&p, &s, &borrower, &HashSet::new()), 0);
    }

    #[test]
    fn the_guarantee_in_force_is_the_windows() {
        // a is guaranteed 1 GPU by day and 3 at night (UTC).
        let c = Config::parse(
            "timezone = \"UTC\"\n[[gpus]]\ntype = \"a100\"\ncount = 4\nmemory = \"80G\"\n\
             [[accounts]]\nname = \"a\"\nusers = [\"*\"]\nmax_gpus = 1\nborrow_limit = 3\n\
             max_gpus_windows = [{ days = \"all\", hours = \"20:00-08:00\", max_gpus = 3 }]\n",
            Path::new("x.toml"),
        )
        .unwrap();
        let running = [job(1, "a", &[0]), job(2, "a", &[1]), job(3, "a", &[2])];
        let refs: Vec<&Job> = running.iter().collect();
        let noon = 1_795_996_800 + 12 * 3600;
        let night = noon + 10 * 3600;
        let by_day = Policy::at(&c, noon);
        assert_eq!(borrowing_now(&by_day, &refs), HashSet::from([2, 3]));
        let at_night = Policy::at(&c, night);
        assert!(borrowing_now(&at_night, &refs).is_empty());
        let s = held(&at_night, &refs);
        assert!(
            borrows(&at_night, &s, &job(4, "a", &[]), 1),
            "a fourth borrows"
        );
    }

    #[test]
    fn contradictions_are_refused_with_the_key() {
        let bad = |extra: &str, key: &str| {
            let e = Config::parse(
                &format!(
                    "[[gpus]]\ntype = \"a100\"\ncount = 4\nmemory = \"80G\"\n[[accounts]]\nname = \"a\"\n{extra}"
                ),
                Path::new("x.toml"),
            )
            .unwrap_err()
            .to_string();
            assert!(e.contains(key), "{extra}: {e}");
            e
        };
        let e = bad("max_gpus = 2\nborrow_limit = -1\n", "borrow_limit");
        assert!(e.contains("0 or more, not -1"), "{e}");
        let e = bad("max_gpus = 2\nborrow_limit = 5\n", "borrow_limit");
        assert!(e.contains("more than the 4"), "{e}");
        let e = bad("borrow_limit = 1\n", "borrow_limit");
        assert!(e.contains("no max_gpus"), "{e}");
        let e = bad("max_gpus = 2\nlend_limit = 3\n", "lend_limit");
        assert!(e.contains("at most max_gpus"), "{e}");
        let e = bad("max_gpus = 2\nlend = false\nlend_limit = 1\n", "lend_limit");
        assert!(e.contains("not both"), "{e}");
        bad("lend = false\n", "lend");
    }
}
