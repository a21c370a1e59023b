//! Secrets: resolved from `env:`, `file:` or `literal:`, zeroed on drop,
//! redacted whenever printed, and re-readable on SIGHUP.
//!
//! A [`Secret`] is a shared cell: clones of a configuration share it, so
//! [`Secret::reload`] (run for every `file:` secret when the process gets
//! SIGHUP) changes the value every route sees without restarting or
//! swapping the configuration. A reload that fails (file missing, not
//! decodable, or weaker than the scheme's [`Strength`]) keeps the old
//! value and reports why ([`ReloadError`]). Values live in `Zeroizing`
//! buffers, so a replaced or dropped secret is wiped from memory; `Debug`
//! prints only where the secret came from.
//!
//! A secret is checked against its scheme's [`Strength`] when the
//! configuration is loaded and again on every reload, after the scheme's
//! own decoding: a one-byte key (`literal:a`, a file holding a space, an
//! Adyen key of `00`, a half-written file) is forgeable by brute force, so
//! it never becomes the key a route verifies with.
//!
//! It is key material, so it lives beside the schemes that use it; the
//! configuration (`crate::config`) resolves every secret through it: the
//! routes' keys, the admin token and the Redis credentials.

use std::fmt;
use std::ops::Deref;
use std::path::PathBuf;
use std::sync::{Arc, RwLock, RwLockReadGuard};

use zeroize::Zeroizing;

/// Turns the text an operator stores into the key bytes a scheme uses
/// (e.g. base64-decoding a `whsec_` secret); `None` if it is not valid.
pub type Derivation = fn(&[u8]) -> Option<Vec<u8>>;

/// The least a scheme accepts as key material, measured in key bytes
/// after the scheme's own decoding (`whsec_` base64, Adyen's hex).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Strength {
    /// Fewest key bytes.
    pub min: usize,
    /// Most key bytes (`usize::MAX`: no bound). A sender that issues one
    /// fixed length sets `min == max`, so a truncated key is refused too.
    pub max: usize,
    /// What the sender issues, quoted in the refusal so it says what to
    /// change (e.g. `"Adyen issues 64 hex characters (32 bytes)"`).
    pub issued: &'static str,
    /// Only visible ASCII (`!` to `~`): a value a client presents in an
    /// HTTP header (the admin token), where a space at either end is cut
    /// and other bytes can not be typed or sent reliably.
    pub header_safe: bool,
}

impl Strength {
    /// At least `min` key bytes.
    pub const fn at_least(min: usize, issued: &'static str) -> Self {
        Self {
            min,
            max: usize::MAX,
            issued,
            header_safe: false,
        }
    }

    /// A bearer token a client sends in `Authorization`: at least one
    /// byte, all visible ASCII.
    pub const BEARER: Self = Self {
        header_safe: true,
        ..Self::at_least(1, "a token is sent in an Authorization header")
    };

    /// Exactly `len` key bytes.
    pub const fn exactly(len: usize, issued: &'static str) -> Self {
        Self {
            min: len,
            max: len,
            issued,
            header_safe: false,
        }
    }

    /// Refuses key bytes shorter or longer than the bounds, or made of
    /// whitespace only; the message says what the scheme needs, never the
    /// value.
    pub fn check(&self, key: &[u8]) -> Result<(), String> {
        let len = key.len();
        let unit = if len == 1 { "byte" } else { "bytes" };
        if key.iter().all(u8::is_ascii_whitespace) {
            return Err(format!(
                "is only whitespace ({len} {unit}); {}",
                self.issued
            ));
        }
        let wanted = if self.min == self.max {
            format!("exactly {}", self.min)
        } else {
            format!("at least {}", self.min)
        };
        if len < self.min || len > self.max {
            return Err(format!(
                "is {len} {unit} long, {wanted} needed: {}",
                self.issued
            ));
        }
        if self.header_safe
            && let Some(at) = key.iter().position(|b| !b.is_ascii_graphic())
        {
            return Err(format!(
                "has a byte a client can not send as it is (byte {} of {len}: a space, a \
                 control character or not ASCII); only visible ASCII, {}",
                at + 1,
                self.issued
            ));
        }
        Ok(())
    }
}

