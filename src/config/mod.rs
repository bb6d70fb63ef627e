//! `ysched.toml`: parsing and validating the configuration into typed structs.
//!
//! Every error names the file, the line and the key, so that a bad reload can
//! be refused with a message an administrator can act on.
//!
//! The files: the raw TOML ([`raw`]), the checks ([`validate`], with a
//! file per section: [`gpus`], [`accounts`], [`qos`]), the result
//! ([`types`]), the errors ([`error`]).

mod accounts;
mod containers;
mod error;
mod gpus;
mod interactive;
mod pool;
mod qos;
mod raw;
mod standby;
mod types;
mod validate;
mod values;
mod web;

use std::path::{Path, PathBuf};

pub use error::ConfigError;
use error::{key_at, line_of};
pub use gpus::expand_device_pattern;
use raw::RawConfig;
pub use types::*;

impl Config {
    /// Reads and validates a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            path: path.to_path_buf(),
            line: None,
            key: None,
            message: format!("cannot read: {e}"),
        })?;
        Config::parse(&text, path)
    }
    /// Parses config text; `path` is used in messages only.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| {
            let line = e.span().map(|s| line_of(text, s.start));
            ConfigError {
                path: path.to_path_buf(),
                line,
                key: e.span().and_then(|s| key_at(text, s.start)),
                message: e.message().trim().to_string(),
            }
        })?;
        raw.validate(text, path)
    }
    /// The built-in config used when no file exists (personal mode, tests).
    pub fn builtin(path: &Path) -> Config {
        Config::parse("", path).expect("the empty config is valid")
    }
}

