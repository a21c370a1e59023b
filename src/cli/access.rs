//! Where the admin listener is and which token to present, from the flag,
//! the environment or the configuration file, in that order.
//!
//! The token never comes from a flag's value: a command line is readable
//! by every user through `ps` and `/proc`, and lands in shell history.
//! Its sources are a file (`--token-file`), `IDEMGATE_ADMIN_TOKEN`, or the
//! configuration's own `[admin] token` source resolved the way the server
//! resolves it ([`Secret::resolve`]), so one file serves both.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;

use http::uri::Authority;

use super::CliError;
use crate::config::AdminAccess;
use crate::config::DEFAULT_ADMIN_ADDR;
use crate::signature::Secret;

/// The environment variable naming the admin listener.
pub const ADDR_ENV: &str = "IDEMGATE_ADMIN_ADDR";
/// The environment variable holding the admin token itself.
pub const TOKEN_ENV: &str = "IDEMGATE_ADMIN_TOKEN";

/// The admin listener to call and the token to present.
#[derive(Debug)]
pub(crate) struct Endpoint {
    /// `host:port`, for the request URI.
    pub(crate) authority: Authority,
    /// The bearer token, when any source has one.
    pub(crate) token: Option<Secret>,
}

/// What the command line says about the endpoint.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sources<'a> {
    /// `--addr`.
    pub(crate) addr: Option<&'a str>,
    /// `--token-file`.
    pub(crate) token_file: Option<&'a Path>,
    /// `-c/--config` (or `IDEMGATE_CONFIG`).
    pub(crate) config: Option<&'a Path>,
}

impl Sources<'_> {
    /// The endpoint, each part from the first source that has it: the
    /// flag, then the environment (read through `env`), then the
    /// configuration file, which is read only when a part is still missing.
    pub(crate) fn resolve(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Endpoint, CliError> {
        let mut file: Option<AdminAccess> = None;
        let mut from_file = || -> Result<Option<AdminAccess>, CliError> {
            let Some(path) = self.config else {
                return Ok(None);
            };
            if file.is_none() {
                file = Some(AdminAccess::read(path).map_err(CliError::Usage)?);
            }
            Ok(file.clone())
        };
        let authority = match (self.addr, env(ADDR_ENV).filter(|a| !a.is_empty())) {
            (Some(flag), _) => authority(flag, "--addr")?,
            (None, Some(env)) => authority(&env, ADDR_ENV)?,
            (None, None) => match from_file()? {
                Some(access) => socket_authority(access.address),
                None => authority(DEFAULT_ADMIN_ADDR, "the default address")?,
            },
        };
        let token = if let Some(path) = self.token_file {
            Some(
                Secret::resolve(&format!("file:{}", path.display()))
                    .map_err(|e| CliError::Usage(format!("--token-file: {e}")))?,
            )
        } else if let Some(value) = env(TOKEN_ENV) {
            if value.is_empty() {
                return Err(CliError::Usage(format!("{TOKEN_ENV} is set but empty")));
            }
            Some(Secret::from_bytes(value.into_bytes()))
        } else {
            match from_file()?.and_then(|access| access.token) {
                Some(spec) => Some(Secret::resolve(&spec).map_err(|e| {
                    CliError::Usage(format!(
                        "[admin] token: {e} (set {TOKEN_ENV} or pass --token-file instead)"
                    ))
                })?),
                None => None,
            }
        };
        Ok(Endpoint { authority, token })
    }
}

/// `text` as `host:port`; the port is required (there is no default
/// HTTP port for an admin listener).
fn authority(text: &str, source: &str) -> Result<Authority, CliError> {
    if let Ok(address) = text.parse::<SocketAddr>() {
        return Ok(socket_authority(address));
    }
    let parsed: Authority = text
        .parse()
        .map_err(|_| CliError::Usage(format!("{source}: {text:?} is not HOST:PORT")))?;
    if parsed.port_u16().is_none() || text.contains('@') || text.contains('/') {
        return Err(CliError::Usage(format!(
            "{source}: {text:?} is not HOST:PORT"
        )));
    }
    Ok(parsed)
}

