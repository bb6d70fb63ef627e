//! The `[pool]` table: several servers under one controller. On the
//! controller, `listen` turns the pool on (off by default: no port is
//! opened); on a node, `controller` may say where to connect (the join
//! line says it otherwise, and the node remembers it).

use toml::Spanned;

use super::error::{ConfigError, Source};
use super::raw::RawPool;
use super::types::{
    Pool, DEFAULT_CERTIFICATE_LIFETIME, DEFAULT_LEASE_SECS, DEFAULT_STEP_PORTS,
    DEFAULT_TOKEN_LIFETIME_SECS,
};
use super::values::parse_listen;

/// The `[pool]` table, checked.
pub(super) fn pool(raw: RawPool, src: &Source) -> Result<Pool, ConfigError> {
    let listen = match raw.listen {
        Some(l) => Some(
            parse_listen("listen", l.get_ref())
                .map_err(|e| src.fail(Some(l.span()), "listen", e.to_string()))?,
        ),
        None => None,
    };
    let lease = duration(raw.lease.as_ref(), "lease", src)?
        .unwrap_or(std::time::Duration::from_secs_f64(DEFAULT_LEASE_SECS));
    if !(1..=3_600).contains(&lease.as_secs()) {
        let span = raw.lease.as_ref().map(|l| l.span());
        return Err(src.fail(
            span,
            "lease",
            "must be from 1s to 1h: a node unheard for this long is down".to_string(),
        ));
    }
    let token_lifetime = duration(raw.token_lifetime.as_ref(), "token_lifetime", src)?
        .map_or(DEFAULT_TOKEN_LIFETIME_SECS, |d| d.as_secs().max(1));
    let certificate_lifetime = certificate_lifetime(raw.certificate_lifetime.as_ref(), lease, src)?;
    Ok(Pool {
        listen,
        advertise: address(raw.advertise, "advertise", src)?,
        lease,
        token_lifetime_secs: token_lifetime,
        certificate_lifetime,
        controller: address(raw.controller, "controller", src)?,
        step_ports: step_ports(raw.step_ports.as_ref(), src)?,
        frozen_limit: duration(raw.frozen_limit.as_ref(), "frozen_limit", src)?
            .unwrap_or(super::types::DEFAULT_FROZEN_LIMIT)
            .max(lease),
        trust_nodes: raw.trust_nodes.unwrap_or(false),
    })
}

/// `FROM-TO`: at least 1024 ports over 1023, so that a port chosen at
/// random is not guessed.
fn step_ports(value: Option<&Spanned<String>>, src: &Source) -> Result<(u16, u16), ConfigError> {
    let Some(v) = value else {
        return Ok(DEFAULT_STEP_PORTS);
    };
    let text = v.get_ref().trim();
    let range = text
        .split_once('-')
        .and_then(|(a, b)| Some((a.trim().parse::<u16>().ok()?, b.trim().parse::<u16>().ok()?)));
    match range {
        Some((from, to)) if from >= 1024 && to >= from && to - from >= 1023 => Ok((from, to)),
        _ => Err(src.fail(
            Some(v.span()),
            "step_ports",
            format!("'{text}' is not FROM-TO with at least 1024 ports from 1024 up, such as 20000-32767"),
        )),
    }
}

/// How long node certificates last: at least a few leases (a node renews
/// at a third left, between heartbeats), at most ten years.
fn certificate_lifetime(
    value: Option<&Spanned<String>>,
    lease: std::time::Duration,
    src: &Source,
) -> Result<std::time::Duration, ConfigError> {
    let Some(lifetime) = duration(value, "certificate_lifetime", src)? else {
        return Ok(DEFAULT_CERTIFICATE_LIFETIME);
    };
    let least = (lease * 3).max(std::time::Duration::from_secs(10));
    if lifetime < least || lifetime.as_secs() > 10 * 366 * 86_400 {
        return Err(src.fail(
            value.map(|v| v.span()),
            "certificate_lifetime",
            format!(
                "must be from {} (three leases) to 10 years: nodes renew their certificates when a third is left",
                humantime::format_duration(least)
            ),
        ));
    }
    Ok(lifetime)
}

