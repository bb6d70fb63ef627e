//! The `[standby]` table: this controller shares a pool with another,
//! and etcd decides which of them leads (`leader`).

use std::time::Duration;

use super::error::{ConfigError, Source};
use super::raw::RawStandby;
use super::types::Standby;

/// A leader's lease unless the table says otherwise.
const DEFAULT_LEASE: Duration = Duration::from_secs(10);

/// The `[standby]` table, checked.
pub(super) fn standby(
    raw: RawStandby,
    node_name: &str,
    src: &Source,
) -> Result<Standby, ConfigError> {
    let etcd = raw.etcd.get_ref().trim().trim_end_matches('/').to_string();
    if !etcd.starts_with("http://") || etcd.len() <= "http://".len() {
        return Err(src.fail(
            Some(raw.etcd.span()),
            "[standby] etcd",
            format!("'{etcd}' is not etcd's client URL, such as http://10.0.0.1:2379"),
        ));
    }
    let lease =
        super::pool::duration(raw.lease.as_ref(), "[standby] lease", src)?.unwrap_or(DEFAULT_LEASE);
    // etcd grants nothing under its own minimum (about 2 s at its
    // defaults); a leader proves its lease three times a lease.
    if !(3..=300).contains(&lease.as_secs()) {
        return Err(src.fail(
            raw.lease.as_ref().map(|l| l.span()),
            "[standby] lease",
            "must be from 3s to 5m: a standby takes over about this long after the leader stops"
                .to_string(),
        ));
    }
    let key = match raw.key {
        Some(k) if !k.get_ref().starts_with('/') => {
            return Err(src.fail(
                Some(k.span()),
                "[standby] key",
                format!("'{}' is not a key path such as /ysched/leader", k.get_ref()),
            ))
        }
        Some(k) => k.into_inner(),
        None => "/ysched/leader".to_string(),
    };
    Ok(Standby {
        etcd,
        name: raw.name.unwrap_or_else(|| node_name.to_string()),
        key,
        lease,
    })
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    fn parse(table: &str) -> Result<Config, crate::config::ConfigError> {
        let text = format!("spool_dir = \"/tmp/ys\"\nnode_name = \"ctl-a\"\n{table}");
        Config::parse(&text, std::path::Path::new("ysched.toml"))
    }

    #[test]
    fn a_standby_table_names_etcd_and_defaults_the_rest() {
        let config = parse("[standby]\netcd = \"http://10.0.0.1:2379/\"\n").unwrap();
        let standby = config.standby.unwrap();
        assert_eq!(standby.etcd, "http://10.0.0.1:2379");
        assert_eq!(standby.name, "ctl-a");
        assert_eq!(standby.key, "/ysched/leader");
        assert_eq!(standby.lease.as_secs(), 10);
        assert!(parse("").unwrap().standby.is_none());
    }

    #[test]
    fn a_bad_standby_table_is_refused_naming_the_field() {
        for (table, field) in [
            ("etcd = \"10.0.0.1:2379\"", "[standby] etcd"),
            (
                "etcd = \"http://e:2379\"\nlease = \"1s\"",
                "[standby] lease",
            ),
            (
                "etcd = \"http://e:2379\"\nkey = \"leader\"",
                "[standby] key",
            ),
            ("etcd = \"http://e:2379\"\nterm = 3", "term"),
        ] {
            let error = parse(&format!("[standby]\n{table}\n"))
                .unwrap_err()
                .to_string();
            assert!(error.contains(field), "{table}: {error}");
        }
    }
}
