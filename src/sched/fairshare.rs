//! Fair-share: how much each user (in an account) has used of what their
//! shares entitle them to, as a factor in [0, 1] for the priority.
//!
//! The association tree is Slurm's: accounts (with shares) under a root,
//! possibly nested, and user associations (one share each) under accounts.
//! Usage is charged to user associations and decays with a half-life; an
//! account's usage is the sum of its subtree's.
//!
//! Two algorithms, as in Slurm:
//!
//! - **Fair Tree** (default). At each level, every child's *level
//!   fair-share* is `S / U`: its shares and its usage as fractions of its
//!   siblings' (no usage: infinite). Children are visited best first, depth
//!   first, and users are ranked in that order; a user's factor is
//!   `rank / users`, 1.0 for the first. So if account A beats its sibling B,
//!   every user of A beats every user of B, whatever happens deeper down.
//!   Users with equal level fair-share share a rank.
//! - **Classic**: `F = 2^(-UE / S)`, with `S` the normalized shares (the
//!   product of the share fractions down the path), `U` the normalized usage
//!   (usage / the root's usage), and the effective usage
//!   `UE = U + (UE_parent - U) * S_local` for associations below the first
//!   level (`S_local`: the share fraction among siblings); `UE = U` on the
//!   first level. An association that used nothing has F = 1; one that used
//!   exactly its share, 0.5.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::model::policy::Algorithm;

/// One node of the association tree.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub account: String,
    /// `Some` for a user association (a leaf).
    pub user: Option<String>,
    pub parent: Option<usize>,
    pub shares: f64,
    /// Decayed usage charged to this user association (accounts: 0; their
    /// usage is summed from their subtree).
    pub usage: f64,
}

/// What the computation found for one node, as `ysshare` shows it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeShare {
    /// Shares as a fraction of the whole machine.
    pub norm_shares: f64,
    /// The subtree's usage.
    pub usage: f64,
    /// Usage as a fraction of all usage.
    pub norm_usage: f64,
    /// Classic effective usage.
    pub effective_usage: f64,
    /// Fair Tree's S/U among siblings (infinite without usage).
    pub level_fs: f64,
    /// The factor (users; accounts carry the classic value for display).
    pub fairshare: f64,
}

/// The tree: node 0 is the root.
#[derive(Clone, Debug, PartialEq)]
pub struct Tree {
    pub nodes: Vec<Node>,
}

impl Tree {
    pub fn new() -> Tree {
        Tree {
            nodes: vec![Node {
                account: "root".into(),
                user: None,
                parent: None,
                shares: 1.0,
                usage: 0.0,
            }],
        }
    }

    /// Adds an account under `parent` (a node index); returns its index.
    pub fn add_account(&mut self, name: &str, parent: usize, shares: f64) -> usize {
        self.nodes.push(Node {
            account: name.to_string(),
            user: None,
            parent: Some(parent),
            shares,
            usage: 0.0,
        });
        self.nodes.len() - 1
    }

    pub fn add_user(&mut self, account: usize, user: &str, shares: f64, usage: f64) -> usize {
        let name = self.nodes[account].account.clone();
        self.nodes.push(Node {
            account: name,
            user: Some(user.to_string()),
            parent: Some(account),
            shares,
            usage,
        });
        self.nodes.len() - 1
    }

    /// Every node but the root, depth first in insertion order, with its
    /// depth (1 for the root's children).
    pub fn depth_first(&self) -> Vec<(usize, usize)> {
        let children = self.children();
        let mut out = Vec::new();
        let mut stack: Vec<(usize, usize)> = children[0].iter().rev().map(|&c| (c, 1)).collect();
        while let Some((n, d)) = stack.pop() {
            out.push((n, d));
            stack.extend(children[n].iter().rev().map(|&c| (c, d + 1)));
        }
        out
    }

    pub fn account_index(&self, name: &str) -> Option<usize> {
        self.nodes
            .iter()
            .position(|n| n.user.is_none() && n.account == name && n.parent.is_some())
    }

    fn children(&self) -> Vec<Vec<usize>> {
        let mut children = vec![Vec::new(); self.nodes.len()];
        for (i, n) in self.nodes.iter().enumerate() {
            if let Some(p) = n.parent {
                children[p].push(i);
            }
        }
        children
    }

