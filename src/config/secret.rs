//! Secrets: resolved from `env:`, `file:` or `literal:`, zeroed on drop,
//! redacted whenever printed, and re-readable on SIGHUP.
//!
//! A [`Secret`] is a shared cell: clones of a configuration share it, so
//! [`Secret::reload`] (run for every `file:` secret when the process gets
//! SIGHUP) changes the value every route sees without restarting or
//! swapping the configuration. A reload that fails (file missing, empty,
//! not decodable) keeps the old value and reports why. Values live in
//! `Zeroizing` buffers, so a replaced or dropped secret is wiped from
//! memory; `Debug` prints only where the secret came from.

use std::fmt;
use std::ops::Deref;
use std::path::PathBuf;
use std::sync::{Arc, RwLock, RwLockReadGuard};

use zeroize::Zeroizing;

/// Turns the text an operator stores into the key bytes a scheme uses
/// (e.g. base64-decoding a `whsec_` secret); `None` if it is not valid.
pub type Derivation = fn(&[u8]) -> Option<Vec<u8>>;

/// A secret value: redacted whenever printed.
#[derive(Clone)]
pub struct Secret {
    cell: Arc<Cell>,
}

struct Cell {
    value: RwLock<Zeroizing<Vec<u8>>>,
    source: String,
    file: Option<PathBuf>,
    derive: Option<Derivation>,
}

/// Borrowed secret bytes; call sites are the MAC and the token compare only.
pub struct Exposed<'a>(RwLockReadGuard<'a, Zeroizing<Vec<u8>>>);

impl fmt::Debug for Exposed<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Exposed(<redacted>)")
    }
}

impl Deref for Exposed<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.0.as_slice()
    }
}

fn read_file(path: &std::path::Path) -> Result<Zeroizing<Vec<u8>>, String> {
    let mut bytes = Zeroizing::new(
        std::fs::read(path)
            .map_err(|e| format!("cannot read secret file {}: {e}", path.display()))?,
    );
    while bytes.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
        bytes.pop();
    }
    Ok(bytes)
}

impl Secret {
    fn new(value: Zeroizing<Vec<u8>>, source: String, file: Option<PathBuf>) -> Self {
        Self {
            cell: Arc::new(Cell {
                value: RwLock::new(value),
                source,
                file,
                derive: None,
            }),
        }
    }

    /// Resolves `env:NAME`, `file:PATH` or `literal:VALUE`.
    pub fn resolve(spec: &str) -> Result<Self, String> {
        let (kind, argument) = spec
            .split_once(':')
            .ok_or_else(|| "a secret is written env:NAME, file:PATH or literal:VALUE".to_owned())?;
        let (value, file) = match kind {
            "env" => (
                Zeroizing::new(
                    std::env::var(argument)
                        .map_err(|_| format!("environment variable {argument} is not set"))?
                        .into_bytes(),
                ),
                None,
            ),
            "file" => (read_file(argument.as_ref())?, Some(PathBuf::from(argument))),
            "literal" => (Zeroizing::new(argument.as_bytes().to_vec()), None),
            _ => {
                return Err(format!(
                    "unknown secret source {kind:?}; expected env:NAME, file:PATH or literal:VALUE"
                ));
            }
        };
        if value.is_empty() {
            return Err(format!("secret from {kind}:{argument} is empty"));
        }
        let source = match kind {
            "literal" => "literal:<redacted>".to_owned(),
            _ => spec.to_owned(),
        };
        Ok(Self::new(value, source, file))
    }

    /// A secret given directly (tests, the demo).
    pub fn from_bytes(value: impl Into<Vec<u8>>) -> Self {
        Self::new(
            Zeroizing::new(value.into()),
            "literal:<redacted>".to_owned(),
            None,
        )
    }

    /// The secret bytes.
    pub fn expose(&self) -> Exposed<'_> {
        Exposed(self.cell.value.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// A secret whose bytes are `derive` of this one's, re-derived on every
    /// reload of the same source.
    pub fn derived(&self, derive: Derivation) -> Result<Self, String> {
        let value = derive(&self.expose()).ok_or("not a valid key")?;
        Ok(Self {
            cell: Arc::new(Cell {
                value: RwLock::new(Zeroizing::new(value)),
                source: self.cell.source.clone(),
                file: self.cell.file.clone(),
                derive: Some(derive),
            }),
        })
    }

    /// Re-reads a `file:` secret. `Ok(true)`: the value changed; `Ok(false)`:
    /// not a file secret, or unchanged; `Err`: the old value stays.
    pub fn reload(&self) -> Result<bool, String> {
        let Some(path) = &self.cell.file else {
            return Ok(false);
        };
        let mut fresh = read_file(path)?;
        if let Some(derive) = self.cell.derive {
            fresh = Zeroizing::new(
                derive(&fresh).ok_or_else(|| format!("{}: not a valid key", self.cell.source))?,
            );
        }
        if fresh.is_empty() {
            return Err(format!("{} is empty", self.cell.source));
        }
        let mut value = self.cell.value.write().unwrap_or_else(|e| e.into_inner());
        if **value == *fresh {
            return Ok(false);
        }
        *value = fresh;
        Ok(true)
    }
}

impl Secret {
    /// The path of a `file:` secret (what the secret watcher polls).
    pub fn file(&self) -> Option<&std::path::Path> {
        self.cell.file.as_deref()
    }

    /// Where the value comes from (`env:NAME`, `file:PATH`, or
    /// `literal:<redacted>`): what `check-config` prints in its place.
    pub fn source(&self) -> &str {
        &self.cell.source
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret(<redacted, from {}>)", self.cell.source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_secrets_trim_and_reload_in_every_clone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        std::fs::write(&path, "abc\n").unwrap();
        let secret = Secret::resolve(&format!("file:{}", path.display())).unwrap();
        let shared = secret.clone();
        assert_eq!(&*secret.expose(), b"abc");
        assert_eq!(secret.reload(), Ok(false));
        std::fs::write(&path, "def\r\n").unwrap();
        assert_eq!(secret.reload(), Ok(true));
        assert_eq!(&*shared.expose(), b"def", "clones share the cell");
        std::fs::write(&path, "").unwrap();
        assert!(secret.reload().is_err());
        assert_eq!(
            &*shared.expose(),
            b"def",
            "a failed reload keeps the old value"
        );
    }

    #[test]
    fn derived_secrets_rederive_on_reload() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        std::fs::write(&path, "ab").unwrap();
        let upper: Derivation = |raw| Some(raw.to_ascii_uppercase());
        let secret = Secret::resolve(&format!("file:{}", path.display()))
            .unwrap()
            .derived(upper)
            .unwrap();
        assert_eq!(&*secret.expose(), b"AB");
        std::fs::write(&path, "cd").unwrap();
        assert_eq!(secret.reload(), Ok(true));
        assert_eq!(&*secret.expose(), b"CD");
    }

    #[test]
    fn never_printed() {
        let secret = Secret::resolve("literal:hunter2").unwrap();
        assert_eq!(
            format!("{secret:?}"),
            "Secret(<redacted, from literal:<redacted>>)"
        );
        assert!(Secret::resolve("env:IDEMGATE_SURELY_UNSET_VAR").is_err());
        assert!(Secret::resolve("vault:x").is_err());
    }
}
