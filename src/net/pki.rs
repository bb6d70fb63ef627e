//! The pool's certificates. The controller is the certificate authority:
//! it makes its own authority once (kept in its spool, the key 0600), a
//! fresh server certificate at each start, and a client certificate for
//! each node that joins, from the node's own key (the node sends a
//! request; its private key never leaves it). Nodes check the controller
//! by the authority's fingerprint, which the join line carries. Join
//! tokens are random, shown once, and kept only as their SHA-256.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use rcgen::{
    BasicConstraints, CertificateParams, CertificateSigningRequestParams, DnType,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType, SerialNumber,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use super::error::NetError;

/// The name in the controller's server certificate, which nodes check
/// whatever address they reach it at (behind NAT, by IP, by name).
pub const SERVER_NAME: &str = "ysctld.ysched.invalid";

const AUTHORITY: &str = "authority.pem";
const AUTHORITY_KEY: &str = "authority-key.pem";

/// How long a node's certificate is good for by default (`[pool]
/// certificate_lifetime`); a node renews it when less than a third is left.
pub const NODE_CERTIFICATE_DAYS: i64 = 365;

/// Certificates start this long before they are made: a node whose clock
/// is behind still accepts its new one.
const BACKDATE_SECS: i64 = 3_600;

/// The controller's certificate authority.
pub struct Authority {
    pem: String,
    der: CertificateDer<'static>,
    key: KeyPair,
}

/// A certificate chain and its key, for one end of a TLS connection.
pub struct Identity {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
}

impl Authority {
    /// The authority kept in `dir`, made there the first time.
    pub fn load_or_create(dir: &Path, cluster: &str) -> Result<Authority, NetError> {
        let (cert_path, key_path) = (dir.join(AUTHORITY), dir.join(AUTHORITY_KEY));
        if cert_path.exists() {
            let pem = std::fs::read_to_string(&cert_path)
                .map_err(NetError::io(format!("cannot read {}", cert_path.display())))?;
            let key_pem = std::fs::read_to_string(&key_path)
                .map_err(NetError::io(format!("cannot read {}", key_path.display())))?;
            let key = KeyPair::from_pem(&key_pem)?;
            let der = CertificateDer::from_pem_slice(pem.as_bytes())
                .map_err(|e| NetError::Pem(format!("{}: {e}", cert_path.display())))?;
            return Ok(Authority { pem, der, key });
        }
        std::fs::create_dir_all(dir)
            .map_err(NetError::io(format!("cannot create {}", dir.display())))?;
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(
            DnType::CommonName,
            format!("ysched pool authority of {cluster}"),
        );
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params.not_before = time::OffsetDateTime::now_utc() - time::Duration::hours(1);
        params.not_after = time::OffsetDateTime::now_utc() + time::Duration::days(20 * 365);
        params.serial_number = Some(random_serial());
        let cert = params.self_signed(&key)?;
        write_private(&key_path, key.serialize_pem().as_bytes())?;
        write_private(&cert_path, cert.pem().as_bytes())?;
        Ok(Authority {
            pem: cert.pem(),
            der: cert.der().clone(),
            key,
        })
    }

    pub fn pem(&self) -> &str {
        &self.pem
    }

    pub fn der(&self) -> &CertificateDer<'static> {
        &self.der
    }

    /// `sha256:` and the hex of the authority certificate's SHA-256.
    pub fn fingerprint(&self) -> String {
        fingerprint(&self.der)
    }

    fn issuer(&self) -> Result<Issuer<'_, &KeyPair>, NetError> {
        Ok(Issuer::from_ca_cert_der(&self.der, &self.key)?)
    }

    /// A fresh certificate and key for the controller's TLS server, its
    /// chain ending with the authority (which nodes check by fingerprint).
    pub fn server_identity(&self) -> Result<Identity, NetError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(vec![SERVER_NAME.to_string()])?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, "ysctld");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.not_before = time::OffsetDateTime::now_utc() - time::Duration::hours(1);
        params.not_after =
            time::OffsetDateTime::now_utc() + time::Duration::days(NODE_CERTIFICATE_DAYS);
        params.serial_number = Some(random_serial());
        let cert = params.signed_by(&key, &self.issuer()?)?;
        Ok(Identity {
            chain: vec![cert.der().clone(), self.der.clone()],
            key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        })
    }

    /// A client certificate for node `node`, for the key of its request
    /// (whose signature proves the node holds it). Nothing else of the
    /// request is taken: the name is the one the token was made for.
    /// Returns the certificate and its serial number (hex).
    pub fn sign_node(
        &self,
        node: &str,
        request_pem: &str,
        lifetime: std::time::Duration,
    ) -> Result<(String, String), NetError> {
        let request = CertificateSigningRequestParams::from_pem(request_pem)?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, node);
        params.subject_alt_names = vec![SanType::DnsName(node.try_into()?)];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::seconds(BACKDATE_SECS);
        params.not_after = now + time::Duration::seconds(lifetime.as_secs() as i64);
        let serial = random_serial();
        let hex = hex(&serial.to_bytes());
        params.serial_number = Some(serial);
        let cert = params.signed_by(&request.public_key, &self.issuer()?)?;
        Ok((cert.pem(), hex))
    }
}