    /// Computes every node's shares, usage and factor.
    pub fn compute(&self, algorithm: Algorithm) -> Vec<NodeShare> {
        let children = self.children();
        let mut out = vec![NodeShare::default(); self.nodes.len()];
        // Subtree usage, children before parents (indices grow downwards
        // only by construction, so walk them backwards).
        let mut usage: Vec<f64> = self.nodes.iter().map(|n| n.usage).collect();
        for i in (1..self.nodes.len()).rev() {
            if let Some(p) = self.nodes[i].parent {
                usage[p] += usage[i];
            }
        }
        let total = usage[0];
        out[0].norm_shares = 1.0;
        out[0].usage = total;
        out[0].norm_usage = 1.0;
        out[0].effective_usage = 1.0;
        // Top-down: shares, usage fractions, effective usage, classic factor.
        let mut stack = vec![0usize];
        while let Some(p) = stack.pop() {
            let kids = &children[p];
            let sibling_shares: f64 = kids.iter().map(|&k| self.nodes[k].shares).sum();
            let sibling_usage: f64 = kids.iter().map(|&k| usage[k]).sum();
            for &k in kids {
                let local_share = if sibling_shares > 0.0 {
                    self.nodes[k].shares / sibling_shares
                } else {
                    0.0
                };
                let local_usage = if sibling_usage > 0.0 {
                    usage[k] / sibling_usage
                } else {
                    0.0
                };
                let norm_usage = if total > 0.0 { usage[k] / total } else { 0.0 };
                let effective = if p == 0 {
                    norm_usage
                } else {
                    norm_usage + (out[p].effective_usage - norm_usage) * local_share
                };
                let norm_shares = out[p].norm_shares * local_share;
                out[k] = NodeShare {
                    norm_shares,
                    usage: usage[k],
                    norm_usage,
                    effective_usage: effective,
                    level_fs: if local_usage > 0.0 {
                        local_share / local_usage
                    } else {
                        f64::INFINITY
                    },
                    fairshare: classic_factor(effective, norm_shares),
                };
                stack.push(k);
            }
        }
        if algorithm == Algorithm::FairTree {
            let users = self.nodes.iter().filter(|n| n.user.is_some()).count();
            let mut rank = users;
            self.rank(0, &children, &mut out, &mut rank, users);
        }
        out
    }

    /// Fair Tree's depth-first walk, best level fair-share first.
    fn rank(
        &self,
        node: usize,
        children: &[Vec<usize>],
        out: &mut [NodeShare],
        rank: &mut usize,
        users: usize,
    ) {
        self.rank_merged(&[node], children, out, rank, users);
    }