/// A socket address as an authority; a listener bound to every interface
/// (`0.0.0.0`, `[::]`) is called on loopback, as `healthcheck` does.
fn socket_authority(mut address: SocketAddr) -> Authority {
    if address.ip().is_unspecified() {
        address.set_ip(match address.ip() {
            IpAddr::V4(_) => Ipv4Addr::LOCALHOST.into(),
            IpAddr::V6(_) => Ipv6Addr::LOCALHOST.into(),
        });
    }
    address
        .to_string()
        .parse()
        .expect("a socket address is an authority")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("idemgate.toml");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    fn token(endpoint: &Endpoint) -> Option<Vec<u8>> {
        endpoint.token.as_ref().map(|t| t.expose().to_vec())
    }

    #[test]
    fn the_flag_beats_the_environment_which_beats_the_file() {
        let (_dir, path) =
            config("[listen]\nadmin = \"0.0.0.0:7001\"\n[admin]\ntoken = \"literal:from-file\"\n");
        let (_tdir, token_file) = config("from-token-file\n");
        let env = |name: &str| match name {
            ADDR_ENV => Some("127.0.0.1:7002".to_owned()),
            TOKEN_ENV => Some("from-env".to_owned()),
            _ => None,
        };
        let none = |_: &str| None;
        let sources = Sources {
            addr: None,
            token_file: None,
            config: Some(&path),
        };
        let from_file = sources.resolve(none).unwrap();
        // 0.0.0.0 is called on loopback.
        assert_eq!(from_file.authority.as_str(), "127.0.0.1:7001");
        assert_eq!(token(&from_file).as_deref(), Some(&b"from-file"[..]));

        let from_env = sources.resolve(env).unwrap();
        assert_eq!(from_env.authority.as_str(), "127.0.0.1:7002");
        assert_eq!(token(&from_env).as_deref(), Some(&b"from-env"[..]));

        let flags = Sources {
            addr: Some("localhost:7003"),
            token_file: Some(&token_file),
            config: Some(&path),
        };
        let from_flags = flags.resolve(env).unwrap();
        assert_eq!(from_flags.authority.as_str(), "localhost:7003");
        assert_eq!(token(&from_flags).as_deref(), Some(&b"from-token-file"[..]));
    }

    #[test]
    fn without_any_source_the_default_address_and_no_token() {
        let sources = Sources {
            addr: None,
            token_file: None,
            config: None,
        };
        let endpoint = sources.resolve(|_| None).unwrap();
        assert_eq!(endpoint.authority.as_str(), DEFAULT_ADMIN_ADDR);
        assert!(endpoint.token.is_none());
    }

    #[test]
    fn the_file_is_read_only_when_a_part_is_missing() {
        let missing = Path::new("/nonexistent/idemgate.toml");
        let (_tdir, token_file) = config("t\n");
        let complete = Sources {
            addr: Some("127.0.0.1:1"),
            token_file: Some(&token_file),
            config: Some(missing),
        };
        assert!(complete.resolve(|_| None).is_ok());
        let incomplete = Sources {
            token_file: None,
            ..complete
        };
        assert!(matches!(
            incomplete.resolve(|_| None),
            Err(CliError::Usage(_))
        ));
    }

    #[test]
    fn bad_addresses_and_unresolvable_tokens_are_usage_errors() {
        for bad in [
            "127.0.0.1",
            "http://127.0.0.1:1",
            "user@host:1",
            "host:1/x",
            "",
        ] {
            assert!(authority(bad, "--addr").is_err(), "{bad}");
        }
        assert_eq!(authority("[::1]:8790", "x").unwrap().as_str(), "[::1]:8790");
        let (_dir, path) = config("[admin]\ntoken = \"env:IDEMGATE_TEST_NOT_SET_ANYWHERE\"\n");
        let sources = Sources {
            addr: Some("127.0.0.1:1"),
            token_file: None,
            config: Some(&path),
        };
        match sources.resolve(|_| None) {
            Err(CliError::Usage(message)) => {
                assert!(message.contains(TOKEN_ENV), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }
}
