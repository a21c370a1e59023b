//! `[store] tls_ca_file`, `tls_cert_file`, `tls_key_file`: how idemgate
//! trusts a `rediss://` server and proves itself to one that asks.
//!
//! Without these keys a `rediss://` URL verifies the server against the
//! system's roots (fred's default connector). `tls_ca_file` replaces them
//! with the CAs of one PEM file (a private CA, as managed Redis offerings
//! and self-run Redis with `tls-ca-cert-file` use). `tls_cert_file` with
//! `tls_key_file` present a client certificate (Redis `tls-auth-clients
//! yes`). Verification of the server's certificate and name is never off:
//! there is no knob for it.
//!
//! The files are read and parsed here, once, when the configuration
//! loads, so `check-config` names an unreadable file or one that holds no
//! usable PEM, and a key that does not match its certificate, before
//! anything connects. A rotated certificate takes a restart.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use fred::rustls::pki_types::pem::PemObject as _;
use fred::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use fred::rustls::{ClientConfig, RootCertStore};

use super::problems::Problems;

/// The TLS settings of a `rediss://` store, checked and ready to connect
/// with.
#[derive(Clone)]
pub struct RedisTls {
    /// `tls_ca_file`: the only CAs trusted; `None`: the system's roots.
    pub ca_file: Option<PathBuf>,
    /// `tls_cert_file` and `tls_key_file`, for mutual TLS.
    pub client_identity: Option<(PathBuf, PathBuf)>,
    /// The rustls client configuration built from them (server
    /// verification on), shared by every connection of the store.
    pub client: Arc<ClientConfig>,
}

impl fmt::Debug for RedisTls {
    /// The file names only: the key's bytes never print.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisTls")
            .field("ca_file", &self.ca_file)
            .field("client_identity", &self.client_identity)
            .finish_non_exhaustive()
    }
}

/// The `tls_*` keys of `[store]`, as written.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct TlsFiles<'a> {
    /// `tls_ca_file`.
    pub(super) ca_file: Option<&'a str>,
    /// `tls_cert_file`.
    pub(super) cert_file: Option<&'a str>,
    /// `tls_key_file`.
    pub(super) key_file: Option<&'a str>,
}

/// Validates the `tls_*` keys of `[store]`; `None` when none is set (a
/// `rediss://` URL then uses fred's default: the system's roots).
pub(super) fn redis_tls(
    problems: &mut Problems,
    raw: TlsFiles<'_>,
    url: Option<&str>,
) -> Option<RedisTls> {
    let keys = [
        ("store.tls_ca_file", raw.ca_file),
        ("store.tls_cert_file", raw.cert_file),
        ("store.tls_key_file", raw.key_file),
    ];
    let given: Vec<&str> = keys
        .iter()
        .filter(|(_, value)| value.is_some())
        .map(|(key, _)| *key)
        .collect();
    let first = *given.first()?;
    if !url.is_some_and(|url| url.starts_with("rediss")) {
        problems.push(
            first,
            "only valid with a TLS store URL (rediss://, rediss-cluster://, rediss-sentinel://)",
        );
        return None;
    }
    let roots = match raw.ca_file {
        Some(path) => problems.take("store.tls_ca_file", ca_roots(Path::new(path)))?,
        None => problems.take("store.tls_ca_file", system_roots())?,
    };
    let builder = ClientConfig::builder().with_root_certificates(roots);
    let (client, client_identity) = match (raw.cert_file, raw.key_file) {
        (None, None) => (builder.with_no_client_auth(), None),
        (Some(cert), Some(key)) => {
            let chain = problems.take("store.tls_cert_file", certificates(Path::new(cert)));
            let private = problems.take("store.tls_key_file", private_key(Path::new(key)));
            let client = builder
                .with_client_auth_cert(chain?, private?)
                .map_err(|e| format!("{cert} and {key} are not a usable certificate and key: {e}"));
            let client = problems.take("store.tls_cert_file", client)?;
            (client, Some((PathBuf::from(cert), PathBuf::from(key))))
        }
        (Some(_), None) => {
            problems.push("store.tls_key_file", "required with store.tls_cert_file");
            return None;
        }
        (None, Some(_)) => {
            problems.push("store.tls_cert_file", "required with store.tls_key_file");
            return None;
        }
    };
    Some(RedisTls {
        ca_file: raw.ca_file.map(PathBuf::from),
        client_identity,
        client: Arc::new(client),
    })
}

