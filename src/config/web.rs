//! The `[web]` table: `yswebd`, the JSON API and the portal. Off unless
//! `listen` is set; HTTPS when a certificate and its key are given; a
//! reverse proxy's user header believed only from the listed addresses.

use toml::Spanned;

use super::error::{ConfigError, Source};
use super::raw::RawWeb;
use super::types::Web;
use super::values::parse_listen;

/// The `[web]` table, checked.
pub(super) fn web(raw: RawWeb, src: &Source) -> Result<Web, ConfigError> {
    let defaults = Web::default();
    let listen = match &raw.listen {
        Some(l) => Some(
            parse_listen("listen", l.get_ref())
                .map_err(|e| src.fail(Some(l.span()), "[web] listen", e.to_string()))?,
        ),
        None => None,
    };
    let tls = match (raw.certificate, raw.key) {
        (Some(c), Some(k)) => Some((c.into_inner(), k.into_inner())),
        (None, None) => None,
        (Some(c), None) => return Err(half_tls(c.span(), "certificate", "key", src)),
        (None, Some(k)) => return Err(half_tls(k.span(), "key", "certificate", src)),
    };
    let user = raw.user.map(|u| checked_user(u, src)).transpose()?;
    let proxy_header = raw
        .proxy_header
        .map(|h| checked_header(h, src))
        .transpose()?;
    let proxy_addresses = raw
        .proxy_addresses
        .into_iter()
        .map(|a| {
            a.get_ref().trim().parse().map_err(|_| {
                let message = format!("'{}' is not an IP address", a.get_ref());
                src.fail(Some(a.span()), "[web] proxy_addresses", message)
            })
        })
        .collect::<Result<Vec<std::net::IpAddr>, _>>()?;
    let proxy_secret_file = match raw.proxy_secret_file {
        Some(f) if !f.get_ref().is_absolute() => {
            return Err(src.fail(
                Some(f.span()),
                "[web] proxy_secret_file",
                format!("'{}' is not an absolute path", f.get_ref().display()),
            ))
        }
        f => f.map(Spanned::into_inner),
    };
    if proxy_header.is_some()
        && (proxy_addresses.is_empty() || user.is_none() || proxy_secret_file.is_none())
    {
        return Err(src.fail(
            None,
            "[web] proxy_header",
            "needs proxy_addresses (the proxies believed), proxy_secret_file (the secret the proxy proves itself with: every local account shares the proxy's address) and user (the account yswebd runs as, which makes the tokens for the users the proxy names)".into(),
        ));
    }
    Ok(Web {
        listen,
        tls,
        user,
        proxy_header,
        proxy_addresses,
        proxy_secret_file,
        max_connections: bounded(raw.max_connections, "max_connections", 1..=4_096, src)?
            .unwrap_or(defaults.max_connections),
        max_body: bounded(raw.max_body_kb, "max_body_kb", 1..=65_536, src)?
            .map_or(defaults.max_body, |kb| kb << 10),
    })
}

fn half_tls(span: std::ops::Range<usize>, has: &str, lacks: &str, src: &Source) -> ConfigError {
    src.fail(
        Some(span),
        &format!("[web] {has}"),
        format!("{has} without {lacks}: HTTPS needs both (PEM files), plain HTTP neither"),
    )
}

fn checked_user(user: Spanned<String>, src: &Source) -> Result<String, ConfigError> {
    let name = user.get_ref().trim();
    if name.is_empty() || name == "root" || !name.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(src.fail(
            Some(user.span()),
            "[web] user",
            format!("'{name}' is not an account yswebd may run as (a user name, not root)"),
        ));
    }
    Ok(name.to_string())
}

/// An HTTP header name (RFC 9110 token characters).
fn checked_header(header: Spanned<String>, src: &Source) -> Result<String, ConfigError> {
    let name = header.get_ref().trim();
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if name.is_empty() || !name.bytes().all(token) {
        return Err(src.fail(
            Some(header.span()),
            "[web] proxy_header",
            format!("'{name}' is not an HTTP header name such as X-Remote-User"),
        ));
    }
    Ok(name.to_ascii_lowercase())
}

fn bounded(
    value: Option<Spanned<i64>>,
    key: &str,
    range: std::ops::RangeInclusive<i64>,
    src: &Source,
) -> Result<Option<usize>, ConfigError> {
    let Some(v) = value else { return Ok(None) };
    if !range.contains(v.get_ref()) {
        return Err(src.fail(
            Some(v.span()),
            &format!("[web] {key}"),
            format!(
                "{} is out of range: from {} to {}",
                v.get_ref(),
                range.start(),
                range.end()
            ),
        ));
    }
    Ok(Some(*v.get_ref() as usize))
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    fn load(web: &str) -> Result<Config, crate::config::ConfigError> {
        let text = format!("[web]\n{web}\n");
        Config::parse(&text, std::path::Path::new("/etc/ysched/ysched.toml"))
    }

    #[test]
    fn off_by_default_and_read_when_set() {
        let off = load("").unwrap();
        assert_eq!(off.web.listen, None);
        let on = load("listen = \"127.0.0.1:6820\"\nmax_body_kb = 64").unwrap();
        assert_eq!(on.web.listen.unwrap().port(), 6820);
        assert_eq!(on.web.max_body, 64 << 10);
    }

    #[test]
    fn bad_values_are_named() {
        let e = load("certificate = \"/a.pem\"").unwrap_err().to_string();
        assert!(
            e.contains("[web] certificate") && e.contains("without key"),
            "{e}"
        );
        let e = load("proxy_header = \"X-Remote-User\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("needs proxy_addresses"), "{e}");
        let e = load(
            "proxy_header = \"X-Remote-User\"\nproxy_addresses = [\"127.0.0.1\"]\nuser = \"w\"",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("proxy_secret_file"), "{e}");
        let e = load("proxy_secret_file = \"secret\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("not an absolute path"), "{e}");
        let e = load("proxy_header = \"X Bad\"\nproxy_addresses = [\"127.0.0.1\"]\nuser = \"w\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("not an HTTP header name"), "{e}");
        let e = load("user = \"root\"").unwrap_err().to_string();
        assert!(e.contains("not root"), "{e}");
        let e = load("max_connections = 0").unwrap_err().to_string();
        assert!(
            e.contains("[web] max_connections") && e.contains("line 2"),
            "{e}"
        );
        let e = load("proxy_addresses = [\"nowhere\"]")
            .unwrap_err()
            .to_string();
        assert!(e.contains("not an IP address"), "{e}");
    }
}
