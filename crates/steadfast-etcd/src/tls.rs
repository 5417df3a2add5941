//! TLS to etcd (`https://` endpoints): a custom CA (PEM) trusted besides
//! the built-in web roots, and an optional client certificate + key for
//! etcd's `--client-cert-auth`; and the proxy rule: the etcd client talks
//! to etcd directly, ignoring `HTTP_PROXY` / `HTTPS_PROXY` / `ALL_PROXY`,
//! unless [`crate::EtcdConfig::proxy`] names a proxy.
//!
//! PEM comes inline or from a file, read when the client is built; a CA,
//! certificate or key that cannot be read or parsed fails the build with
//! [`crate::GatewayError::TlsConfig`]. A handshake refused later (unknown
//! issuer, client certificate refused) is [`crate::GatewayError::Tls`].

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use steadfast_core::Secret;

use crate::error::GatewayError;

/// Where a PEM document comes from.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PemSource {
    /// Read from this file when the client is built.
    File(PathBuf),
    /// The PEM text itself, a [`Secret`] (it may be a private key):
    /// serialized as `"<redacted>"`.
    Pem(Secret),
}

impl std::fmt::Debug for PemSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PemSource::File(p) => f.debug_tuple("File").field(p).finish(),
            // A key may be inline: never print PEM text.
            PemSource::Pem(p) => write!(f, "Pem(<{} bytes>)", p.expose().len()),
        }
    }
}

impl PemSource {
    /// The PEM bytes (the file read now).
    pub fn load(&self, what: &str) -> Result<Vec<u8>, GatewayError> {
        match self {
            PemSource::Pem(p) => Ok(p.expose().as_bytes().to_vec()),
            PemSource::File(path) => std::fs::read(path).map_err(|e| {
                GatewayError::TlsConfig(format!("cannot read {what} {}: {e}", path.display()))
            }),
        }
    }
}

/// TLS settings of the etcd client.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EtcdTls {
    /// CA certificate(s) that sign etcd's server certificate, trusted in
    /// addition to the built-in web roots. Default none.
    #[serde(default)]
    pub ca: Option<PemSource>,
    /// Client certificate (chain) presented to etcd. Needs `client_key`.
    /// Default none.
    #[serde(default)]
    pub client_cert: Option<PemSource>,
    /// Private key of `client_cert` (PKCS#8, RSA or SEC1 PEM). Default
    /// none.
    #[serde(default)]
    pub client_key: Option<PemSource>,
}

impl EtcdTls {
    /// Trusts the CA in `pem` (PEM text).
    pub fn with_ca_pem(mut self, pem: impl Into<String>) -> Self {
        self.ca = Some(PemSource::Pem(Secret::new(pem)));
        self
    }

    /// Presents the client certificate `cert_pem` with its key `key_pem`.
    pub fn with_client_identity_pem(
        mut self,
        cert_pem: impl Into<String>,
        key_pem: impl Into<String>,
    ) -> Self {
        self.client_cert = Some(PemSource::Pem(Secret::new(cert_pem)));
        self.client_key = Some(PemSource::Pem(Secret::new(key_pem)));
        self
    }

    /// Applies the CA and the identity to a client builder.
    pub(crate) fn apply(
        &self,
        mut builder: reqwest::ClientBuilder,
    ) -> Result<reqwest::ClientBuilder, GatewayError> {
        if let Some(ca) = &self.ca {
            let pem = ca.load("CA")?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| GatewayError::TlsConfig(format!("bad CA PEM: {e}")))?;
            if certs.is_empty() {
                return Err(GatewayError::TlsConfig(
                    "CA PEM holds no certificate".into(),
                ));
            }
            for c in certs {
                builder = builder.add_root_certificate(c);
            }
        }
        match (&self.client_cert, &self.client_key) {
            (None, None) => {}
            (Some(cert), Some(key)) => {
                let mut pem = cert.load("client certificate")?;
                pem.push(b'\n');
                pem.extend(key.load("client key")?);
                let id = reqwest::Identity::from_pem(&pem).map_err(|e| {
                    GatewayError::TlsConfig(format!("bad client certificate or key: {e}"))
                })?;
                builder = builder.identity(id);
            }
            _ => {
                return Err(GatewayError::TlsConfig(
                    "client_cert and client_key go together".into(),
                ))
            }
        }
        Ok(builder.use_rustls_tls())
    }
}

/// Applies the proxy rule: `proxy` set means every request goes through
/// it; otherwise no proxy at all, whatever the environment says.
pub(crate) fn apply_proxy(
    builder: reqwest::ClientBuilder,
    proxy: Option<&str>,
) -> Result<reqwest::ClientBuilder, GatewayError> {
    match proxy {
        None => Ok(builder.no_proxy()),
        Some(url) => {
            let p = reqwest::Proxy::all(url)
                .map_err(|e| GatewayError::Client(format!("bad proxy {url:?}: {e}")))?;
            Ok(builder.proxy(p))
        }
    }
}

/// Whether a transport error text (the whole source chain) is a TLS
/// handshake refusal rather than an unreachable member: rustls words
/// these "invalid peer certificate: ...", "received fatal alert: ...",
/// "peer sent no certificates" and so on.
pub fn is_tls_failure(chain: &str) -> bool {
    const MARKS: [&str; 5] = [
        "invalid peer certificate",
        "received fatal alert",
        "peer sent no certificates",
        "peer is incompatible",
        "invalid certificate",
    ];
    MARKS.iter().any(|m| chain.contains(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_failures_are_told_from_unreachable_members() {
        assert!(is_tls_failure(
            "error sending request: client error (Connect): invalid peer certificate: UnknownIssuer"
        ));
        assert!(is_tls_failure("received fatal alert: CertificateRequired"));
        assert!(!is_tls_failure(
            "error sending request: tcp connect error: Connection refused (os error 111)"
        ));
    }

    #[test]
    fn bad_pem_and_half_identities_are_config_errors() {
        let b = || reqwest::Client::builder();
        let bad = EtcdTls::default().with_ca_pem("not a pem");
        assert!(matches!(bad.apply(b()), Err(GatewayError::TlsConfig(_))));
        let half = EtcdTls {
            client_cert: Some(PemSource::Pem("x".into())),
            ..EtcdTls::default()
        };
        assert!(matches!(half.apply(b()), Err(GatewayError::TlsConfig(_))));
        let missing = EtcdTls {
            ca: Some(PemSource::File("/nonexistent/ca.pem".into())),
            ..EtcdTls::default()
        };
        assert!(matches!(
            missing.apply(b()),
            Err(GatewayError::TlsConfig(_))
        ));
        assert!(matches!(
            apply_proxy(b(), Some("::not a url::")),
            Err(GatewayError::Client(_))
        ));
        let shown = format!(
            "{:?}",
            EtcdTls::default().with_client_identity_pem("C", "KEY")
        );
        assert!(!shown.contains("KEY"));
    }
}