/// Every certificate of a PEM file, at least one.
fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let shown = path.display();
    let text = std::fs::read(path).map_err(|e| format!("cannot read {shown}: {e}"))?;
    let certs = CertificateDer::pem_slice_iter(&text)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{shown} is not valid PEM: {e}"))?;
    if certs.is_empty() {
        return Err(format!(
            "{shown} holds no PEM certificate (-----BEGIN CERTIFICATE-----)"
        ));
    }
    Ok(certs)
}

/// The CAs of `tls_ca_file`, each a valid trust anchor.
fn ca_roots(path: &Path) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for cert in certificates(path)? {
        roots.add(cert).map_err(|e| {
            format!(
                "{} holds a certificate that is not a usable CA: {e}",
                path.display()
            )
        })?;
    }
    Ok(roots)
}

/// The system's roots (what fred's default `rediss://` connector trusts),
/// for a client certificate without `tls_ca_file`.
fn system_roots() -> Result<RootCertStore, String> {
    let found = fred::rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        return Err(format!(
            "no system CA certificates found ({:?}); give the server's CA in store.tls_ca_file",
            found.errors
        ));
    }
    Ok(roots)
}

/// The private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let shown = path.display();
    let text = std::fs::read(path).map_err(|e| format!("cannot read {shown}: {e}"))?;
    PrivateKeyDer::from_pem_slice(&text)
        .map_err(|e| format!("{shown} holds no usable PEM private key: {e}"))
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use crate::config::tests::{MINIMAL, problems_of};

    fn redis(url: &str, extra: &str) -> String {
        MINIMAL.replace(
            "kind = \"embedded\"\n        path = \"/tmp/x.redb\"",
            &format!("kind = \"redis\"\nurl = \"{url}\"\n{extra}"),
        )
    }

    #[test]
    fn tls_keys_need_a_tls_url() {
        let err = problems_of(&redis(
            "redis://127.0.0.1:6379/0",
            "tls_ca_file = \"/etc/ssl/certs/ca-certificates.crt\"",
        ));
        assert!(
            err.contains("store.tls_ca_file: only valid with a TLS store URL"),
            "{err}"
        );
    }

    #[test]
    fn unreadable_and_invalid_pem_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not a certificate\n").unwrap();
        let missing = dir.path().join("missing.pem");
        let text = redis(
            "rediss://127.0.0.1:6380/0",
            &format!(
                "tls_ca_file = \"{}\"\ntls_cert_file = \"{}\"\ntls_key_file = \"{}\"",
                junk.display(),
                missing.display(),
                junk.display()
            ),
        );
        let err = problems_of(&text);
        assert!(
            err.contains(&format!(
                "store.tls_ca_file: {} holds no PEM certificate",
                junk.display()
            )),
            "{err}"
        );
        let err =
            problems_of(&text.replace(&format!("tls_ca_file = \"{}\"\n", junk.display()), ""));
        assert!(
            err.contains(&format!(
                "store.tls_cert_file: cannot read {}",
                missing.display()
            )),
            "{err}"
        );
        assert!(
            err.contains(&format!(
                "store.tls_key_file: {} holds no usable PEM private key",
                junk.display()
            )),
            "{err}"
        );
    }

    #[test]
    fn a_certificate_needs_its_key() {
        let err = problems_of(&redis(
            "rediss://127.0.0.1:6380/0",
            "tls_cert_file = \"/nonexistent/client.pem\"",
        ));
        assert!(
            err.contains("store.tls_key_file: required with store.tls_cert_file"),
            "{err}"
        );
    }

    #[test]
    fn no_tls_keys_leave_fred_its_default() {
        let config = Config::parse(&redis("rediss://127.0.0.1:6380/0", "")).unwrap();
        assert!(config.store.tls.is_none());
    }
}