/// Finds the config file as every command does: `$YS_CONF`, else
/// `/etc/ysched/ysched.toml`, else a pool node's `/etc/ysched/ysnoded.toml`
/// (commands there pass submissions on through `ysnoded`), else the
/// user's `~/.config/ysched/ysched.toml` (personal mode). Returns the path
/// and whether it exists.
pub fn locate() -> (PathBuf, bool) {
    if let Some(path) = std::env::var_os("YS_CONF").filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        let exists = path.exists();
        return (path, exists);
    }
    let system = PathBuf::from(DEFAULT_CONFIG_PATH);
    if system.exists() {
        return (system, true);
    }
    let node = PathBuf::from(NODE_CONFIG_PATH);
    if node.exists() {
        return (node, true);
    }
    let user_dir = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")));
    if let Some(dir) = user_dir {
        let personal = dir.join("ysched").join("ysched.toml");
        if personal.exists() {
            return (personal, true);
        }
    }
    (system, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("/etc/ysched/ysched.toml"))
    }

    #[test]
    fn empty_config_has_defaults() {
        let c = parse("").unwrap();
        assert_eq!(c.spool_dir, PathBuf::from(DEFAULT_SPOOL_DIR));
        assert_eq!(c.default_qos, "medium");
        assert_eq!(c.qos.len(), 4);
        assert_eq!(c.kill_wait, 30);
        assert_eq!(c.accounts_for("anyone"), vec!["default"]);
        assert!(c.gpus.is_empty());
    }

    #[test]
    fn gpus_accounts_and_qos() {
        let c = parse(
            r#"
spool_dir = "/tmp/spool"
admins = ["carol"]
default_qos = "urgent"
[[gpus]]
type = "a100"
memory = "80GiB"
devices = "/dev/nvidia[0-3]"
[[gpus]]
type = "rtx3090"
count = 2
memory = "24G"
[[accounts]]
name = "vision"
users = ["alice", "bob"]
[[accounts]]
name = "nlp"
users = ["bob"]
[[qos]]
name = "urgent"
priority = 10
[[qos]]
name = "normal"
priority = 1
"#,
        )
        .unwrap();
        assert_eq!(c.gpus[0].count, 4);
        assert_eq!(c.gpus[0].memory_mb, 80 * 1024);
        assert_eq!(c.gpus[0].devices[3], PathBuf::from("/dev/nvidia3"));
        assert_eq!(c.gpus[1].count, 2);
        assert_eq!(c.accounts_for("bob"), vec!["vision", "nlp"]);
        assert!(c.accounts_for("eve").is_empty());
        assert_eq!(c.default_qos, "urgent");
        assert!(c.is_admin(1234, "carol"));
        assert!(c.is_admin(0, "root"));
        assert!(!c.is_admin(1000, "alice"));
    }

    #[test]
    fn qos_tables_without_medium_must_name_the_default() {
        let two =
            "[[qos]]\nname = \"critical\"\npriority = 300\n[[qos]]\nname = \"low\"\npriority = 0\n";
        let e = parse(two).unwrap_err().to_string();
        assert!(
            e.contains("default_qos") && e.contains("critical, low"),
            "{e}"
        );
        let c = parse(&format!("default_qos = \"low\"\n{two}")).unwrap();
        assert_eq!(c.default_qos, "low");
    }

    #[test]
    fn errors_name_line_and_key() {
        let e = parse(
            "spool_dir = \"/x\"\n[[gpus]]\ntype = \"a100\"\ncount = \"four\"\nmemory = \"8G\"\n",
        )
        .unwrap_err();
        assert_eq!(e.line, Some(4), "{e}");
        assert_eq!(e.key.as_deref(), Some("count"), "{e}");

        let e = parse("[[gpus]]\ntype = \"a100\"\ncount = 2\nmemory = \"lots\"\n").unwrap_err();
        assert_eq!(e.line, Some(4));
        assert!(e.to_string().contains("invalid memory size 'lots'"), "{e}");

        let e = parse("spool_dir = \"/x\"\nspoll = 3\n").unwrap_err();
        assert_eq!(e.line, Some(2));
        assert!(e.to_string().contains("unknown field `spoll`"), "{e}");

        let e = parse("spool_dir = \"/x\"\nmetrics_listen = \"localhost\"\n").unwrap_err();
        assert_eq!(e.line, Some(2));
        assert!(
            e.to_string()
                .contains("'localhost' is not an address and port"),
            "{e}"
        );
        let c = parse("metrics_listen = \"9464\"\n").unwrap();
        assert_eq!(c.metrics_listen, Some(([127, 0, 0, 1], 9464).into()));

        let e = parse("default_qos = \"urgent\"\n").unwrap_err();
        assert!(
            e.to_string()
                .contains("unknown QoS 'urgent' (known: critical, high, medium, low)"),
            "{e}"
        );

        let e = parse("[[gpus]]\ntype = \"a100\"\ncount = 3\nmemory = \"8G\"\ndevices = \"/dev/nvidia[0-3]\"\n").unwrap_err();
        assert!(
            e.to_string().contains("count = 3 but devices names 4"),
            "{e}"
        );

        let e = parse("default_time = \"forever\"\n").unwrap_err();
        assert_eq!(e.line, Some(1));

        let e = parse("cgroups = \"v3\"\n").unwrap_err();
        assert_eq!(e.line, Some(1));
        assert!(
            e.to_string()
                .contains("unknown variant `v3`, expected one of `auto`, `v1`, `v2`, `off`"),
            "{e}"
        );

        let e = parse("spool_dir = \"relative/spool\"\n").unwrap_err();
        assert!(e.to_string().contains("absolute"), "{e}");
    }

    #[test]
    fn account_trees_shares_and_weights() {
        let c = parse(
            "[[accounts]]\nname = \"research\"\nshares = 3\n[[accounts]]\nname = \"vision\"\nparent = \"research\"\nshares = 2.5\nusers = [\"alice\"]\n[fairshare]\nalgorithm = \"classic\"\nhalf_life = \"1-00:00:00\"\nreset = \"monthly\"\n[priority]\nweight_age = 5\nmax_age = \"2-0\"\n",
        )
        .unwrap();
        assert_eq!(c.accounts[1].parent.as_deref(), Some("research"));
        assert_eq!(c.accounts[1].shares, 2.5);
        assert_eq!(
            c.fairshare.algorithm,
            crate::model::policy::Algorithm::Classic
        );
        assert_eq!(c.fairshare.half_life, Some(86_400));
        assert_eq!(c.fairshare.reset, UsageReset::Monthly);
        assert_eq!(c.priority.age, 5);
        assert_eq!(c.priority.max_age, 2 * 86_400);
        assert_eq!(
            c.priority.fairshare, 10_000,
            "defaults for what is not given"
        );
        let d = parse("").unwrap();
        assert_eq!(d.fairshare.half_life, Some(7 * 86_400));
        assert_eq!(
            d.fairshare.algorithm,
            crate::model::policy::Algorithm::FairTree
        );
    }

    #[test]
    fn bad_trees_shares_and_weights_name_line_and_key() {
        let e = parse("[[accounts]]\nname = \"a\"\nshares = -2\n").unwrap_err();
        assert_eq!((e.line, e.key.as_deref()), (Some(3), Some("shares")), "{e}");
        let e = parse("[[accounts]]\nname = \"a\"\nshares = \"lots\"\n").unwrap_err();
        assert_eq!(e.line, Some(3), "{e}");
        let e = parse("[[accounts]]\nname = \"a\"\nparent = \"nowhere\"\n").unwrap_err();
        assert_eq!((e.line, e.key.as_deref()), (Some(3), Some("parent")), "{e}");
        assert!(
            e.to_string().contains("unknown parent account 'nowhere'"),
            "{e}"
        );
        let e = parse("[[accounts]]\nname = \"a\"\nparent = \"b\"\n[[accounts]]\nname = \"b\"\nparent = \"a\"\n").unwrap_err();
        assert!(e.to_string().contains("accounts form a cycle"), "{e}");
        let e = parse("[[qos]]\nname = \"q\"\npriority = 1\nusage_factor = -1\n").unwrap_err();
        assert_eq!(
            (e.line, e.key.as_deref()),
            (Some(4), Some("usage_factor")),
            "{e}"
        );
        let e =
            parse("[[gpus]]\ntype = \"a100\"\ncount = 1\nmemory = \"8G\"\n[billing]\nv100 = 3\n")
                .unwrap_err();
        assert_eq!(e.line, Some(6), "{e}");
        assert!(e.to_string().contains("[billing] names GPU type 'v100', which no [[gpus]] table declares (declared: a100)"), "{e}");
        let e = parse("[priority]\nweight_age = -3\n").unwrap_err();
        assert_eq!(
            (e.line, e.key.as_deref()),
            (Some(2), Some("weight_age")),
            "{e}"
        );
        let e = parse("[fairshare]\nalgorithm = \"fifo\"\n").unwrap_err();
        assert!(e.to_string().contains("unknown variant `fifo`"), "{e}");
        for (value, says) in [
            ("-1", "not -1"),
            ("\"150%\"", "from 0% to 100%, not \"150%\""),
            ("\"half\"", "not \"half\""),
            ("true", "not true"),
        ] {
            let e = parse(&format!(
                "[[qos]]\nname = \"q\"\npriority = 1\nreserve = {value}\n"
            ))
            .unwrap_err();
            assert_eq!(
                (e.line, e.key.as_deref()),
                (Some(4), Some("reserve")),
                "{e}"
            );
            assert!(e.to_string().contains(says), "{e}");
        }
        let c = parse("[[qos]]\nname = \"q\"\npriority = 1\nreserve = \"12.5%\"\n").unwrap();
        assert_eq!(c.qos[0].reserve.map(|r| r.gpus(16)), Some(2));
        let e = parse("[[gpus]]\ntype = \"a100\"\ncount = 1\nmemory = \"8G\"\n[[accounts]]\nname = \"a\"\napproval_gpu_types = [\"h100\"]\n").unwrap_err();
        assert_eq!(
            (e.line, e.key.as_deref()),
            (Some(7), Some("approval_gpu_types")),
            "{e}"
        );
        let e = parse("[[accounts]]\nname = \"a\"\napproval_above_gpu_hours = -4\n").unwrap_err();
        assert_eq!(
            (e.line, e.key.as_deref()),
            (Some(3), Some("approval_above_gpu_hours")),
            "{e}"
        );
    }

    #[test]
    fn device_patterns() {
        assert_eq!(
            expand_device_pattern("/dev/nvidia[0,2-3]").unwrap().len(),
            3
        );
        assert_eq!(
            expand_device_pattern("/dev/nvidia0").unwrap(),
            vec![PathBuf::from("/dev/nvidia0")]
        );
        assert!(expand_device_pattern("/dev/nvidia[0-").is_err());
        assert!(expand_device_pattern("/dev/nvidia[3-1]").is_err());
        assert!(expand_device_pattern("/dev/nvidia[0,0]").is_err());
    }
}
