//! Who leads, when two controllers share a pool: etcd decides, not
//! ysched. A controller that wants to lead takes a lease from etcd and
//! puts the leader key with it only if the key does not exist (one
//! transaction); the key's create revision is the leader's term, which
//! etcd never hands out twice and only ever raises. The key goes when
//! its lease does, so a leader that stops proving its lease (killed,
//! frozen, cut off) is replaced one lease later. Kubernetes' and
//! Patroni's elections work the same way.
//!
//! A leader acts only while it has proven its lease within a deadline
//! shorter than the lease, measured on its own monotonic clock
//! ([`may_act`]): one frozen past its lease finds, when it runs again,
//! that it may not act before it can ask etcd whether it still leads.
//!
//! This speaks etcd's v3 JSON gateway (HTTP/1.1, keys and values in
//! base64, 64-bit numbers as strings), which etcd serves on its client
//! port: no gRPC stack.

use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};

/// What went wrong asking etcd.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("etcd at {endpoint}: {why}")]
    Unreachable { endpoint: String, why: String },
    #[error("etcd at {endpoint} answered {status} to {path}: {body}")]
    Refused {
        endpoint: String,
        path: &'static str,
        status: u16,
        body: String,
    },
    #[error("TLS towards etcd: {0}")]
    Tls(String),
    #[error("etcd at {endpoint} answered {path} with {what}")]
    Malformed {
        endpoint: String,
        path: &'static str,
        what: String,
    },
}

/// A leader's term: the leader key's create revision in etcd.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Term(pub i64);

/// An etcd lease this controller holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseId(pub i64);

/// What a campaign found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// This controller leads, in `term`, for as long as its lease lives.
    Leads { term: Term },
    /// `leader` does, in `term`.
    Follows { leader: String, term: Term },
}

/// etcd, as a client of its JSON gateway.
#[derive(Clone)]
pub struct Engine {
    endpoint: String,
    agent: ureq::Agent,
}

impl Engine {
    /// etcd at `endpoint` (`http://10.0.0.1:2379`); each request gives up
    /// after `timeout`, so that a leader cut off from etcd learns it in
    /// time to stop acting.
    pub fn new(endpoint: &str, timeout: Duration) -> Engine {
        Engine {
            endpoint: endpoint.trim_end_matches('/').to_string(),
            agent: ureq::AgentBuilder::new().timeout(timeout).build(),
        }
    }

    /// The same over TLS (`https://`): etcd's certificate checked against
    /// `authority_pem` alone, and this controller's certificate and key
    /// (`client`, PEM) presented when given, for etcd's client
    /// certificate authentication.
    pub fn with_tls(
        endpoint: &str,
        timeout: Duration,
        authority_pem: &[u8],
        client: Option<(&[u8], &[u8])>,
    ) -> Result<Engine, EngineError> {
        let config = tls_config(authority_pem, client)?;
        Ok(Engine {
            endpoint: endpoint.trim_end_matches('/').to_string(),
            agent: ureq::AgentBuilder::new()
                .timeout(timeout)
                .tls_config(config)
                .build(),
        })
    }

    /// A new lease of `ttl_secs` seconds.
    pub fn grant(&self, ttl_secs: u32) -> Result<LeaseId, EngineError> {
        let answer = self.call("/v3/lease/grant", json!({ "TTL": ttl_secs }))?;
        self.number(&answer, "/v3/lease/grant", &["ID"])
            .map(LeaseId)
    }

    /// Leads if no one does: puts `key` = `name` with `lease` only if the
    /// key does not exist; else says who leads.
    pub fn campaign(&self, key: &str, name: &str, lease: LeaseId) -> Result<Outcome, EngineError> {
        const PATH: &str = "/v3/kv/txn";
        let key64 = encode(key);
        let answer = self.call(
            PATH,
            json!({
                "compare": [{
                    "key": key64,
                    "target": "CREATE",
                    "result": "EQUAL",
                    "create_revision": "0",
                }],
                "success": [{ "request_put": {
                    "key": key64,
                    "value": encode(name),
                    "lease": lease.0.to_string(),
                }}],
                "failure": [{ "request_range": { "key": key64 } }],
            }),
        )?;
        if answer.get("succeeded").and_then(Value::as_bool) == Some(true) {
            // The put is the transaction's only write: its revision is
            // the key's create revision.
            let term = self.number(&answer, PATH, &["header", "revision"])?;
            return Ok(Outcome::Leads { term: Term(term) });
        }
        let kv = answer
            .pointer("/responses/0/response_range/kvs/0")
            .ok_or_else(|| self.malformed(PATH, "no leader key after a failed compare"))?;
        Ok(Outcome::Follows {
            leader: decode(kv.get("value").and_then(Value::as_str).unwrap_or_default())
                .unwrap_or_default(),
            term: Term(self.number(kv, PATH, &["create_revision"])?),
        })
    }

