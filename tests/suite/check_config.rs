//! `idemgate check-config` on files with mistakes: every unknown key is
//! reported at once with its dotted path and a "did you mean" hint, and
//! the exit code is 2 (docs/contract.md §8).

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

/// `VALID` with the route's signature and idempotency tables replaced.
fn signed_route(signature: &str, idempotency: &str) -> String {
    let head = VALID.split("[route.signature]").next().unwrap();
    format!("{head}[route.signature]\n{signature}\n[route.idempotency]\n{idempotency}\n")
}

/// docs/contract.md §4 rule 12: a key, or a fingerprint that is the key,
/// resting on a part the signature does not cover is refused, naming the
/// part, why, and what to change; `unsigned_key = "accept"` takes the risk
/// knowingly.
#[test]
fn a_key_on_unsigned_parts_is_refused_with_what_to_change() {
    let secret = "literal:coverage-secret-0123456789abcdef";
    let hmac = format!("scheme = \"hmac\"\nsecrets = [\"{secret}\"]\nsignature = \"header:X-Sig\"");
    let github = format!("scheme = \"github\"\nsecrets = [\"{secret}\"]");
    for (signature, idempotency, says) in [
        (
            github.as_str(),
            "key = [\"header:X-GitHub-Delivery\"]",
            "route[0].idempotency.key[0]: header:x-github-delivery is not signed: scheme = \"github\" does not sign header:x-github-delivery",
        ),
        (
            hmac.as_str(),
            "key = [\"header:Idempotency-Key\"]",
            "route[0].idempotency.key[0]: header:idempotency-key is not signed",
        ),
        (
            hmac.as_str(),
            "fingerprint = [\"method\", \"path\", \"body\"]",
            "route[0].idempotency.fingerprint[1]: path is not signed",
        ),
    ] {
        let (code, printed) = check_config(&signed_route(signature, idempotency));
        assert_eq!(code, Some(2), "{idempotency}: {printed}");
        assert!(
            printed.contains(says) && printed.contains("unsigned_key = \"accept\""),
            "{says:?} in:\n{printed}"
        );
    }
    let accepted = signed_route(
        &github,
        "key = [\"header:X-GitHub-Delivery\"]\nunsigned_key = \"accept\"",
    );
    let (code, printed) = check_config(&accepted);
    assert_eq!(code, Some(0), "{printed}");
    assert!(printed.contains("unsigned_key = \"accept\""), "{printed}");
}

/// docs/contract.md §4 rule 5: a probe path value the signature does not
/// cover could be changed in transit to name an order already paid; it
/// is refused like an unsigned key, and accepted only knowingly.
#[test]
fn a_probe_path_on_unsigned_values_is_refused() {
    let github = "scheme = \"github\"\nsecrets = [\"literal:coverage-secret-0123456789abcdef\"]";
    let probe = "unknown_hold = \"10m\"\n[route.probe]\nhandler_deadline = \"30s\"\npath = \"/orders/{header:X-Order}?of={json:/id}\"";
    let (code, printed) = check_config(&signed_route(github, probe));
    assert_eq!(code, Some(2), "{printed}");
    assert!(
        printed.contains("route[0].probe.path: header:x-order is not signed")
            && printed.contains("unsigned_key = \"accept\""),
        "{printed}"
    );
    assert!(!printed.contains("json:/id is not signed"), "{printed}");
    let accepted = signed_route(github, &format!("unsigned_key = \"accept\"\n{probe}"));
    let (code, printed) = check_config(&accepted);
    assert_eq!(code, Some(0), "{printed}");
}

/// docs/contract.md §4 rule 12: a message that covers neither the body
/// nor any request value lets one captured signature authorise any body.
#[test]
fn a_message_without_body_or_values_is_refused() {
    let signature = "scheme = \"hmac\"\nsecrets = [\"literal:coverage-secret-0123456789abcdef\"]\n\
                     signature = \"header:X-Sig\"\nmessage = \"{timestamp}\"\ntimestamp = \"header:X-Ts\"";
    for idempotency in ["", "key = [\"json:/id\"]\nunsigned_key = \"accept\""] {
        let (code, printed) = check_config(&signed_route(signature, idempotency));
        assert_eq!(code, Some(2), "{printed}");
        assert!(
            printed.contains(
                "route[0].signature.message: \"{timestamp}\" covers neither {body} nor any value"
            ),
            "{printed}"
        );
    }
}

/// `--help` ends with what a unit file or a script needs (exit codes,
/// signals, where the reference lives), and `-c` is `--config`.
#[test]
fn help_names_exit_codes_signals_and_the_reference_and_c_is_config() {
    let idemgate = env!("CARGO_BIN_EXE_idemgate");
    let help = std::process::Command::new(idemgate)
        .arg("--help")
        .output()
        .expect("run --help");
    assert_eq!(help.status.code(), Some(0));
    let help = String::from_utf8_lossy(&help.stdout);
    for expected in [
        "-c, --config <FILE>",
        "--log-format <FORMAT>",
        "Exit codes:",
        "  2  invalid configuration",
        "SIGTERM, SIGINT",
        "SIGHUP",
        "config/idemgate.toml",
    ] {
        assert!(
            help.contains(expected),
            "{expected:?} missing from:\n{help}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idemgate.toml");
    for (text, code) in [(VALID.to_owned(), 0), (VALID.replace("lease", "leese"), 2)] {
        std::fs::write(&path, text).unwrap();
        let run = std::process::Command::new(idemgate)
            .args(["check-config", "-c"])
            .arg(&path)
            .output()
            .expect("run check-config -c");
        assert_eq!(run.status.code(), Some(code), "{run:?}");
    }
}
