//! Secured etcd servers for tests: [`AuthEtcd`], a single member with
//! authentication on (a `root` user and role, and a non-root user whose
//! role may read and write every key, all created through the gateway), and
//! [`TlsEtcd`], a single member serving only TLS with client-certificate
//! auth, its CA, server and client certificates generated at start with
//! `rcgen` (plus a second, unrelated CA for "wrong CA" tests).

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use serde_json::{json, Value};

use super::member::{free_ports, Member, Spec};
use super::{owned, temp_root, unique, EtcdServer, START_ATTEMPTS};

/// Password of the `root` user of an [`AuthEtcd`].
pub const ROOT_PASSWORD: &str = "root-secret";
/// Name of the role of the test user (read/write on every key).
pub const ROLE: &str = "steadfast";
/// Deadline of one admin call of the harness.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(3);

/// A single-member etcd with auth enabled and a user `user` / `password`
/// that may read and write every key.
#[derive(Debug)]
pub struct AuthEtcd {
    /// The server (stop, kill, restart as usual).
    pub server: EtcdServer,
    /// The test user.
    pub user: String,
    /// Its password.
    pub password: String,
}

impl AuthEtcd {
    /// Starts etcd with `args` (e.g. `--auth-token-ttl=2`), creates the
    /// users and roles and enables auth.
    pub async fn start(args: &[&str]) -> io::Result<Self> {
        let server = EtcdServer::start_with_args(args).await?;
        let (user, password) = ("svc".to_string(), "svc-secret".to_string());
        let e = server.endpoint();
        let admin = Admin::new(&e)?;
        admin
            .call(
                "/v3/auth/user/add",
                json!({"name": "root", "password": ROOT_PASSWORD}),
                None,
            )
            .await?;
        admin
            .call("/v3/auth/role/add", json!({"name": "root"}), None)
            .await?;
        admin
            .call(
                "/v3/auth/user/grant",
                json!({"user": "root", "role": "root"}),
                None,
            )
            .await?;
        admin
            .call(
                "/v3/auth/user/add",
                json!({"name": user, "password": password}),
                None,
            )
            .await?;
        admin
            .call("/v3/auth/role/add", json!({"name": ROLE}), None)
            .await?;
        let all = json!({"permType": "READWRITE", "key": "AA==", "range_end": "AA=="});
        admin
            .call(
                "/v3/auth/role/grant",
                json!({"name": ROLE, "perm": all}),
                None,
            )
            .await?;
        admin
            .call(
                "/v3/auth/user/grant",
                json!({"user": user, "role": ROLE}),
                None,
            )
            .await?;
        admin.call("/v3/auth/enable", json!({}), None).await?;
        Ok(Self {
            server,
            user,
            password,
        })
    }

    /// The client URL.
    pub fn endpoint(&self) -> String {
        self.server.endpoint()
    }

    /// Revokes every token of the test user: its password is changed to the
    /// same value (etcd drops the user's tokens on a password change).
    pub async fn revoke_tokens(&self) -> io::Result<()> {
        let admin = Admin::new(&self.endpoint())?;
        let root = admin
            .call(
                "/v3/auth/authenticate",
                json!({"name": "root", "password": ROOT_PASSWORD}),
                None,
            )
            .await?;
        let token = root["token"].as_str().unwrap_or_default().to_string();
        let body = json!({"name": self.user, "password": self.password});
        admin
            .call("/v3/auth/user/changepw", body, Some(&token))
            .await?;
        Ok(())
    }
}

/// Plain HTTP calls of the harness (no proxy).
struct Admin {
    http: reqwest::Client,
    endpoint: String,
}

impl Admin {
    fn new(endpoint: &str) -> io::Result<Self> {
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(ADMIN_TIMEOUT)
            .build()
            .map_err(io::Error::other)?;
        Ok(Self {
            http,
            endpoint: endpoint.to_string(),
        })
    }

    async fn call(&self, path: &str, body: Value, token: Option<&str>) -> io::Result<Value> {
        let mut req = self
            .http
            .post(format!("{}{path}", self.endpoint))
            .json(&body);
        if let Some(t) = token {
            req = req.header(reqwest::header::AUTHORIZATION, t);
        }
        let resp = req.send().await.map_err(io::Error::other)?;
        let status = resp.status();
        let v: Value = resp.json().await.map_err(io::Error::other)?;
        if !status.is_success() {
            return Err(io::Error::other(format!("{path}: HTTP {status}: {v}")));
        }
        Ok(v)
    }
}

