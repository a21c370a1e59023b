//! Stamps the binary with where it was built from:
//!
//! * `IDEMGATE_VERSION`, from `git describe`, so `idemgate --version` names
//!   the exact commit (the crate version alone outside a git checkout);
//! * `IDEMGATE_REVISION`, the `revision` label of `idemgate_build_info`:
//!   `git rev-parse --short=12 HEAD`, with `-dirty` when tracked files
//!   differ from it. Without git or `.git` (a container build), the
//!   `IDEMGATE_GIT_REVISION` environment variable if set, else `unknown`.
//!
//! Reruns only when HEAD moves, the branch it names gets a commit, the
//! sources change (which may flip `-dirty`; the crate recompiles then
//! anyway) or `IDEMGATE_GIT_REVISION` changes, so a plain rebuild does not
//! recompile the crate.

use std::process::Command;

/// Runs git with `args` in the crate directory; its trimmed stdout on
/// success.
fn git(args: &[&str]) -> Option<String> {
    Command::new("git")
        .args(args)
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map(|text| text.trim().to_owned())
}

/// The git revision, and the files whose change moves it.
fn git_revision() -> Option<(String, Vec<String>)> {
    let hash = git(&["rev-parse", "--short=12", "HEAD"]).filter(|hash| !hash.is_empty())?;
    // Untracked files (scratch notes, editor files) do not make the build
    // differ from the commit; changes to tracked ones do.
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
        .is_none_or(|status| !status.is_empty());
    let mut watched: Vec<String> = git(&["rev-parse", "--git-path", "HEAD"])
        .into_iter()
        .collect();
    // The branch HEAD names (a worktree's HEAD lives apart from the refs).
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.extend(git(&["rev-parse", "--git-path", &branch]));
    }
    watched.extend(git(&["rev-parse", "--git-path", "packed-refs"]));
    // A path that does not exist would make cargo rerun this every time.
    watched.retain(|path| std::path::Path::new(path).exists());
    let revision = if dirty { format!("{hash}-dirty") } else { hash };
    Some((revision, watched))
}

fn main() {
    let version = env!("CARGO_PKG_VERSION");
    let described = git(&["describe", "--tags", "--always"]).filter(|text| !text.is_empty());
    let full = match described {
        Some(commit) => format!("{version} ({commit})"),
        None => version.to_owned(),
    };
    println!("cargo:rustc-env=IDEMGATE_VERSION={full}");

    let revision = match git_revision() {
        Some((revision, watched)) => {
            for path in watched {
                println!("cargo:rerun-if-changed={path}");
            }
            revision
        }
        None => std::env::var("IDEMGATE_GIT_REVISION")
            .ok()
            .map(|value| value.trim().to_owned())
            .filter(|value| !value.is_empty())
            .unwrap_or_else(|| "unknown".to_owned()),
    };
    println!("cargo:rustc-env=IDEMGATE_REVISION={revision}");
    println!("cargo:rerun-if-env-changed=IDEMGATE_GIT_REVISION");
    for sources in ["src", "lua", "Cargo.toml", "build.rs"] {
        println!("cargo:rerun-if-changed={sources}");
    }
}
