//! Which server a Redis primary runs (`INFO server`: Redis or Valkey,
//! and its version), and whether idemgate runs on it.
//!
//! The supported servers are stated for users in `docs/operations.md`
//! ("Supported servers"): Redis 6.2 and later (`GETEX`, `ZRANGE …
//! BYSCORE LIMIT`, `XTRIM … MINID`), and every Valkey (each reports Redis
//! 7.2.4 compatibility). `WAITAOF` (Redis 7.2, Valkey) is not required:
//! without it `store::durability` needs `appendfsync always` instead.
//!
//! A server below 6.2 is refused at start-up with one line
//! naming it and what to run instead; one met later (a failover to an old
//! replica, a server swapped under a running instance) fails `/readyz`
//! with the same words. Each primary's name and version are shown in
//! `/admin/info` (`store.durability.servers`).

/// The oldest Redis version (as a server reports `redis_version`, which
/// Valkey sets to the Redis release it is compatible with) idemgate runs
/// on.
pub(crate) const OLDEST_REDIS: (u32, u32, u32) = (6, 2, 0);

/// What idemgate needs of that version, for the refusal's words.
const NEEDED_FOR: &str = "GETEX, ZRANGE BYSCORE and XTRIM MINID";

/// Why `server` can not serve idemgate, in the words an operator acts on;
/// `None` when it can.
pub(crate) fn unsupported(server: &Server) -> Option<String> {
    if server.redis_compatible >= OLDEST_REDIS {
        return None;
    }
    let (major, minor, _) = OLDEST_REDIS;
    Some(format!(
        "runs {server}; idemgate needs Redis {major}.{minor} or later, or Valkey \
         ({NEEDED_FOR})"
    ))
}

/// Which server a primary runs, from `INFO server`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Server {
    /// `redis` or `valkey` (`server_name`, absent before Valkey).
    pub name: String,
    /// `major.minor.patch` of that server (`valkey_version` for Valkey).
    pub version: (u32, u32, u32),
    /// The Redis version it is compatible with (`redis_version`).
    pub redis_compatible: (u32, u32, u32),
}

impl Server {
    /// Reads `INFO server`; `None` when it names no version.
    pub(crate) fn from_info(text: &str) -> Option<Self> {
        let redis_compatible = parse_version(info_field(text, "redis_version")?)?;
        let name = info_field(text, "server_name")
            .unwrap_or("redis")
            .to_owned();
        let own = format!("{name}_version");
        let version = info_field(text, &own)
            .and_then(parse_version)
            .unwrap_or(redis_compatible);
        Some(Self {
            name,
            version,
            redis_compatible,
        })
    }

    /// Whether `WAITAOF` exists (Redis 7.2; every Valkey says 7.2.4).
    pub(crate) fn has_waitaof(&self) -> bool {
        self.redis_compatible >= (7, 2, 0)
    }
}

impl std::fmt::Display for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (major, minor, patch) = self.version;
        write!(f, "{} {major}.{minor}.{patch}", self.name)
    }
}

/// `7.0.15` → `(7, 0, 15)`; a missing part is 0.
fn parse_version(text: &str) -> Option<(u32, u32, u32)> {
    let mut parts = text.trim().split('.').map(str::parse::<u32>);
    let major = parts.next()?.ok()?;
    let minor = parts.next().transpose().ok()?.unwrap_or(0);
    let patch = parts.next().transpose().ok()?.unwrap_or(0);
    Some((major, minor, patch))
}

/// The value of `name:value` in an `INFO` reply.
pub(crate) fn info_field<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key == name).then(|| value.trim())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(info: &str) -> Server {
        Server::from_info(info).expect("a version")
    }

    #[test]
    fn versions_read_with_missing_parts_as_zero() {
        assert_eq!(parse_version("7"), Some((7, 0, 0)));
        assert_eq!(parse_version("6.2"), Some((6, 2, 0)));
        assert_eq!(parse_version("x.1"), None);
    }

    #[test]
    fn redis_from_6_2_and_every_valkey_are_supported() {
        for info in [
            "redis_version:6.2.0\r\n",
            "redis_version:7.0.15\r\n",
            "redis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:9.1.2\r\n",
            "redis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:7.2.5\r\n",
        ] {
            assert_eq!(unsupported(&server(info)), None, "{info}");
        }
    }

    #[test]
    fn an_older_redis_is_named_with_what_to_run() {
        for (info, name) in [
            ("redis_version:6.0.16\r\n", "redis 6.0.16"),
            ("redis_version:5.0.14\r\n", "redis 5.0.14"),
            ("redis_version:6.1.99\r\n", "redis 6.1.99"),
        ] {
            let why = unsupported(&server(info)).expect("refused");
            assert!(why.starts_with(&format!("runs {name};")), "{why}");
            assert!(why.contains("Redis 6.2 or later, or Valkey"), "{why}");
        }
    }
}
