//! TLS for the pool, with rustls: the controller's server (a node's
//! client certificate is checked against the authority when given; a
//! connection without one may only join), a joining node's client (which
//! trusts the controller by the authority's fingerprint from the join
//! line), and a joined node's client (which presents its certificate and
//! trusts the authority it was given).

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme};

use super::error::NetError;
use super::pki::{fingerprint, Identity, SERVER_NAME};

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn roots(authority: &CertificateDer<'static>) -> Result<Arc<RootCertStore>, NetError> {
    let mut roots = RootCertStore::empty();
    roots.add(authority.clone())?;
    Ok(Arc::new(roots))
}

/// The controller's side: `identity` as its certificate; a client
/// certificate, when one is given, must be signed by `authority`.
pub fn server_config(
    authority: &CertificateDer<'static>,
    identity: Identity,
) -> Result<Arc<ServerConfig>, NetError> {
    let verifier = WebPkiClientVerifier::builder_with_provider(roots(authority)?, provider())
        .allow_unauthenticated()
        .build()
        .map_err(|e| NetError::Refused(format!("cannot check node certificates: {e}")))?;
    let config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(identity.chain, identity.key)?;
    Ok(Arc::new(config))
}

/// A joined node's side: its certificate and key, and the authority.
pub fn node_config(
    authority_pem: &str,
    certificate_pem: &str,
    key_pem: &str,
) -> Result<Arc<ClientConfig>, NetError> {
    let pem = |what: &str, e: rustls::pki_types::pem::Error| NetError::Pem(format!("{what}: {e}"));
    let authority = CertificateDer::from_pem_slice(authority_pem.as_bytes())
        .map_err(|e| pem("the authority", e))?;
    let certificate = CertificateDer::from_pem_slice(certificate_pem.as_bytes())
        .map_err(|e| pem("the node's certificate", e))?;
    let key =
        PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|e| pem("the node's key", e))?;
    let config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots(&authority)?)
        .with_client_auth_cert(vec![certificate, authority], key)?;
    Ok(Arc::new(config))
}

/// A joining node's side: no certificate of its own; the controller is
/// trusted if its chain ends with an authority of `fingerprint`.
pub fn join_config(fingerprint: &str) -> Result<Arc<ClientConfig>, NetError> {
    let verifier = Arc::new(PinnedAuthority {
        fingerprint: fingerprint.trim().to_ascii_lowercase(),
        provider: provider(),
    });
    let config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// The name a node asks for, whatever address it connects to.
pub fn server_name() -> ServerName<'static> {
    ServerName::try_from(SERVER_NAME).expect("a valid DNS name")
}

/// Trusts the chain whose authority has the pinned fingerprint, and checks
/// the server's certificate against that authority as usual.
#[derive(Debug)]
struct PinnedAuthority {
    fingerprint: String,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for PinnedAuthority {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(authority) = intermediates
            .iter()
            .find(|c| fingerprint(c) == self.fingerprint)
        else {
            let theirs = intermediates
                .last()
                .map(|c| fingerprint(c))
                .unwrap_or_else(|| "none".into());
            return Err(rustls::Error::General(format!(
                "the controller's certificate authority has fingerprint {theirs}, not the {} the join line gives",
                self.fingerprint
            )));
        };
        let mut roots = RootCertStore::empty();
        roots.add(authority.clone().into_owned())?;
        let inner =
            WebPkiServerVerifier::builder_with_provider(Arc::new(roots), self.provider.clone())
                .build()
                .map_err(|e| rustls::Error::General(e.to_string()))?;
        inner.verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