    /// Ranks the children of `parents` as one set of siblings. Siblings
    /// tied on level fair-share are not ordered by name: tied users share
    /// the better rank, and tied accounts have their children ranked
    /// together, so that no account comes first for its name (the job
    /// order then falls to submit time).
    fn rank_merged(
        &self,
        parents: &[usize],
        children: &[Vec<usize>],
        out: &mut [NodeShare],
        rank: &mut usize,
        users: usize,
    ) {
        let mut kids: Vec<usize> = parents
            .iter()
            .flat_map(|&p| children[p].iter().copied())
            .collect();
        kids.sort_by(|&a, &b| {
            out[b]
                .level_fs
                .partial_cmp(&out[a].level_fs)
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        let mut i = 0;
        while i < kids.len() {
            let level = out[kids[i]].level_fs;
            let end = kids[i..]
                .iter()
                .position(|&k| out[k].level_fs != level)
                .map_or(kids.len(), |n| i + n);
            let (tied_users, tied_accounts): (Vec<usize>, Vec<usize>) = kids[i..end]
                .iter()
                .partition(|&&k| self.nodes[k].user.is_some());
            let given = *rank;
            for &u in &tied_users {
                out[u].fairshare = if users > 0 {
                    given as f64 / users as f64
                } else {
                    0.0
                };
            }
            *rank = rank.saturating_sub(tied_users.len());
            if !tied_accounts.is_empty() {
                self.rank_merged(&tied_accounts, children, out, rank, users);
            }
            i = end;
        }
    }
}

impl Default for Tree {
    fn default() -> Tree {
        Tree::new()
    }
}

/// `2^(-UE/S)`; no shares means no claim (0).
pub fn classic_factor(effective_usage: f64, norm_shares: f64) -> f64 {
    if norm_shares <= 0.0 {
        return 0.0;
    }
    (-effective_usage / norm_shares).exp2()
}

/// Usage decayed over `elapsed` seconds with a half-life (`None`: no decay).
/// After one half-life a charge counts half, after two a quarter.
pub fn decay(usage: f64, elapsed: i64, half_life: Option<u64>) -> f64 {
    match half_life {
        Some(h) if h > 0 && elapsed > 0 => usage * (-(elapsed as f64) / h as f64).exp2(),
        _ => usage,
    }
}

/// Fair-share factors by account, then user: looked up with borrowed
/// names, since a pass looks up every pending job's.
/// Keyed by account, then user: looked up for every pending job of a pass
/// (when the job before was of another association), so hashed with
/// rustc-hash's fast hash. The names are the config's accounts and the
/// system's users, which no user picks to collide.
pub type FactorMap = rustc_hash::FxHashMap<String, rustc_hash::FxHashMap<String, f64>>;

/// The factor of each (account, user) association, from a computed tree.
pub fn factors(tree: &Tree, shares: &[NodeShare]) -> FactorMap {
    let mut map = FactorMap::default();
    for (n, s) in tree.nodes.iter().zip(shares) {
        if let Some(u) = &n.user {
            map.entry(n.account.clone())
                .or_default()
                .insert(u.clone(), s.fairshare);
        }
    }
    map
}

/// The factor of one association (0 without a record: no claim).
pub fn factor_of(map: &FactorMap, account: &str, user: &str) -> f64 {
    map.get(account)
        .and_then(|users| users.get(user))
        .copied()
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    /// root ─ A (40 shares) ─ a1 (1), a2 (1)
    ///      └ B (60 shares) ─ b1 (1)
    fn tree(usage: [f64; 3]) -> (Tree, [usize; 3]) {
        let mut t = Tree::new();
        let a = t.add_account("A", 0, 40.0);
        let b = t.add_account("B", 0, 60.0);
        let a1 = t.add_user(a, "a1", 1.0, usage[0]);
        let a2 = t.add_user(a, "a2", 1.0, usage[1]);
        let b1 = t.add_user(b, "b1", 1.0, usage[2]);
        (t, [a1, a2, b1])
    }

    #[test]
    fn normalized_shares_multiply_down_the_tree() {
        let (t, [a1, _, b1]) = tree([0.0; 3]);
        let s = t.compute(Algorithm::Classic);
        assert!(close(s[a1].norm_shares, 0.2));
        assert!(close(s[b1].norm_shares, 0.6));
        // No usage anywhere: everyone at 1.0.
        assert!(close(s[a1].fairshare, 1.0));
    }

    #[test]
    fn slurms_documented_machine_allocation() {
        // Slurm's classic_fair_share.html, Figure 1: the machine split
        // among accounts A, B, C and D (40, 30, 20, 10 %), A's shares among
        // A1-A4; "if there are 10 users given equal shares in Account A3,
        // they will each be allocated 1% of the machine".
        let mut t = Tree::new();
        let a = t.add_account("A", 0, 40.0);
        for (name, shares) in [("B", 30.0), ("C", 20.0), ("D", 10.0)] {
            t.add_account(name, 0, shares);
        }
        let sub: Vec<usize> = (1..=4)
            .map(|i| t.add_account(&format!("A{i}"), a, 25.0))
            .collect();
        let a3 = sub[2];
        let users: Vec<usize> = (0..10)
            .map(|u| t.add_user(a3, &format!("u{u}"), 1.0, 0.0))
            .collect();
        let s = t.compute(Algorithm::Classic);
        for u in users {
            assert!(close(s[u].norm_shares, 0.01), "{}", s[u].norm_shares);
        }
        assert!(close(s[a3].norm_shares, 0.1));
    }

    #[test]
    fn classic_by_hand() {
        // Usage: a1 30, a2 10, b1 60; total 100.
        let (t, [a1, a2, b1]) = tree([30.0, 10.0, 60.0]);
        let s = t.compute(Algorithm::Classic);
        let a = t.account_index("A").unwrap();
        // A: U = 0.4 = UE (first level), S = 0.4 → F = 2^-1 = 0.5.
        assert!(close(s[a].effective_usage, 0.4));
        assert!(close(s[a].fairshare, 0.5));
        // a1: U = 0.3, S_local = 0.5, UE = 0.3 + (0.4 - 0.3) * 0.5 = 0.35;
        // S = 0.2 → F = 2^(-1.75).
        assert!(close(s[a1].effective_usage, 0.35));
        assert!(close(s[a1].fairshare, 2f64.powf(-1.75)));
        // a2: UE = 0.1 + (0.4 - 0.1) * 0.5 = 0.25 → F = 2^(-1.25).
        assert!(close(s[a2].fairshare, 2f64.powf(-1.25)));
        // b1: UE = 0.6 + (0.6 - 0.6) * 1 = 0.6, S = 0.6 → F = 0.5.
        assert!(close(s[b1].fairshare, 0.5));
    }

    #[test]
    fn fair_tree_ranks_whole_accounts_first() {
        // A used 40 for 40 % of shares (LF 1.0); B used 60 for 60 % (LF 1.0):
        // a tie, so neither comes first for its name: their users are
        // ranked together. a2 used 1/4 of A for 1/2 (LF 2), b1 all of B
        // for all of it (LF 1), a1 3/4 of A (LF 2/3).
        let (t, [a1, a2, b1]) = tree([30.0, 10.0, 60.0]);
        let s = t.compute(Algorithm::FairTree);
        assert!(close(s[a2].fairshare, 1.0));
        assert!(close(s[b1].fairshare, 2.0 / 3.0));
        assert!(close(s[a1].fairshare, 1.0 / 3.0));

        // B idle: B's users all beat A's, however A's users compare.
        let (t, [a1, a2, b1]) = tree([30.0, 10.0, 0.0]);
        let s = t.compute(Algorithm::FairTree);
        assert!(s[b1].level_fs.is_infinite());
        assert!(close(s[b1].fairshare, 1.0));
        assert!(close(s[a2].fairshare, 2.0 / 3.0));
        assert!(close(s[a1].fairshare, 1.0 / 3.0));
    }

    #[test]
    fn fair_tree_ties_share_a_rank() {
        let (t, [a1, a2, b1]) = tree([0.0, 0.0, 10.0]);
        let s = t.compute(Algorithm::FairTree);
        // A has no usage: first. a1 and a2 both infinite: tied at the top.
        assert!(close(s[a1].fairshare, 1.0));
        assert!(close(s[a2].fairshare, 1.0));
        assert!(close(s[b1].fairshare, 1.0 / 3.0));
    }

    #[test]
    fn usage_halves_every_half_life() {
        let week = 7 * 86_400;
        assert!(close(decay(100.0, week as i64, Some(week)), 50.0));
        assert!(close(decay(100.0, 2 * week as i64, Some(week)), 25.0));
        assert!(close(decay(100.0, week as i64, None), 100.0));
        assert!(close(decay(100.0, -5, Some(week)), 100.0));
    }
}

/// Decayed usage of one association, as of a time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// Billing-seconds ever charged (GPU-seconds × weight), undecayed.
    pub raw: i64,
    /// The decayed sum, as of `as_of`.
    pub decayed: f64,
    pub as_of: i64,
}

impl Usage {
    /// The decayed usage at `now`; zero if a usage reset boundary lies
    /// between `as_of` and `now`.
    pub fn at(&self, now: i64, half_life: Option<u64>, reset: crate::config::UsageReset) -> f64 {
        if crossed_reset(reset, self.as_of, now) {
            return 0.0;
        }
        decay(self.decayed, now - self.as_of, half_life)
    }

