//! `idemgate check-config` on files with mistakes: every unknown key is
//! reported at once with its dotted path and a "did you mean" hint, and
//! the exit code is 2 (SPEC §8).

use crate::support::check_config;

const VALID: &str = r#"
[store]
kind = "embedded"
path = "/tmp/unused.redb"

[upstream]
url = "http://127.0.0.1:3000"

[[route]]
name = "pay"
path_prefix = "/notify"

[route.signature]
scheme = "none"

[route.idempotency]
key = ["json:/id"]
lease = "30s"
"#;

#[test]
fn every_unknown_key_is_reported_with_its_path_and_a_hint() {
    assert_eq!(check_config(VALID).0, Some(0), "the base file is valid");
    let text = VALID
        .replace("[store]", "log_levle = \"debug\"\n\n[store]")
        .replace(
            "kind = \"embedded\"",
            "kind = \"embedded\"\ncolour = \"blue\"",
        )
        .replace("lease = \"30s\"", "leese = \"30s\"");
    let (code, printed) = check_config(&text);
    assert_eq!(code, Some(2), "{printed}");
    for expected in [
        "log_levle: unknown key",
        "store.colour: unknown key",
        "route[0].idempotency.leese: unknown key; did you mean `lease`?",
    ] {
        assert!(printed.contains(expected), "{expected:?} in:\n{printed}");
    }
    assert_eq!(printed.matches("unknown key").count(), 3, "{printed}");
}

#[test]
fn a_fractional_duration_says_so() {
    let text = VALID.replace("lease = \"30s\"", "retention = \"1.5h\"");
    let (code, printed) = check_config(&text);
    assert_eq!(code, Some(2), "{printed}");
    assert!(
        printed.contains(
            "route[0].idempotency.retention: \"1.5h\": fractions are not supported, write 90m"
        ),
        "{printed}"
    );
}
