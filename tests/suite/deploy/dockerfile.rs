//! The `Dockerfile`: stages, user, exposed listeners, HEALTHCHECK, labels.

use super::*;

/// The Dockerfile's stages, each a list of (INSTRUCTION, arguments) with
/// continuation lines joined and comments dropped.
fn dockerfile_stages() -> Vec<Vec<(String, String)>> {
    let mut stages: Vec<Vec<(String, String)>> = Vec::new();
    let mut pending = String::new();
    for line in read("Dockerfile").lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && pending.is_empty()) {
            continue;
        }
        if let Some(head) = trimmed.strip_suffix('\\') {
            pending.push_str(head);
            pending.push(' ');
            continue;
        }
        pending.push_str(trimmed);
        let full = std::mem::take(&mut pending);
        let (instruction, arguments) = full.split_once(char::is_whitespace).unwrap_or((&full, ""));
        let instruction = instruction.to_ascii_uppercase();
        if instruction == "FROM" {
            stages.push(Vec::new());
        }
        stages
            .last_mut()
            .expect("the Dockerfile starts with FROM")
            .push((instruction, arguments.trim().to_owned()));
    }
    stages
}

fn runtime_stage() -> Vec<(String, String)> {
    dockerfile_stages().pop().expect("FROM")
}

fn instruction_values_of(stage: &[(String, String)], name: &str) -> Vec<String> {
    stage
        .iter()
        .filter(|(instruction, _)| instruction == name)
        .map(|(_, arguments)| arguments.clone())
        .collect()
}

/// The arguments of every `name` instruction of the runtime stage.
fn instruction_values(name: &str) -> Vec<String> {
    instruction_values_of(&runtime_stage(), name)
}

/// (user, group) of the runtime stage's last USER.
pub(super) fn dockerfile_user() -> (String, Option<String>) {
    let user = instruction_values("USER")
        .pop()
        .expect("USER in the runtime stage");
    match user.split_once(':') {
        Some((user, group)) => (user.to_owned(), Some(group.to_owned())),
        None => (user, None),
    }
}

fn exec_form(text: &str) -> Vec<String> {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not exec form (JSON array): {text}: {e}"))
}

#[test]
fn dockerfile_exposes_both_listeners_as_a_non_root_user() {
    let exposed: BTreeSet<u16> = instruction_values("EXPOSE")
        .iter()
        .flat_map(|ports| ports.split_whitespace())
        .map(|port| port.split('/').next().unwrap().parse().unwrap())
        .collect();
    assert!(
        exposed.contains(&PROXY_PORT) && exposed.contains(&ADMIN_PORT),
        "{exposed:?}"
    );

    let (user, group) = dockerfile_user();
    // Numeric, so that Kubernetes' runAsNonRoot can check it.
    let uid: u32 = user
        .parse()
        .unwrap_or_else(|_| panic!("USER {user} is not numeric"));
    assert_ne!(uid, 0, "USER is root");
    if let Some(group) = group {
        assert_ne!(group.parse::<u32>().expect("numeric group"), 0);
    }

    let env = instruction_values("ENV").join(" ");
    assert!(
        env.contains(&format!("IDEMGATE_CONFIG={CONFIG_PATH}")),
        "the image sets IDEMGATE_CONFIG (read by serve and healthcheck): {env}"
    );
}

#[test]
fn dockerfile_healthcheck_runs_idemgate_healthcheck() {
    let entrypoint = exec_form(&instruction_values("ENTRYPOINT").pop().expect("ENTRYPOINT"));
    let healthchecks = instruction_values("HEALTHCHECK");
    assert_eq!(healthchecks.len(), 1, "{healthchecks:?}");
    let (options, command) = healthchecks[0]
        .split_once("CMD")
        .expect("HEALTHCHECK ... CMD");
    for option in ["--interval=", "--timeout=", "--start-period="] {
        assert!(options.contains(option), "HEALTHCHECK {option}");
    }
    let command = exec_form(command.trim());
    assert_eq!(
        command,
        [entrypoint[0].as_str(), "healthcheck"],
        "exec form, no shell: the image's binary, `healthcheck`"
    );
    // The binary is where the image puts it.
    let copied = instruction_values("COPY")
        .iter()
        .any(|copy| copy.ends_with(&format!(" {}", entrypoint[0])));
    assert!(copied, "{} is copied into the image", entrypoint[0]);
}

/// The build stage gets every file `cargo build` reads: the manifest and
/// lock file, the sources, the Lua scripts (include_str!) and the build
/// script (it sets IDEMGATE_VERSION, without which the crate does not compile).
#[test]
fn dockerfile_builder_copies_what_the_build_needs() {
    let stages = dockerfile_stages();
    assert!(stages.len() >= 2, "a build stage and a runtime stage");
    let copied: BTreeSet<String> = stages[0]
        .iter()
        .filter(|(instruction, _)| instruction == "COPY")
        .flat_map(|(_, arguments)| {
            let parts: Vec<&str> = arguments.split_whitespace().collect();
            parts[..parts.len() - 1]
                .iter()
                .map(|source| source.trim_end_matches('/').to_owned())
                .collect::<Vec<_>>()
        })
        .collect();
    let mut needed = vec!["Cargo.toml", "Cargo.lock", "src", "lua"];
    if repo_path("build.rs").exists() {
        needed.push("build.rs");
    }
    for path in needed {
        assert!(
            copied.contains(path),
            "the build stage does not COPY {path}: {copied:?}"
        );
    }
    let runs = instruction_values_of(&stages[0], "RUN").join(" ");
    assert!(runs.contains("cargo build --release --locked"), "{runs}");
}

#[test]
fn dockerfile_labels_and_copied_files() {
    let labels = instruction_values("LABEL").join(" ");
    let cargo: toml::Table = toml::from_str(&read("Cargo.toml")).unwrap();
    let license = cargo["package"]["license"].as_str().unwrap();
    assert_eq!(license, "MIT OR Apache-2.0");
    assert!(
        labels.contains(&format!("org.opencontainers.image.licenses=\"{license}\"")),
        "{labels}"
    );
    assert!(
        labels.contains("org.opencontainers.image.source="),
        "{labels}"
    );
    // Every file the runtime stage copies from the build context exists.
    for copy in instruction_values("COPY") {
        if copy.starts_with("--from") {
            continue;
        }
        let parts: Vec<&str> = copy.split_whitespace().collect();
        for source in &parts[..parts.len() - 1] {
            assert!(repo_path(source).exists(), "COPY {source}: missing");
        }
    }
}

/// The image's default configuration is the container default
/// (`config/container.toml`: every interface, refuses to start without its
/// secrets), at the path IDEMGATE_CONFIG names; the annotated reference
/// rides along as documentation only.
#[test]
fn dockerfile_default_config_is_the_container_default() {
    let copies = instruction_values("COPY");
    let default = copies
        .iter()
        .filter(|copy| !copy.starts_with("--from"))
        .find(|copy| copy.ends_with(&format!(" {CONFIG_PATH}")))
        .unwrap_or_else(|| panic!("nothing is copied to {CONFIG_PATH}: {copies:?}"));
    let sources: Vec<&str> = default.split_whitespace().collect();
    assert_eq!(
        sources[..sources.len() - 1],
        [super::container::CONTAINER_CONFIG],
        "COPY {default}"
    );
    let reference_elsewhere = copies.iter().any(|copy| {
        copy.split_whitespace()
            .any(|part| part == "config/idemgate.toml")
            && !copy.ends_with(CONFIG_PATH)
    });
    assert!(
        reference_elsewhere,
        "the annotated reference is not in the image"
    );
}