    /// Adds a charge at `now`.
    pub fn charge(
        &mut self,
        billing: i64,
        now: i64,
        half_life: Option<u64>,
        reset: crate::config::UsageReset,
    ) {
        self.decayed = self.at(now, half_life, reset) + billing as f64;
        self.raw += billing;
        self.as_of = now;
    }
}

/// Whether a reset period (counted in UTC) starts between `from` and `to`.
pub fn crossed_reset(reset: crate::config::UsageReset, from: i64, to: i64) -> bool {
    use crate::config::UsageReset;
    let period = |t: i64| -> i64 {
        let day = t.div_euclid(86_400);
        match reset {
            UsageReset::None => 0,
            UsageReset::Daily => day,
            // 1970-01-01 was a Thursday; weeks start on Monday.
            UsageReset::Weekly => (day + 3).div_euclid(7),
            UsageReset::Monthly => {
                let date = jiff::Timestamp::from_second(t)
                    .map(|ts| ts.to_zoned(jiff::tz::TimeZone::UTC).date())
                    .unwrap_or_default();
                i64::from(date.year()) * 12 + i64::from(date.month())
            }
        }
    };
    to > from && period(to) != period(from)
}

/// The GPU-seconds a job's run used: its run time (less time suspended)
/// on its GPUs, a shard job its slots' part of its card.
pub fn gpu_seconds(job: &crate::model::job::Job, gpus: &[crate::model::gpu::Gpu]) -> i64 {
    let (Some(start), Some(end)) = (job.start_time, job.end_time) else {
        return 0;
    };
    let seconds = (end - start - job.suspended_secs as i64).max(0) as f64;
    let cards: f64 = job
        .gpus_alloc
        .iter()
        .map(|&g| match gpus.get(g as usize) {
            Some(gpu) if job.gpus.shard && gpu.shards > 0 => {
                f64::from(job.gpus.count.min(gpu.shards)) / f64::from(gpu.shards)
            }
            _ => 1.0,
        })
        .sum();
    (seconds * cards).round() as i64
}

/// The usage charged for a job: GPU-seconds × each GPU's billing weight ×
/// its QoS's usage factor, in whole billing-seconds.
pub fn charge(
    job: &crate::model::job::Job,
    gpus: &[crate::model::gpu::Gpu],
    config: &crate::config::Config,
) -> i64 {
    let (Some(start), Some(end)) = (job.start_time, job.end_time) else {
        return 0;
    };
    let seconds = (end - start - job.suspended_secs as i64).max(0) as f64;
    let weight: f64 = job
        .gpus_alloc
        .iter()
        .map(|&g| {
            let Some(gpu) = gpus.get(g as usize) else {
                return 1.0;
            };
            let weight = config.billing.get(&gpu.gpu_type).copied().unwrap_or(1.0);
            // A shard job pays for its slots' part of the card.
            if job.gpus.shard && gpu.shards > 0 {
                weight * f64::from(job.gpus.count.min(gpu.shards)) / f64::from(gpu.shards)
            } else {
                weight
            }
        })
        .sum();
    let factor = config.qos_named(&job.qos).map_or(1.0, |q| q.usage_factor);
    (seconds * weight * factor).round() as i64
}

/// Builds the association tree: the config's accounts (nested by
/// `parent`; with none, one `default` account), and a user association
/// for each user the config lists and each (account, user) with usage or
/// jobs, with the usage decayed to `now`.
pub fn build_tree<'a>(
    config: &crate::config::Config,
    associations: impl IntoIterator<Item = (&'a str, &'a str)>,
    usage: &HashMap<(String, String), Usage>,
    now: i64,
) -> Tree {
    let mut tree = Tree::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    if config.accounts.is_empty() {
        index.insert(
            crate::config::DEFAULT_ACCOUNT.to_string(),
            tree.add_account(crate::config::DEFAULT_ACCOUNT, 0, 1.0),
        );
    }
    // Parents first: add an account once its parent is in (the config
    // checked that parents exist and form no cycle).
    let mut left: Vec<&crate::config::Account> = config.accounts.iter().collect();
    while !left.is_empty() {
        let before = left.len();
        left.retain(|a| {
            let parent = match &a.parent {
                None => Some(0),
                Some(p) => index.get(p).copied(),
            };
            match parent {
                Some(p) => {
                    index.insert(a.name.clone(), tree.add_account(&a.name, p, a.shares));
                    false
                }
                None => true,
            }
        });
        if left.len() == before {
            break;
        }
    }
    let mut users: Vec<(String, String)> = Vec::new();
    for a in &config.accounts {
        users.extend(
            a.users
                .iter()
                .filter(|u| *u != "*")
                .map(|u| (a.name.clone(), u.clone())),
        );
    }
    // Dedup while borrowed: a long queue names few associations many times
    // (the fast hash for the same reason as [`FactorMap`]'s).
    let unique: rustc_hash::FxHashSet<(&str, &str)> = associations.into_iter().collect();
    users.extend(
        unique
            .into_iter()
            .map(|(a, u)| (a.to_string(), u.to_string())),
    );
    users.extend(usage.keys().cloned());
    users.sort();
    users.dedup();
    for (account, user) in users {
        let Some(&at) = index.get(&account) else {
            continue;
        };
        let used = usage
            .get(&(account.clone(), user.clone()))
            .map_or(0.0, |u| {
                u.at(now, config.fairshare.half_life, config.fairshare.reset)
            });
        tree.add_user(at, &user, 1.0, used);
    }
    tree
}

