//! A test PKI made at test time with rcgen, for a `redis-server` with TLS
//! ([`RedisServer::start_tls`]): a CA, a server certificate for 127.0.0.1
//! and localhost, one for another name, a client certificate, and a second,
//! unrelated CA. Every file lives in a temporary directory.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// A certificate and its key, as PEM files.
#[derive(Debug, Clone)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The files of one test PKI.
pub struct TestPki {
    /// The CA that signed every certificate below.
    pub ca: PathBuf,
    /// A CA that signed nothing here: trusting it alone refuses the server.
    pub other_ca: PathBuf,
    /// Server certificate, SAN 127.0.0.1 and localhost.
    pub server: CertFiles,
    /// Server certificate for `other.example` only (same CA).
    pub wrong_name: CertFiles,
    /// Client certificate for mutual TLS.
    pub client: CertFiles,
    dir: tempfile::TempDir,
}

/// A CA certificate's parameters, for signing.
fn ca_params(name: &str) -> CertificateParams {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write PEM");
    path
}

impl TestPki {
    /// A fresh PKI (ECDSA P-256 keys) in a new temporary directory.
    pub fn generate() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca_key = KeyPair::generate().expect("CA key");
        let params = ca_params("idemgate test CA");
        let ca = params.self_signed(&ca_key).expect("CA");
        let issuer = Issuer::new(params, ca_key);
        let other_key = KeyPair::generate().expect("other CA key");
        let other = ca_params("unrelated test CA")
            .self_signed(&other_key)
            .expect("other CA");

        let leaf = |name: &str, sans: &[&str], purpose: ExtendedKeyUsagePurpose| {
            let sans: Vec<String> = sans.iter().map(|s| (*s).to_owned()).collect();
            let mut params = CertificateParams::new(sans).expect("leaf params");
            params.distinguished_name.push(DnType::CommonName, name);
            params.extended_key_usages = vec![purpose];
            let key = KeyPair::generate().expect("leaf key");
            let cert = params.signed_by(&key, &issuer).expect("sign leaf");
            CertFiles {
                cert: write(dir.path(), &format!("{name}.crt"), &cert.pem()),
                key: write(dir.path(), &format!("{name}.key"), &key.serialize_pem()),
            }
        };
        let server = leaf(
            "server",
            &["127.0.0.1", "localhost"],
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        let wrong_name = leaf(
            "wrong-name",
            &["other.example"],
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        let client = leaf("client", &[], ExtendedKeyUsagePurpose::ClientAuth);
        Self {
            ca: write(dir.path(), "ca.crt", &ca.pem()),
            other_ca: write(dir.path(), "other-ca.crt", &other.pem()),
            server,
            wrong_name,
            client,
            dir,
        }
    }

    /// A Redis TLS set-up with this PKI: `server` as its certificate,
    /// client certificates required or not.
    pub fn redis(&self, server: &CertFiles, auth_clients: bool) -> RedisTls {
        RedisTls {
            server: server.clone(),
            ca: self.ca.clone(),
            auth_clients,
            cli: self.client.clone(),
        }
    }
}

/// How a TLS `redis-server` runs, and how `redis-cli` reaches it.
#[derive(Debug, Clone)]
pub struct RedisTls {
    /// `tls-cert-file`, `tls-key-file`.
    pub server: CertFiles,
    /// `tls-ca-cert-file`: the CA client certificates must chain to.
    pub ca: PathBuf,
    /// `tls-auth-clients yes|no`.
    pub auth_clients: bool,
    /// The certificate `redis-cli` presents.
    pub cli: CertFiles,
}

impl RedisTls {
    /// The server's arguments: TLS only (`--port 0`) on `port`.
    pub fn server_args(&self, port: u16) -> Vec<String> {
        let path = |p: &Path| p.display().to_string();
        [
            "--port".to_owned(),
            "0".to_owned(),
            "--tls-port".to_owned(),
            port.to_string(),
            "--tls-cert-file".to_owned(),
            path(&self.server.cert),
            "--tls-key-file".to_owned(),
            path(&self.server.key),
            "--tls-ca-cert-file".to_owned(),
            path(&self.ca),
            "--tls-auth-clients".to_owned(),
            if self.auth_clients { "yes" } else { "no" }.to_owned(),
        ]
        .into()
    }

    /// `redis-cli`'s TLS arguments. The server name is not checked by
    /// redis-cli, so the wrong-name server answers it too.
    pub fn cli_args(&self) -> Vec<String> {
        let path = |p: &Path| p.display().to_string();
        vec![
            "--tls".to_owned(),
            "--cacert".to_owned(),
            path(&self.ca),
            "--cert".to_owned(),
            path(&self.cli.cert),
            "--key".to_owned(),
            path(&self.cli.key),
        ]
    }
}
