use crate::config::Config;
use crate::config::tests::{MINIMAL, problems_of};

/// `text` (MINIMAL's embedded store) on Redis at `url` instead.
fn on_redis(text: &str, url: &str) -> String {
    let redis = text.replace(
        "kind = \"embedded\"\n        path = \"/tmp/x.redb\"",
        &format!("kind = \"redis\"\n        url = \"{url}\""),
    );
    assert_ne!(redis, text, "the embedded store section was not found");
    redis
}

/// Whether the problems of `text` include `expected`; they are printed if not.
fn problems_include(text: &str, expected: &str) {
    let problems = problems_of(text);
    assert!(problems.contains(expected), "{problems}");
}

#[test]
fn redis_passwords_never_print() {
    let text = on_redis(MINIMAL, "redis://app:hunter2@127.0.0.1:6379/0");
    let printed = format!("{:?}", Config::parse(&text).unwrap());
    assert!(!printed.contains("hunter2"), "{printed}");
    assert!(
        printed.contains("redis://app:<redacted>@127.0.0.1:6379/0"),
        "{printed}"
    );
}

#[test]
fn credentials_apart_from_the_url() {
    let redis = |url: &str, extra: &str| {
        MINIMAL.replace(
            "kind = \"embedded\"\n        path = \"/tmp/x.redb\"",
            &format!("kind = \"redis\"\nurl = \"{url}\"\n{extra}"),
        )
    };
    let both = "username = \"literal:app\"\npassword = \"literal:hunter2\"";
    let config = Config::parse(&redis("redis://127.0.0.1:6379/0", both)).unwrap();
    assert_eq!(&*config.store.username.unwrap().expose(), b"app");
    let password = config.store.password.unwrap();
    assert_eq!(&*password.expose(), b"hunter2");
    assert!(!format!("{password:?}").contains("hunter2"));

    let err = problems_of(&redis("redis://:pw@127.0.0.1:6379/0", both));
    assert!(
        err.contains("store.password: store.url \"redis://:<redacted>@127.0.0.1:6379/0\" already has a password"),
        "{err}"
    );
    assert!(
        !err.contains("store.username"),
        "no user in that URL: {err}"
    );
    let err = problems_of(&redis("redis://app@127.0.0.1:6379/0", both));
    assert!(err.contains("store.username: store.url"), "{err}");

    let embedded = MINIMAL.replace("[upstream]", "password = \"literal:x\"\n[upstream]");
    let err = problems_of(&embedded);
    assert!(
        err.contains("store.password: only valid with kind = \"redis\""),
        "{err}"
    );
}

#[test]
fn commit_delay_defaults_to_zero_is_bounded_and_needs_embedded() {
    use std::time::Duration;
    assert_eq!(
        Config::parse(MINIMAL).unwrap().store.commit_delay,
        Duration::ZERO
    );
    let set = MINIMAL.replace("[upstream]", "commit_delay = \"2ms\"\n[upstream]");
    assert_eq!(
        Config::parse(&set).unwrap().store.commit_delay,
        Duration::from_millis(2)
    );
    let long = MINIMAL.replace("[upstream]", "commit_delay = \"1s\"\n[upstream]");
    assert!(problems_of(&long).contains("store.commit_delay: must be at most 100ms"));
    let redis = on_redis(&set, "redis://127.0.0.1:6379");
    problems_include(
        &redis,
        "store.commit_delay: only valid with kind = \"embedded\"",
    );
}

#[test]
fn integrity_check_defaults_to_background_and_needs_embedded() {
    use crate::config::IntegrityCheck;
    assert_eq!(
        Config::parse(MINIMAL).unwrap().store.integrity_check,
        IntegrityCheck::Background
    );
    let set = MINIMAL.replace(
        "[upstream]",
        "integrity_check = \"before_serving\"\n[upstream]",
    );
    assert_eq!(
        Config::parse(&set).unwrap().store.integrity_check,
        IntegrityCheck::BeforeServing
    );
    let wrong = MINIMAL.replace("[upstream]", "integrity_check = \"never\"\n[upstream]");
    problems_include(&wrong, "\"never\" is not valid");
    let redis = on_redis(&set, "redis://127.0.0.1:6379");
    problems_include(
        &redis,
        "store.integrity_check: only valid with kind = \"embedded\"",
    );
}

#[test]
fn durability_defaults_to_fsync_and_is_checked_against_the_backend() {
    use crate::config::Durability;
    let redis = |extra: &str| {
        MINIMAL.replace(
            "kind = \"embedded\"\n        path = \"/tmp/x.redb\"",
            &format!("kind = \"redis\"\nurl = \"redis://127.0.0.1:6379/0\"\n{extra}"),
        )
    };
    assert_eq!(
        Config::parse(MINIMAL).unwrap().store.durability,
        Durability::Fsync
    );
    assert_eq!(
        Config::parse(&redis("")).unwrap().store.durability,
        Durability::Fsync,
        "memory must be chosen explicitly"
    );
    let memory = Config::parse(&redis("durability = \"memory\"")).unwrap();
    assert_eq!(memory.store.durability, Durability::Memory);
    let err = problems_of(&redis("durability = \"replicated\""));
    assert!(
        err.contains("store.durability: \"replicated\" needs min_replicas_ack"),
        "{err}"
    );
    let replicated = redis("durability = \"replicated\"\nmin_replicas_ack = 1");
    assert_eq!(
        Config::parse(&replicated).unwrap().store.durability,
        Durability::Replicated
    );
    let err = problems_of(&redis("durability = \"disk\""));
    assert!(
        err.contains("store.durability: \"disk\" is not valid; expected one of \"memory\", \"fsync\", \"replicated\""),
        "{err}"
    );
    let embedded = MINIMAL.replace("[upstream]", "durability = \"memory\"\n[upstream]");
    let err = problems_of(&embedded);
    assert!(
        err.contains("store.durability: the embedded store commits every write"),
        "{err}"
    );
}

#[test]
fn allow_eviction_defaults_off_and_needs_redis() {
    assert!(!Config::parse(MINIMAL).unwrap().store.allow_eviction);
    let embedded = MINIMAL.replace("[upstream]", "allow_eviction = true\n[upstream]");
    let err = problems_of(&embedded);
    assert!(
        err.contains("store.allow_eviction: only valid with kind = \"redis\""),
        "{err}"
    );
    let redis = on_redis(&embedded, "redis://127.0.0.1:6379/0");
    assert!(Config::parse(&redis).unwrap().store.allow_eviction);
}