#[cfg(test)]
mod usage_tests {
    use super::*;
    use crate::config::UsageReset;

    #[test]
    fn charges_decay_and_accumulate() {
        let day: i64 = 86_400;
        let half = Some(day as u64);
        let mut u = Usage::default();
        u.charge(1_000, 10 * day, half, UsageReset::None);
        u.charge(1_000, 11 * day, half, UsageReset::None);
        assert_eq!(u.raw, 2_000, "raw usage is kept whole");
        assert!((u.decayed - 1_500.0).abs() < 1e-9, "{}", u.decayed);
        assert!((u.at(12 * day, half, UsageReset::None) - 750.0).abs() < 1e-9);
    }

    #[test]
    fn reset_periods() {
        let day = 86_400;
        // 1970-01-05 was a Monday.
        assert!(crossed_reset(UsageReset::Daily, day - 1, day));
        assert!(!crossed_reset(UsageReset::Daily, day, 2 * day - 1));
        assert!(
            !crossed_reset(UsageReset::Weekly, 4 * day, 10 * day + 5),
            "Monday to Sunday"
        );
        assert!(crossed_reset(UsageReset::Weekly, 4 * day - 1, 4 * day));
        assert!(crossed_reset(UsageReset::Monthly, 31 * day - 1, 31 * day));
        assert!(!crossed_reset(UsageReset::None, 0, 1_000 * day));
        let u = Usage {
            raw: 5,
            decayed: 5.0,
            as_of: day - 10,
        };
        assert_eq!(u.at(day + 10, None, UsageReset::Daily), 0.0);
    }

