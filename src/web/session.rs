//! The portal's session: the token kept in an HttpOnly, SameSite=Strict
//! cookie; a CSRF token for every form, an HMAC of the session under a key
//! made at each start (so it needs no storage, and a restart only asks
//! users to reload a form); a check that a state-changing request comes
//! from this site (Origin, where the browser sends it); and a limit on
//! failed sign-ins per client and user signing in (`SignIn`).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::auth::SESSION_COOKIE;
use super::http::{Request, Response};

/// Failed sign-ins an address may make per window.
const LOGIN_FAILURES: u32 = 10;
const LOGIN_WINDOW: Duration = Duration::from_secs(60);

pub struct Sessions {
    key: ring::hmac::Key,
    failures: Mutex<HashMap<SignIn, (Instant, u32)>>,
}

/// Who tries to sign in, as far as the limit on failures goes: the
/// client's address (as a trusted proxy reports it in `X-Forwarded-For`,
/// else the connection's), and the user the token claims. Behind a proxy
/// every client shares its address: bad tokens for one user, or from one
/// client, must not lock everyone out.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SignIn {
    pub client: IpAddr,
    pub user: String,
}

impl SignIn {
    /// The sign-in `request` makes with `token`; `proxies`, the addresses
    /// whose `X-Forwarded-For` is believed (its last entry, the one the
    /// proxy added).
    pub fn of(request: &Request, token: &str, proxies: &[IpAddr]) -> SignIn {
        let forwarded = proxies
            .contains(&request.peer)
            .then(|| request.header("x-forwarded-for"))
            .flatten()
            .and_then(|list| list.rsplit(',').next())
            .and_then(|last| last.trim().parse().ok());
        SignIn {
            client: forwarded.unwrap_or(request.peer),
            user: crate::token::claimed_user(token).unwrap_or_default(),
        }
    }
}

impl Sessions {
    pub fn new() -> Sessions {
        let rng = ring::rand::SystemRandom::new();
        // A key only this process knows; its failure is no key at all.
        let key = ring::hmac::Key::generate(ring::hmac::HMAC_SHA256, &rng)
            .unwrap_or_else(|_| ring::hmac::Key::new(ring::hmac::HMAC_SHA256, b"unrandom"));
        Sessions {
            key,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// The CSRF token for forms of the session `token`.
    pub fn csrf(&self, token: &str) -> String {
        let tag = ring::hmac::sign(&self.key, token.as_bytes());
        tag.as_ref().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Whether `request`, a state change of session `token`, carries the
    /// session's CSRF token and, where the browser says, comes from here.
    pub fn check(
        &self,
        request: &Request,
        form: &[(String, String)],
        token: &str,
    ) -> Result<(), Response> {
        let sent = form
            .iter()
            .find(|(k, _)| k == "csrf")
            .map(|(_, v)| v.as_str());
        let expected = self.csrf(token);
        let same = sent.is_some_and(|s| constant_time_eq(s, &expected));
        if !same || !same_origin(request) {
            return Err(Response::html(
                403,
                "<!doctype html><title>Refused</title><p>This form did not come from this site, or has expired: go back, reload and try again.</p>".into(),
            ));
        }
        Ok(())
    }

    /// Whether `who` may try to sign in now.
    pub fn may_try(&self, who: &SignIn) -> bool {
        let mut failures = self.lock();
        failures.retain(|_, (since, _)| since.elapsed() < LOGIN_WINDOW);
        failures.get(who).is_none_or(|(_, n)| *n < LOGIN_FAILURES)
    }

    pub fn failed(&self, who: SignIn) {
        let mut failures = self.lock();
        let entry = failures.entry(who).or_insert((Instant::now(), 0));
        entry.1 += 1;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SignIn, (Instant, u32)>> {
        self.failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Default for Sessions {
    fn default() -> Sessions {
        Sessions::new()
    }
}

/// Whether two texts are equal, in a time that does not say where they
/// differ.
fn constant_time_eq(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// A request's Origin (or, without one, its Referer) names this host, or
/// the browser sent neither.
fn same_origin(request: &Request) -> bool {
    let Some(host) = request.header("host") else {
        return false;
    };
    let from = request
        .header("origin")
        .or_else(|| request.header("referer"));
    match from {
        None => true,
        Some(origin) => {
            let rest = origin
                .strip_prefix("https://")
                .or_else(|| origin.strip_prefix("http://"))
                .unwrap_or("");
            rest.split('/').next() == Some(host)
        }
    }
}

/// The cookie that keeps `token` for `max_age` seconds (0: forget it).
pub fn cookie(token: &str, max_age: i64, tls: bool) -> String {
    format!(
        "{SESSION_COOKIE}={token}; Max-Age={}; Path=/; HttpOnly; SameSite=Strict{}",
        max_age.max(0),
        if tls { "; Secure" } else { "" }
    )
}

/// The fields of a form body (`application/x-www-form-urlencoded`).
pub fn form(request: &Request) -> Vec<(String, String)> {
    form_urlencoded::parse(&request.body).into_owned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(headers: &[(&str, &str)]) -> Request {
        Request {
            method: "POST".into(),
            path: "/x".into(),
            query: Vec::new(),
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            body: Vec::new(),
            peer: IpAddr::from([127, 0, 0, 1]),
        }
    }

    #[test]
    fn a_form_passes_with_its_csrf_token_from_this_site_only() {
        let s = Sessions::new();
        let token = "tok";
        let good = vec![("csrf".to_string(), s.csrf(token))];
        let here = request(&[("host", "h:1"), ("origin", "http://h:1")]);
        assert!(s.check(&here, &good, token).is_ok());
        assert!(s.check(&here, &good, "other session").is_err());
        assert!(s.check(&here, &[], token).is_err());
        let elsewhere = request(&[("host", "h:1"), ("origin", "https://evil.example")]);
        assert_eq!(s.check(&elsewhere, &good, token).unwrap_err().status, 403);
    }

    #[test]
    fn failed_sign_ins_are_limited_per_client_and_user() {
        let s = Sessions::new();
        let who = |client: [u8; 4], user: &str| SignIn {
            client: IpAddr::from(client),
            user: user.into(),
        };
        for _ in 0..LOGIN_FAILURES {
            assert!(s.may_try(&who([10, 0, 0, 1], "")));
            s.failed(who([10, 0, 0, 1], ""));
        }
        assert!(!s.may_try(&who([10, 0, 0, 1], "")));
        assert!(s.may_try(&who([10, 0, 0, 2], "")));
        assert!(s.may_try(&who([10, 0, 0, 1], "alice")));
    }

    #[test]
    fn behind_a_trusted_proxy_the_client_is_the_forwarded_one() {
        let proxy = IpAddr::from([127, 0, 0, 1]);
        let mut r = request(&[("x-forwarded-for", "203.0.113.9, 198.51.100.7")]);
        assert_eq!(
            SignIn::of(&r, "x", &[proxy]).client,
            IpAddr::from([198, 51, 100, 7])
        );
        // From anyone else, the header counts for nothing.
        assert_eq!(SignIn::of(&r, "x", &[]).client, proxy);
        r.headers.clear();
        assert_eq!(SignIn::of(&r, "x", &[proxy]).client, proxy);
    }
}