/// A new key for node `node` and a request for its certificate: (the
/// key, PEM; the request, PEM).
pub fn new_request(node: &str) -> Result<(String, String), NetError> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, node);
    let request = params.serialize_request(&key)?;
    Ok((key.serialize_pem(), request.pem()?))
}

/// What a certificate says of itself: its subject's common name, its
/// serial number (hex), and when it stops being valid (Unix seconds).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subject {
    pub name: String,
    pub serial: String,
    pub not_before: i64,
    pub not_after: i64,
}

impl Subject {
    /// Whether less than a third of the certificate's life is left at
    /// `now`: time to renew it. Its life is counted from when it was
    /// made, not from its backdated start.
    pub fn due_for_renewal(&self, now: i64) -> bool {
        let life = self.not_after - (self.not_before + BACKDATE_SECS);
        self.not_after - now < life / 3
    }
}

pub fn subject_of(der: &[u8]) -> Result<Subject, NetError> {
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| NetError::Pem(format!("a certificate that does not read: {e}")))?;
    let name = cert
        .subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .unwrap_or_default()
        .to_string();
    Ok(Subject {
        name,
        serial: hex(cert.raw_serial()),
        not_before: cert.validity().not_before.timestamp(),
        not_after: cert.validity().not_after.timestamp(),
    })
}

/// `sha256:` and the hex of the SHA-256 of `der`.
pub fn fingerprint(der: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, der);
    format!("sha256:{}", hex(digest.as_ref()))
}

/// A one-time join token: 32 random bytes, as hex.
pub fn new_token() -> Result<String, NetError> {
    let mut bytes = [0u8; 32];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
        .map_err(|_| NetError::Refused("the system's random source failed".into()))?;
    Ok(hex(&bytes))
}

/// What is kept of a token: its SHA-256, as hex.
pub fn hash_token(token: &str) -> String {
    hex(ring::digest::digest(&ring::digest::SHA256, token.trim().as_bytes()).as_ref())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A positive 127-bit random serial number.
fn random_serial() -> SerialNumber {
    let mut bytes = [0u8; 16];
    // The system's random source does not fail on Linux; a zero serial
    // would still be valid, merely not unique.
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes);
    bytes[0] &= 0x7f;
    bytes[0] |= 0x01;
    SerialNumber::from_slice(&bytes)
}

/// Writes `body` to `path` readable by its owner alone: a temporary
/// name, then a rename, so a reader never sees half of it.
pub fn write_private(path: &Path, body: &[u8]) -> Result<(), NetError> {
    let temporary = path.with_extension("tmp");
    let _ = std::fs::remove_file(&temporary);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temporary)
        .map_err(NetError::io(format!(
            "cannot create {}",
            temporary.display()
        )))?;
    file.write_all(body)
        .and_then(|()| file.sync_all())
        .map_err(NetError::io(format!(
            "cannot write {}",
            temporary.display()
        )))?;
    std::fs::rename(&temporary, path)
        .map_err(NetError::io(format!("cannot rename to {}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_authority_signs_a_nodes_key_under_the_tokens_name_only() {
        let dir = tempfile::tempdir().unwrap();
        let authority = Authority::load_or_create(dir.path(), "test").unwrap();
        let again = Authority::load_or_create(dir.path(), "test").unwrap();
        assert_eq!(
            authority.fingerprint(),
            again.fingerprint(),
            "kept, not made anew"
        );
        assert!(authority.fingerprint().starts_with("sha256:"));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join(AUTHORITY_KEY))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);

        // The request names another node; the certificate says gpu01.
        let (_key, request) = new_request("intruder").unwrap();
        let year = std::time::Duration::from_secs(NODE_CERTIFICATE_DAYS as u64 * 86_400);
        let (pem, serial) = authority.sign_node("gpu01", &request, year).unwrap();
        let der = CertificateDer::from_pem_slice(pem.as_bytes()).unwrap();
        let subject = subject_of(&der).unwrap();
        assert_eq!(subject.name, "gpu01");
        assert_eq!(subject.serial, serial);
        assert!(subject.not_after > 0);
        assert!(authority.sign_node("gpu01", "not a request", year).is_err());

        let token = new_token().unwrap();
        assert_eq!(token.len(), 64);
        assert_eq!(hash_token(&token), hash_token(&format!(" {token}\n")));
        assert_ne!(hash_token(&token), token);
    }
}