/// A CA made at test time.
struct Ca {
    cert: Certificate,
    key: KeyPair,
}

fn rc(e: rcgen::Error) -> io::Error {
    io::Error::other(e)
}

impl Ca {
    fn new(name: &str) -> io::Result<Self> {
        let mut p = CertificateParams::new(Vec::<String>::new()).map_err(rc)?;
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::CommonName, name);
        p.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().map_err(rc)?;
        let cert = p.self_signed(&key).map_err(rc)?;
        Ok(Self { cert, key })
    }

    /// A leaf certificate for `sans` with `usage`: (cert PEM, key PEM).
    fn issue(
        &self,
        cn: &str,
        sans: &[&str],
        usage: Vec<ExtendedKeyUsagePurpose>,
    ) -> io::Result<(String, String)> {
        let sans: Vec<String> = sans.iter().map(|s| s.to_string()).collect();
        let mut p = CertificateParams::new(sans).map_err(rc)?;
        p.distinguished_name.push(DnType::CommonName, cn);
        p.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        p.extended_key_usages = usage;
        let key = KeyPair::generate().map_err(rc)?;
        let cert = p.signed_by(&key, &self.cert, &self.key).map_err(rc)?;
        Ok((cert.pem(), key.serialize_pem()))
    }
}

/// A single-member etcd serving its client port only over TLS, with
/// `--client-cert-auth`: a client must trust [`TlsEtcd::ca_pem`] and
/// present [`TlsEtcd::client_cert_pem`] / [`TlsEtcd::client_key_pem`].
#[derive(Debug)]
pub struct TlsEtcd {
    /// The server (its endpoint is `https://127.0.0.1:<port>`).
    pub server: EtcdServer,
    /// PEM of the CA that signed the server and client certificates.
    pub ca_pem: String,
    /// PEM of a client certificate signed by that CA.
    pub client_cert_pem: String,
    /// PEM of its key.
    pub client_key_pem: String,
    /// PEM of another CA, which signed nothing etcd uses.
    pub other_ca_pem: String,
    dir: PathBuf,
}

impl TlsEtcd {
    /// Generates the certificates and starts etcd on them.
    pub async fn start() -> io::Result<Self> {
        let ca = Ca::new("steadfast test CA")?;
        // etcd's own gateway dials its gRPC side with the server
        // certificate, so with client-cert auth it needs ClientAuth too.
        let both = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let (server_cert, server_key) = ca.issue("etcd", &["127.0.0.1", "localhost"], both)?;
        let client = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let (client_cert_pem, client_key_pem) = ca.issue("steadfast-client", &[], client)?;
        let other_ca_pem = Ca::new("unrelated CA")?.cert.pem();
        let dir = temp_root("tls");
        std::fs::create_dir_all(&dir)?;
        let file = |name: &str, pem: &str| -> io::Result<String> {
            let p = dir.join(name);
            std::fs::write(&p, pem)?;
            Ok(p.display().to_string())
        };
        let ca_file = file("ca.pem", &ca.cert.pem())?;
        let cert_file = file("server.pem", &server_cert)?;
        let key_file = file("server-key.pem", &server_key)?;
        let mut last = None;
        for _ in 0..START_ATTEMPTS {
            let ports = free_ports(3)?;
            let name = "s0".to_string();
            let args = owned(&[
                "--cert-file",
                &cert_file,
                "--key-file",
                &key_file,
                "--trusted-ca-file",
                &ca_file,
                "--client-cert-auth",
                "--listen-metrics-urls",
                &format!("http://127.0.0.1:{}", ports[2]),
            ]);
            let spec = Spec {
                initial_cluster: format!("{name}=http://127.0.0.1:{}", ports[1]),
                name,
                client_port: ports[0],
                peer_port: ports[1],
                token: unique("tok"),
                extra_args: args,
                client_scheme: "https",
                health_url: Some(format!("http://127.0.0.1:{}/health", ports[2])),
            };
            let mut m = Member::new(spec, temp_root("etcd"))?;
            m.spawn()?;
            match m.wait_healthy().await {
                Ok(()) => {
                    return Ok(Self {
                        server: EtcdServer { member: m },
                        ca_pem: ca.cert.pem(),
                        client_cert_pem,
                        client_key_pem,
                        other_ca_pem,
                        dir,
                    })
                }
                Err(e) if e.kind() == io::ErrorKind::BrokenPipe => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        Err(last.unwrap_or_else(|| io::Error::other("etcd did not start")))
    }

    /// The client URL, `https://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        self.server.endpoint()
    }
}

impl Drop for TlsEtcd {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