    #[test]
    fn a_job_is_charged_gpu_seconds_times_weights() {
        let config = crate::config::Config::parse(
            "[[gpus]]\ntype = \"a100\"\ncount = 2\nmemory = \"80G\"\n[[gpus]]\ntype = \"t4\"\ncount = 2\nmemory = \"16G\"\n[[qos]]\nname = \"cheap\"\npriority = 1\nusage_factor = 0.5\n[billing]\na100 = 5\n",
            std::path::Path::new("x.toml"),
        )
        .unwrap();
        let inv = crate::gpu::Inventory::declared(&config);
        let mut job = crate::model::job::example_job(1);
        job.qos = "medium".into(); // not declared: factor 1
        job.start_time = Some(100);
        job.end_time = Some(200);
        job.gpus_alloc = vec![0, 1];
        assert_eq!(charge(&job, &inv.gpus, &config), 100 * 2 * 5);
        job.gpus_alloc = vec![2];
        assert_eq!(
            charge(&job, &inv.gpus, &config),
            100,
            "unweighted types weigh 1"
        );
        job.qos = "cheap".into();
        assert_eq!(charge(&job, &inv.gpus, &config), 50);
        job.suspended_secs = 40;
        assert_eq!(
            charge(&job, &inv.gpus, &config),
            30,
            "suspended time is not charged"
        );
    }
}
