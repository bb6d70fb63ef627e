//! Approval: jobs above an account's size (GPU-hours: GPUs x time limit)
//! or on GPU types it reserves for approved work wait, held, until a
//! coordinator of the account (or of one above it) approves them.

use crate::config::Account;
use crate::model::job::GpuRequest;

use super::limits::Policy;

/// Why a job of `account` needs approval, or `None`. `gpu_types` are the
/// types the server has: a job that names no type may land on any of them.
pub fn needed(
    policy: &Policy,
    account: &str,
    gpus: &GpuRequest,
    time_limit: Option<u64>,
    gpu_types: &[&str],
) -> Option<String> {
    if gpus.count == 0 {
        return None;
    }
    for a in policy.chain(account) {
        let rule = &a.approval;
        if let Some(max) = rule.above_gpu_hours {
            let hours = match time_limit {
                Some(limit) => f64::from(gpus.gpus_held()) * limit as f64 / 3600.0,
                None => f64::INFINITY,
            };
            if hours > max {
                let size = match time_limit {
                    Some(_) => format!("its {hours:.1} GPU-hours (GPUs x time limit) are"),
                    None => "it has no time limit, so its GPU-hours are unbounded:".to_string(),
                };
                return Some(format!(
                    "{size} more than account {}'s approval_above_gpu_hours ({max})",
                    a.name
                ));
            }
        }
        let reserved: Vec<&str> = match &gpus.gpu_type {
            Some(t) => rule
                .gpu_types
                .iter()
                .filter(|r| *r == t)
                .map(String::as_str)
                .collect(),
            None => rule
                .gpu_types
                .iter()
                .filter(|r| gpu_types.contains(&r.as_str()))
                .map(String::as_str)
                .collect(),
        };
        if let Some(t) = reserved.first() {
            let how = if gpus.gpu_type.is_some() {
                "asks for"
            } else {
                "names no GPU type, so may run on"
            };
            return Some(format!(
                "it {how} {t} GPUs, which account {} keeps for approved jobs",
                a.name
            ));
        }
    }
    None
}

/// Whether `user` may approve jobs of `account`: a coordinator of it or of
/// an account above it.
pub fn may_approve(policy: &Policy, account: &str, user: &str) -> bool {
    policy
        .chain(account)
        .iter()
        .any(|a| a.coordinators.iter().any(|c| c == user))
}

/// The coordinators who could approve a job of `account`, nearest first.
pub fn coordinators<'a>(policy: &Policy<'a>, account: &str) -> Vec<&'a str> {
    let chain: Vec<&'a Account> = policy.chain(account);
    chain
        .into_iter()
        .flat_map(|a| a.coordinators.iter().map(String::as_str))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use std::path::Path;

    fn config() -> Config {
        Config::parse(
            "[[gpus]]\ntype = \"a100\"\ncount = 4\nmemory = \"80G\"\n[[gpus]]\ntype = \"t4\"\ncount = 4\nmemory = \"16G\"\n\
             [[accounts]]\nname = \"research\"\ncoordinators = [\"carol\"]\napproval_gpu_types = [\"a100\"]\n\
             [[accounts]]\nname = \"vision\"\nparent = \"research\"\nusers = [\"alice\"]\ncoordinators = [\"dan\"]\napproval_above_gpu_hours = 8\n\
             [[accounts]]\nname = \"open\"\nusers = [\"*\"]\n",
            Path::new("x.toml"),
        )
        .unwrap()
    }

    fn gpus(count: u32, t: Option<&str>) -> GpuRequest {
        GpuRequest {
            count,
            gpu_type: t.map(str::to_string),
            ..GpuRequest::default()
        }
    }

    #[test]
    fn size_and_type_rules_up_the_tree() {
        let c = config();
        let p = Policy::new(&c);
        let types = ["a100", "t4"];
        // 2 x 4 h = 8 GPU-hours: not above 8.
        assert_eq!(
            needed(&p, "vision", &gpus(2, Some("t4")), Some(4 * 3600), &types),
            None
        );
        let why = needed(&p, "vision", &gpus(3, Some("t4")), Some(4 * 3600), &types).unwrap();
        assert_eq!(
            why,
            "its 12.0 GPU-hours (GPUs x time limit) are more than account vision's approval_above_gpu_hours (8)"
        );
        let why = needed(&p, "vision", &gpus(1, Some("t4")), None, &types).unwrap();
        assert!(why.starts_with("it has no time limit, so"), "{why}");
        // research (above vision) reserves a100s.
        let why = needed(&p, "vision", &gpus(1, Some("a100")), Some(60), &types).unwrap();
        assert_eq!(
            why,
            "it asks for a100 GPUs, which account research keeps for approved jobs"
        );
        let why = needed(&p, "vision", &gpus(1, None), Some(60), &types).unwrap();
        assert!(
            why.contains("names no GPU type, so may run on a100"),
            "{why}"
        );
        assert_eq!(needed(&p, "open", &gpus(4, None), None, &types), None);
        assert_eq!(needed(&p, "vision", &gpus(0, None), None, &types), None);
    }

    #[test]
    fn coordinators_of_an_account_or_above_may_approve() {
        let c = config();
        let p = Policy::new(&c);
        assert!(may_approve(&p, "vision", "dan"));
        assert!(may_approve(&p, "vision", "carol"));
        assert!(!may_approve(&p, "research", "dan"));
        assert!(!may_approve(&p, "vision", "alice"));
        assert_eq!(coordinators(&p, "vision"), vec!["dan", "carol"]);
    }
}