    /// Proves `lease` alive for another lease: the seconds it has left,
    /// `None` when it is gone (expired or revoked).
    pub fn keep_alive(&self, lease: LeaseId) -> Result<Option<u32>, EngineError> {
        const PATH: &str = "/v3/lease/keepalive";
        let answer = self.call(PATH, json!({ "ID": lease.0.to_string() }))?;
        // The gateway streams keep-alive answers: one object, under "result".
        let result = answer.get("result").unwrap_or(&answer);
        // A lease that is gone comes back with no TTL (zero omitted).
        Ok(match self.number(result, PATH, &["TTL"]) {
            Ok(ttl) if ttl > 0 => Some(ttl as u32),
            _ => None,
        })
    }

    /// Who leads now, as the leader key says: its value and its term;
    /// `None` when no one does.
    pub fn leader(&self, key: &str) -> Result<Option<(String, Term)>, EngineError> {
        const PATH: &str = "/v3/kv/range";
        let answer = self.call(PATH, json!({ "key": encode(key) }))?;
        let Some(kv) = answer.pointer("/kvs/0") else {
            return Ok(None);
        };
        let name =
            decode(kv.get("value").and_then(Value::as_str).unwrap_or_default()).unwrap_or_default();
        Ok(Some((
            name,
            Term(self.number(kv, PATH, &["create_revision"])?),
        )))
    }

    /// Gives `lease` up: the leader key goes with it at once.
    pub fn resign(&self, lease: LeaseId) -> Result<(), EngineError> {
        self.call("/v3/lease/revoke", json!({ "ID": lease.0.to_string() }))
            .map(|_| ())
    }

    fn call(&self, path: &'static str, body: Value) -> Result<Value, EngineError> {
        let url = format!("{}{path}", self.endpoint);
        match self.agent.post(&url).send_json(body) {
            Ok(response) => {
                let text = response.into_string().map_err(|e| self.unreachable(e))?;
                // A stream (keep-alive) may end with a newline or hold
                // more than one object: the first is the answer.
                let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
                serde_json::from_str(first).map_err(|e| self.malformed(path, &e.to_string()))
            }
            Err(ureq::Error::Status(status, response)) => Err(EngineError::Refused {
                endpoint: self.endpoint.clone(),
                path,
                status,
                body: response.into_string().unwrap_or_default(),
            }),
            Err(e) => Err(self.unreachable(e)),
        }
    }

    /// The 64-bit number at `at` (the gateway writes them as strings).
    fn number(&self, value: &Value, path: &'static str, at: &[&str]) -> Result<i64, EngineError> {
        let found = at.iter().try_fold(value, |v, k| v.get(k));
        let number = match found {
            Some(Value::String(s)) => s.parse().ok(),
            Some(Value::Number(n)) => n.as_i64(),
            _ => None,
        };
        number.ok_or_else(|| self.malformed(path, &format!("no number at {}", at.join("."))))
    }

    fn unreachable(&self, e: impl std::fmt::Display) -> EngineError {
        EngineError::Unreachable {
            endpoint: self.endpoint.clone(),
            why: e.to_string(),
        }
    }

    fn malformed(&self, path: &'static str, what: &str) -> EngineError {
        EngineError::Malformed {
            endpoint: self.endpoint.clone(),
            path,
            what: what.to_string(),
        }
    }
}

/// Whether a leader whose lease was last proven at `proven` may still
/// act at `now`: within `deadline`, which is shorter than the lease by
/// more than a request's timeout, so that it stops before etcd can give
/// its key to another. Both instants are this controller's monotonic
/// clock: no clock of another machine decides.
pub fn may_act(proven: Instant, now: Instant, deadline: Duration) -> bool {
    now.saturating_duration_since(proven) < deadline
}

/// rustls' client configuration for etcd: only `authority_pem`'s
/// certificates are trusted.
fn tls_config(
    authority_pem: &[u8],
    client: Option<(&[u8], &[u8])>,
) -> Result<std::sync::Arc<rustls::ClientConfig>, EngineError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let bad = |what: &str, e: &dyn std::fmt::Display| EngineError::Tls(format!("{what}: {e}"));
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(authority_pem) {
        let cert = cert.map_err(|e| bad("the authority (etcd_ca) does not read", &e))?;
        roots
            .add(cert)
            .map_err(|e| bad("the authority (etcd_ca) is not a CA certificate", &e))?;
    }
    if roots.is_empty() {
        return Err(EngineError::Tls(
            "the authority (etcd_ca) holds no certificate".into(),
        ));
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad("no TLS version", &e))?
        .with_root_certificates(roots);
    let config = match client {
        None => builder.with_no_client_auth(),
        Some((cert_pem, key_pem)) => {
            let chain = CertificateDer::pem_slice_iter(cert_pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| bad("the certificate (etcd_cert) does not read", &e))?;
            let key = PrivateKeyDer::from_pem_slice(key_pem)
                .map_err(|e| bad("the key (etcd_key) does not read", &e))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| bad("the certificate and key (etcd_cert, etcd_key)", &e))?
        }
    };
    Ok(std::sync::Arc::new(config))
}

fn encode(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

fn decode(text: &str) -> Option<String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .ok()?;
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests;