/// `30s`, `1m30s`, `1h`: what humantime reads.
pub(super) fn duration(
    value: Option<&Spanned<String>>,
    key: &str,
    src: &Source,
) -> Result<Option<std::time::Duration>, ConfigError> {
    let Some(v) = value else { return Ok(None) };
    humantime::parse_duration(v.get_ref().trim())
        .map(Some)
        .map_err(|e| {
            src.fail(
                Some(v.span()),
                key,
                format!(
                    "'{}' is not a duration such as 30s, 5m or 1h ({e})",
                    v.get_ref()
                ),
            )
        })
}

/// `HOST:PORT`, with a port.
/// `HOST:PORT`, or several separated by commas: the controllers of a
/// pool with a standby (`ctl1:6820,ctl2:6820`), which a node tries in
/// turn to find the one that leads.
fn address(
    value: Option<Spanned<String>>,
    key: &str,
    src: &Source,
) -> Result<Option<String>, ConfigError> {
    let Some(v) = value else { return Ok(None) };
    let mut addresses = Vec::new();
    for part in v.get_ref().split(',') {
        let text = part.trim();
        let port_ok = text.rsplit_once(':').is_some_and(|(host, port)| {
            !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0)
        });
        if !port_ok || text.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(src.fail(
                Some(v.span()),
                key,
                format!(
                    "'{text}' is not HOST:PORT, such as ctl.example.org:6820 \
                     (several, for two controllers: ctl1:6820,ctl2:6820)"
                ),
            ));
        }
        addresses.push(text);
    }
    Ok(Some(addresses.join(",")))
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use std::path::Path;

    fn pool(keys: &str) -> Result<Config, crate::config::ConfigError> {
        Config::parse(
            &format!("[pool]\nlisten = \"127.0.0.1:6820\"\n{keys}"),
            Path::new("x.toml"),
        )
    }

    #[test]
    fn leases_and_certificate_lifetimes_have_bounds() {
        let ok = pool("lease = \"3s\"\ncertificate_lifetime = \"30d\"\n").unwrap();
        assert_eq!(ok.pool.certificate_lifetime.as_secs(), 30 * 86_400);
        let e = pool("lease = \"10s\"\ncertificate_lifetime = \"20s\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("certificate_lifetime") && e.contains("from 30s"),
            "{e}"
        );
        let e = pool("certificate_lifetime = \"soon\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("is not a duration"), "{e}");
        let e = pool("lease = \"0s\"\n").unwrap_err().to_string();
        assert!(e.contains("must be from 1s to 1h"), "{e}");
    }

    #[test]
    fn controllers_are_one_address_or_several() {
        let one = pool("controller = \"ctl:6820\"\n").unwrap();
        assert_eq!(one.pool.controller.as_deref(), Some("ctl:6820"));
        let two = pool("controller = \"ctl1:6820, 10.0.0.2:6820\"\n").unwrap();
        assert_eq!(
            two.pool.controller.as_deref(),
            Some("ctl1:6820,10.0.0.2:6820")
        );
        let e = pool("advertise = \"ctl1:6820,ctl2\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("advertise") && e.contains("'ctl2' is not HOST:PORT"),
            "{e}"
        );
    }

    #[test]
    fn step_ports_are_a_wide_range_of_unprivileged_ports() {
        assert_eq!(pool("").unwrap().pool.step_ports, (20_000, 32_767));
        let ok = pool("step_ports = \"40000-49999\"\n").unwrap();
        assert_eq!(ok.pool.step_ports, (40_000, 49_999));
        for bad in ["100-5000", "40000-40010", "5000", "b-a", "50000-40000"] {
            let e = pool(&format!("step_ports = \"{bad}\"\n"))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("step_ports") && e.contains("FROM-TO"),
                "{bad}: {e}"
            );
        }
    }
}
