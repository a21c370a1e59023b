//! `[[admin.tokens]]`: named bearer tokens besides `[admin] token`, each
//! with a scope, so a dashboard or an on-call viewer can read the admin
//! API without being able to purge, retry, drop or correct anything.
//!
//! `[admin] token` stays the operator's token: it is named `admin` and
//! may act. A `read` token opens every `GET` of the admin API; any other
//! method (the actions) answers 403 `read_only_token`. Names are what the
//! log line of an action records as `token=`, so they are unique and
//! plain words.

use serde::{Deserialize, Serialize};

use super::choice::choices;
use super::problems::Problems;
use super::{Secret, Strength};

/// One `[[admin.tokens]]` entry.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdminToken {
    /// What logs call its holder.
    pub name: String,
    /// Bearer token source (`env:`, `file:`, `literal:`).
    pub token: String,
    /// `read` (default) or `act`.
    pub scope: Option<TokenScope>,
}

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenScope {
    /// `GET` (and `HEAD`) only: look, never act.
    Read,
    /// Every admin request, actions included.
    Act,
}

choices! {
    TokenScope { "read" => Read, "act" => Act }
}

/// One named admin token.
#[derive(Debug, Clone)]
pub struct NamedToken {
    /// What logs call its holder (`token=`).
    pub name: String,
    /// The token itself, from `env:`, `file:` or `literal:`.
    pub secret: Secret,
    /// What it may do.
    pub scope: TokenScope,
}

/// The name `[admin] token` goes by.
pub const MAIN_TOKEN_NAME: &str = "admin";

/// Reads `[[admin.tokens]]`: each a unique plain name (not `admin`), a
/// token a client can send that no other token (`main` included) shares
/// (else the holder of a read token could act with it), and a scope
/// (`read` by default: a token given for looking must not act by
/// omission).
pub(super) fn admin_tokens(
    problems: &mut Problems,
    raw: Option<Vec<RawAdminToken>>,
    main: Option<&Secret>,
) -> Vec<NamedToken> {
    let mut tokens: Vec<NamedToken> = Vec::new();
    for (index, raw) in raw.unwrap_or_default().into_iter().enumerate() {
        let at = |field: &str| format!("admin.tokens[{index}].{field}");
        let plain = !raw.name.is_empty()
            && raw
                .name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_'));
        if !plain {
            problems.push(
                &at("name"),
                format!("{:?} must be a plain word: a-z, 0-9, - and _", raw.name),
            );
            continue;
        }
        if raw.name == MAIN_TOKEN_NAME || tokens.iter().any(|token| token.name == raw.name) {
            problems.push(
                &at("name"),
                format!(
                    "{:?} is taken (\"admin\" is [admin] token's name; names are unique)",
                    raw.name
                ),
            );
            continue;
        }
        let scope = raw.scope.unwrap_or(TokenScope::Read);
        let secret = Secret::resolve(&raw.token).and_then(|token| {
            token
                .require(Strength::BEARER)
                .map_err(|why| format!("the token {why}"))
        });
        let Some(secret) = problems.take(&at("token"), secret) else {
            continue;
        };
        let shared = main
            .into_iter()
            .chain(tokens.iter().map(|token| &token.secret))
            .any(|other| *other.expose() == *secret.expose());
        if shared {
            problems.push(
                &at("token"),
                "is the same as another admin token: each must differ",
            );
            continue;
        }
        tokens.push(NamedToken {
            name: raw.name,
            secret,
            scope,
        });
    }
    tokens
}

#[cfg(test)]
mod tests {
    use crate::config::tests::{MINIMAL, problems_of};
    use crate::config::{Config, TokenScope};

    /// An admin token a client could not present in its `Authorization`
    /// header is refused at load, naming the setting, never the value.
    #[test]
    fn an_admin_token_a_client_can_not_send_is_refused() {
        for token in ["t0ken with space", "t\u{e9}st-token", "tab\ttoken"] {
            let text = format!("{MINIMAL}\n[admin]\ntoken = \"literal:{token}\"\n");
            let problems = problems_of(&text);
            assert!(
                problems.contains("admin.token") && problems.contains("only visible ASCII"),
                "{token:?}: {problems}"
            );
            assert!(!problems.contains(token), "{problems}");
        }
        let fine = format!("{MINIMAL}\n[admin]\ntoken = \"literal:S3cr3t-Token_~!\"\n");
        assert!(Config::parse(&fine).is_ok());
    }

    fn with(tokens: &str) -> String {
        format!("{MINIMAL}\n[admin]\ntoken = \"literal:main-token-0123\"\n{tokens}")
    }

    #[test]
    fn named_tokens_are_read_only_unless_they_say_act() {
        let config = Config::parse(&with(
            "[[admin.tokens]]\nname = \"grafana\"\ntoken = \"literal:grafana-token-01\"\n\
             [[admin.tokens]]\nname = \"oncall\"\ntoken = \"literal:oncall-token-001\"\nscope = \"act\"\n",
        ))
        .unwrap();
        let scopes: Vec<(&str, TokenScope)> = config
            .admin_tokens
            .iter()
            .map(|token| (token.name.as_str(), token.scope))
            .collect();
        assert_eq!(
            scopes,
            [("grafana", TokenScope::Read), ("oncall", TokenScope::Act)]
        );
    }

    #[test]
    fn a_named_token_must_be_distinct_and_well_named() {
        for (tokens, problem) in [
            (
                "[[admin.tokens]]\nname = \"admin\"\ntoken = \"literal:other-token-001\"\n",
                "admin.tokens[0].name",
            ),
            (
                "[[admin.tokens]]\nname = \"Grafana\"\ntoken = \"literal:other-token-001\"\n",
                "admin.tokens[0].name",
            ),
            (
                "[[admin.tokens]]\nname = \"viewer\"\ntoken = \"literal:main-token-0123\"\n",
                "admin.tokens[0].token",
            ),
            (
                "[[admin.tokens]]\nname = \"a\"\ntoken = \"literal:same-token-0001\"\n\
                 [[admin.tokens]]\nname = \"b\"\ntoken = \"literal:same-token-0001\"\n",
                "admin.tokens[1].token",
            ),
            (
                "[[admin.tokens]]\nname = \"a\"\ntoken = \"literal:a token\"\n",
                "admin.tokens[0].token",
            ),
            (
                "[[admin.tokens]]\nname = \"a\"\ntoken = \"literal:tok-00001\"\nscope = \"write\"\n",
                "admin.tokens[0].scope",
            ),
        ] {
            let err = Config::parse(&with(tokens)).unwrap_err();
            assert!(err.0[0].starts_with(problem), "{tokens}: {err}");
        }
    }
}
