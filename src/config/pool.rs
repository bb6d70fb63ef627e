//! The `[pool]` table: several servers under one controller. On the
//! controller, `listen` turns the pool on (off by default: no port is
//! opened); on a node, `controller` may say where to connect (the join
//! line says it otherwise, and the node remembers it).

use toml::Spanned;

use super::error::{ConfigError, Source};
use super::raw::RawPool;
use super::types::{Pool, DEFAULT_LEASE_SECS, DEFAULT_TOKEN_LIFETIME_SECS};
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
    Ok(Pool {
        listen,
        advertise: address(raw.advertise, "advertise", src)?,
        lease,
        token_lifetime_secs: token_lifetime,
        controller: address(raw.controller, "controller", src)?,
    })
}

/// `30s`, `1m30s`, `1h`: what humantime reads.
fn duration(
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
fn address(
    value: Option<Spanned<String>>,
    key: &str,
    src: &Source,
) -> Result<Option<String>, ConfigError> {
    let Some(v) = value else { return Ok(None) };
    let text = v.get_ref().trim();
    let port_ok = text
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0));
    if !port_ok || text.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(src.fail(
            Some(v.span()),
            key,
            format!("'{text}' is not HOST:PORT, such as ctl.example.org:6820"),
        ));
    }
    Ok(Some(text.to_string()))
}
