//! What a process needs to reach a running instance's admin listener, read
//! from the configuration file alone: `[listen] admin` and the *source* of
//! `[admin] token`. Nothing else is parsed or validated and no secret is
//! resolved here, so `idemgate healthcheck` and `idemgate admin` work on a
//! host where the routes' secrets (an `env:` only the service sees, a
//! `file:` only its user reads) are out of reach.

use std::net::SocketAddr;
use std::path::Path;

use super::listen::DEFAULT_ADMIN_ADDR;

/// The admin listener's address and token source a configuration names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminAccess {
    /// `[listen] admin`, or its default.
    pub address: SocketAddr,
    /// `[admin] token` as written (`env:NAME`, `file:PATH`,
    /// `literal:VALUE`), unresolved: resolve it with
    /// [`crate::signature::Secret::resolve`] only when it is needed.
    pub token: Option<String>,
}

impl AdminAccess {
    /// Reads `[listen] admin` and `[admin] token` from the file at `path`.
    pub fn read(path: &Path) -> Result<Self, String> {
        #[derive(serde::Deserialize)]
        struct Listen {
            admin: Option<String>,
        }
        #[derive(serde::Deserialize)]
        struct Admin {
            token: Option<String>,
        }
        #[derive(serde::Deserialize)]
        struct Partial {
            listen: Option<Listen>,
            admin: Option<Admin>,
        }
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let partial: Partial =
            toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        let admin = partial
            .listen
            .and_then(|l| l.admin)
            .unwrap_or_else(|| DEFAULT_ADMIN_ADDR.to_owned());
        let address = admin
            .parse()
            .map_err(|_| format!("listen.admin: {admin:?} is not an address"))?;
        Ok(Self {
            address,
            token: partial.admin.and_then(|a| a.token),
        })
    }
}

/// The admin listener address a configuration file names, read without
/// resolving secrets or validating anything else (for `idemgate healthcheck`).
pub fn admin_address(path: &Path) -> Result<SocketAddr, String> {
    AdminAccess::read(path).map(|access| access.address)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<AdminAccess, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("idemgate.toml");
        std::fs::write(&path, text).unwrap();
        AdminAccess::read(&path)
    }

    #[test]
    fn reads_the_address_and_the_token_source_only() {
        // A route whose secret would not resolve here does not matter.
        let access = read(
            "[listen]\nadmin = \"127.0.0.1:9999\"\n[admin]\ntoken = \"env:NOT_SET_ANYWHERE\"\n\
             [[route]]\nname = \"x\"\n[route.signature]\nsecrets = [\"env:ALSO_NOT_SET\"]\n",
        )
        .unwrap();
        assert_eq!(access.address, "127.0.0.1:9999".parse().unwrap());
        assert_eq!(access.token.as_deref(), Some("env:NOT_SET_ANYWHERE"));

        let defaults = read("").unwrap();
        assert_eq!(defaults.address, DEFAULT_ADMIN_ADDR.parse().unwrap());
        assert_eq!(defaults.token, None);

        assert!(read("[listen]\nadmin = \"nowhere\"\n").is_err());
    }
}
