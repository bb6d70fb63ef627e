//! The `[standby]` table: this controller shares a pool with another,
//! and etcd decides which of them leads (`leader`).

use std::time::Duration;

use super::error::{ConfigError, Source};
use super::raw::RawStandby;
use super::types::{EtcdTls, Standby};

/// A leader's lease unless the table says otherwise.
const DEFAULT_LEASE: Duration = Duration::from_secs(10);

/// The `[standby]` table, checked.
pub(super) fn standby(
    raw: RawStandby,
    node_name: &str,
    src: &Source,
) -> Result<Standby, ConfigError> {
    let etcd = raw.etcd.get_ref().trim().trim_end_matches('/').to_string();
    let scheme = ["http://", "https://"]
        .into_iter()
        .find(|s| etcd.starts_with(s) && etcd.len() > s.len());
    let Some(scheme) = scheme else {
        return Err(src.fail(
            Some(raw.etcd.span()),
            "[standby] etcd",
            format!(
                "'{etcd}' is not etcd's client URL, such as https://10.0.0.1:2379 (or http:// without TLS)"
            ),
        ));
    };
    let tls = tls(&raw, scheme == "https://", src)?;
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
        tls,
    })
}

/// `etcd_ca`, `etcd_cert` and `etcd_key`: the authority with an https
/// URL (required), the client's certificate and key together or not at
/// all; none of them with plain HTTP, where they would be unused.
fn tls(raw: &RawStandby, https: bool, src: &Source) -> Result<Option<EtcdTls>, ConfigError> {
    let path = |v: &Option<toml::Spanned<String>>| {
        v.as_ref().map(|p| std::path::PathBuf::from(p.get_ref()))
    };
    let given = [
        ("etcd_ca", &raw.etcd_ca),
        ("etcd_cert", &raw.etcd_cert),
        ("etcd_key", &raw.etcd_key),
    ];
    if !https {
        if let Some((name, Some(v))) = given.iter().find(|(_, v)| v.is_some()) {
            return Err(src.fail(
                Some(v.span()),
                &format!("[standby] {name}"),
                "is for TLS: give etcd an https:// URL".to_string(),
            ));
        }
        return Ok(None);
    }
    let Some(ca) = path(&raw.etcd_ca) else {
        return Err(src.fail(
            Some(raw.etcd.span()),
            "[standby] etcd_ca",
            "an https:// etcd needs the authority its certificate is checked against (a PEM file)"
                .to_string(),
        ));
    };
    let client = match (path(&raw.etcd_cert), path(&raw.etcd_key)) {
        (Some(cert), Some(key)) => Some((cert, key)),
        (None, None) => None,
        (Some(_), None) | (None, Some(_)) => {
            let span = raw
                .etcd_cert
                .as_ref()
                .or(raw.etcd_key.as_ref())
                .map(|v| v.span());
            return Err(src.fail(
                span,
                "[standby] etcd_cert",
                "etcd_cert and etcd_key go together: this controller's certificate and its key"
                    .to_string(),
            ));
        }
    };
    Ok(Some(EtcdTls { ca, client }))
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
        assert_eq!(standby.tls, None);
        let tls = parse(
            "[standby]\netcd = \"https://e:2379\"\netcd_ca = \"/ca.pem\"\n\
             etcd_cert = \"/c.pem\"\netcd_key = \"/k.pem\"\n",
        )
        .unwrap()
        .standby
        .unwrap()
        .tls
        .unwrap();
        assert_eq!(tls.ca, std::path::PathBuf::from("/ca.pem"));
        assert_eq!(tls.client, Some(("/c.pem".into(), "/k.pem".into())));
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
            ("etcd = \"https://e:2379\"", "[standby] etcd_ca"),
            (
                "etcd = \"http://e:2379\"\netcd_ca = \"/ca.pem\"",
                "[standby] etcd_ca",
            ),
            (
                "etcd = \"https://e:2379\"\netcd_ca = \"/ca.pem\"\netcd_key = \"/k.pem\"",
                "[standby] etcd_cert",
            ),
        ] {
            let error = parse(&format!("[standby]\n{table}\n"))
                .unwrap_err()
                .to_string();
            assert!(error.contains(field), "{table}: {error}");
        }
    }
}