/// Why a reload kept the old value (the `reason` label of
/// `idemgate_secret_reload_failures_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReloadFailure {
    /// The file could not be read (missing, no permission).
    Unreadable,
    /// The text is not a key of the scheme's form (not hex, not base64,
    /// not a PEM key).
    Invalid,
    /// The key is weaker than the scheme's [`Strength`] (empty,
    /// whitespace only, truncated).
    Weak,
}

impl ReloadFailure {
    /// Every reason, for zeroing the counters at start-up.
    pub const ALL: [Self; 3] = [Self::Unreadable, Self::Invalid, Self::Weak];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unreadable => "unreadable",
            Self::Invalid => "invalid",
            Self::Weak => "weak",
        }
    }
}

/// A reload that kept the old value: why, and a message naming the
/// source (never the value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReloadError {
    /// The label reason.
    pub reason: ReloadFailure,
    /// What went wrong, naming the source.
    pub message: String,
}

impl fmt::Display for ReloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

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
    strength: Option<Strength>,
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
                strength: None,
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
        Ok(self.rebuilt(Zeroizing::new(value), Some(derive), self.cell.strength))
    }

    /// This secret held to `strength` from now on: refused now if weaker
    /// (the message says why and what the sender issues), and every later
    /// reload that is weaker keeps the old value.
    pub fn require(&self, strength: Strength) -> Result<Self, String> {
        strength.check(&self.expose())?;
        let value = Zeroizing::new(self.expose().to_vec());
        Ok(self.rebuilt(value, self.cell.derive, Some(strength)))
    }

    fn rebuilt(
        &self,
        value: Zeroizing<Vec<u8>>,
        derive: Option<Derivation>,
        strength: Option<Strength>,
    ) -> Self {
        Self {
            cell: Arc::new(Cell {
                value: RwLock::new(value),
                source: self.cell.source.clone(),
                file: self.cell.file.clone(),
                derive,
                strength,
            }),
        }
    }

    /// Re-reads a `file:` secret, decodes it and checks its strength.
    /// `Ok(true)`: the value changed; `Ok(false)`: not a file secret, or
    /// unchanged; `Err`: the old value stays.
    pub fn reload(&self) -> Result<bool, ReloadError> {
        let Some(path) = &self.cell.file else {
            return Ok(false);
        };
        let source = &self.cell.source;
        let fail = |reason, message| ReloadError { reason, message };
        let mut fresh = read_file(path).map_err(|e| fail(ReloadFailure::Unreadable, e))?;
        if fresh.iter().all(u8::is_ascii_whitespace) {
            return Err(fail(
                ReloadFailure::Weak,
                format!("{source} is empty or only whitespace"),
            ));
        }
        if let Some(derive) = self.cell.derive {
            fresh = Zeroizing::new(derive(&fresh).ok_or_else(|| {
                fail(ReloadFailure::Invalid, format!("{source}: not a valid key"))
            })?);
        }
        if let Some(strength) = self.cell.strength {
            strength
                .check(&fresh)
                .map_err(|why| fail(ReloadFailure::Weak, format!("{source}: the key {why}")))?;
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
    use std::path::PathBuf;

    /// A `file:` secret read from a fresh temporary file holding
    /// `content`: the directory lasts as long as the returned handle, and
    /// the test rewrites the file at the path to have it reloaded.
    fn file_secret(content: &str) -> (tempfile::TempDir, PathBuf, Secret) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        std::fs::write(&path, content).unwrap();
        let secret = Secret::resolve(&format!("file:{}", path.display())).unwrap();
        (dir, path, secret)
    }

    #[test]
    fn file_secrets_trim_and_reload_in_every_clone() {
        let (_dir, path, secret) = file_secret("abc\n");
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
        let (_dir, path, secret) = file_secret("ab");
        let upper: Derivation = |raw| Some(raw.to_ascii_uppercase());
        let secret = secret.derived(upper).unwrap();
        assert_eq!(&*secret.expose(), b"AB");
        std::fs::write(&path, "cd").unwrap();
        assert_eq!(secret.reload(), Ok(true));
        assert_eq!(&*secret.expose(), b"CD");
    }

    const FLOOR: Strength = Strength::at_least(16, "the sender issues 32");

    #[test]
    fn strength_refuses_short_long_and_blank_keys_without_printing_them() {
        assert!(FLOOR.check(b"0123456789abcdef").is_ok());
        for weak in [
            &b"a"[..],
            b" ",
            b"                ",
            b"\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t",
        ] {
            let why = FLOOR.check(weak).unwrap_err();
            assert!(why.contains("the sender issues 32"), "{why}");
        }
        assert_eq!(
            FLOOR.check(b"abc").unwrap_err(),
            "is 3 bytes long, at least 16 needed: the sender issues 32"
        );
        let fixed = Strength::exactly(32, "32 bytes");
        assert!(fixed.check(&[7; 32]).is_ok());
        assert!(fixed.check(&[7; 31]).unwrap_err().contains("exactly 32"));
        assert!(fixed.check(&[7; 33]).is_err());
        assert_eq!(
            fixed.check(&[0x00]).unwrap_err(),
            "is 1 byte long, exactly 32 needed: 32 bytes"
        );
    }

    #[test]
    fn a_weak_reload_keeps_the_old_value_and_says_why() {
        let (_dir, path, secret) = file_secret("first-secret-0123456789\n");
        let secret = secret.require(FLOOR).unwrap();
        for (content, reason) in [
            (" \n", ReloadFailure::Weak),
            ("first-sec", ReloadFailure::Weak),
            ("\n", ReloadFailure::Weak),
        ] {
            std::fs::write(&path, content).unwrap();
            let error = secret.reload().unwrap_err();
            assert_eq!(error.reason, reason, "{content:?}");
            assert!(error.message.starts_with("file:"), "{error}");
            assert!(!error.message.contains("first-sec"), "{error}");
            assert_eq!(&*secret.expose(), b"first-secret-0123456789");
        }
        std::fs::remove_file(&path).unwrap();
        assert_eq!(
            secret.reload().unwrap_err().reason,
            ReloadFailure::Unreadable
        );
        std::fs::write(&path, "second-secret-0123456789").unwrap();
        assert_eq!(secret.reload(), Ok(true));
        assert_eq!(&*secret.expose(), b"second-secret-0123456789");
    }

    #[test]
    fn a_decoded_key_is_measured_after_decoding() {
        let genuine = "F54B4779C76059EFB49904F90CE851613F3266A7393791D6F8FAC55BA2C0C186";
        let (_dir, path, key) = file_secret(genuine);
        let hex: Derivation = |raw| hex::decode(raw).ok().filter(|k| !k.is_empty());
        let fixed = Strength::exactly(32, "64 hex characters");
        let key = key.derived(hex).unwrap().require(fixed).unwrap();
        let before = key.expose().to_vec();
        std::fs::write(&path, "00").unwrap();
        assert_eq!(key.reload().unwrap_err().reason, ReloadFailure::Weak);
        std::fs::write(&path, &genuine[..62]).unwrap();
        assert_eq!(
            key.reload().unwrap_err().reason,
            ReloadFailure::Weak,
            "truncated"
        );
        std::fs::write(&path, "zz").unwrap();
        assert_eq!(key.reload().unwrap_err().reason, ReloadFailure::Invalid);
        assert_eq!(*key.expose(), *before, "the genuine key stays");
        assert!(
            Secret::from_bytes("00")
                .derived(hex)
                .unwrap()
                .require(fixed)
                .is_err()
        );
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
