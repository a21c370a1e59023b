//! Credentials out of URLs before they are printed.
//!
//! `check-config` prints the effective configuration and start-up logs name
//! the store and upstreams, so every URL that can carry a credential goes
//! through [`redact_url`] first: the password of the userinfo (the whole
//! userinfo when it has no `:`, since a lone user part is often a token),
//! and the value of every query parameter that names a credential
//! (`password`, `sentinelPassword`, `token`, …). Host lists of the
//! cluster and sentinel forms (`h1:p1,h2:p2`, `?node=…`) keep their hosts.
//!
//! A URL that does not parse the expected way is not guessed at: if an `@`
//! is left anywhere outside a redacted userinfo, everything after the
//! scheme is replaced, so a malformed URL can not leak its password.

/// What a removed credential prints as.
const REDACTED: &str = "<redacted>";

/// Query parameter names (compared case-insensitively, as substrings)
/// whose values are credentials.
const CREDENTIAL_PARAMS: [&str; 6] = ["pass", "pwd", "secret", "token", "auth", "key"];

/// `url` with every credential replaced by `<redacted>`:
/// `scheme://user:password@host` → `scheme://user:<redacted>@host`,
/// `?password=x` → `?password=<redacted>`.
pub(crate) fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return if url.contains('@') {
            REDACTED.to_owned()
        } else {
            url.to_owned()
        };
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, host)) => format!("{}@{host}", redact_userinfo(userinfo)),
        None => authority.to_owned(),
    };
    let (path, query) = match tail.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (tail, None),
    };
    let mut out = format!("{scheme}://{authority}{path}");
    if let Some(query) = query {
        let (query, fragment) = match query.split_once('#') {
            Some((query, fragment)) => (query, Some(fragment)),
            None => (query, None),
        };
        let pairs: Vec<String> = query.split('&').map(redact_param).collect();
        out.push('?');
        out.push_str(&pairs.join("&"));
        if let Some(fragment) = fragment {
            out.push('#');
            out.push_str(fragment);
        }
    }
    let marker = format!("{REDACTED}@");
    if out.replace(&marker, "").contains('@') {
        return format!("{scheme}://{REDACTED}");
    }
    out
}

/// `user:password` → `user:<redacted>`; a userinfo without `:` is dropped
/// whole (it is often a token used as the user name).
fn redact_userinfo(userinfo: &str) -> String {
    match userinfo.split_once(':') {
        Some((user, _)) => format!("{user}:{REDACTED}"),
        None => REDACTED.to_owned(),
    }
}

/// One `name=value` query pair: a credential's value is replaced, and a
/// host with userinfo (`node=user:pw@host`) loses its password.
fn redact_param(pair: &str) -> String {
    let Some((name, value)) = pair.split_once('=') else {
        return pair.to_owned();
    };
    let lower = name.to_ascii_lowercase();
    if CREDENTIAL_PARAMS.iter().any(|word| lower.contains(word)) {
        return format!("{name}={REDACTED}");
    }
    match value.rsplit_once('@') {
        Some((userinfo, host)) => format!("{name}={}@{host}", redact_userinfo(userinfo)),
        None => pair.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userinfo_passwords_are_redacted() {
        for (url, expected) in [
            ("redis://127.0.0.1:6379", "redis://127.0.0.1:6379"),
            ("redis://:pw@h:1/0", "redis://:<redacted>@h:1/0"),
            (
                "redis://app:hunter2@127.0.0.1:6379/0",
                "redis://app:<redacted>@127.0.0.1:6379/0",
            ),
            (
                "http://user:pass@127.0.0.1:3000",
                "http://user:<redacted>@127.0.0.1:3000",
            ),
            (
                "http://ghp_token@example.com/hook",
                "http://<redacted>@example.com/hook",
            ),
            // An unencoded `@` inside the password: the last `@` ends it.
            ("redis://u:p@ss@h:1", "redis://u:<redacted>@h:1"),
            (
                "rediss-cluster://u:s3cret@h1:7000,h2:7001?node=h3:7002",
                "rediss-cluster://u:<redacted>@h1:7000,h2:7001?node=h3:7002",
            ),
        ] {
            assert_eq!(redact_url(url), expected, "{url}");
        }
    }

    #[test]
    fn credential_query_parameters_are_redacted() {
        assert_eq!(
            redact_url(
                "redis-sentinel://u:pw@h:26379/0?sentinelServiceName=mymaster&sentinelUsername=s&sentinelPassword=spw&node=h2:26379"
            ),
            "redis-sentinel://u:<redacted>@h:26379/0?sentinelServiceName=mymaster&sentinelUsername=s&sentinelPassword=<redacted>&node=h2:26379"
        );
        assert_eq!(
            redact_url("redis://h:1/0?password=hunter2#frag"),
            "redis://h:1/0?password=<redacted>#frag"
        );
        assert_eq!(
            redact_url("redis-cluster://h1:1?node=a:b@h2:2&Token=t"),
            "redis-cluster://h1:1?node=a:<redacted>@h2:2&Token=<redacted>"
        );
    }

    #[test]
    fn malformed_urls_never_leak() {
        // A `/` or `?` inside an unencoded password ends the authority
        // early; the leftover `@` replaces everything after the scheme.
        for url in ["redis://u:a/b@h:1", "http://u:a?b@h", "u:pw@h"] {
            let printed = redact_url(url);
            assert!(
                !printed.contains("a/b") && !printed.contains("pw"),
                "{printed}"
            );
            assert!(!printed.contains("a?b"), "{printed}");
        }
    }
}
