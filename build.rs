//! Stamps the binary with `git describe`, so `idemgate --version` names the
//! exact commit a build came from (falls back to the crate version outside
//! a git checkout, e.g. in a container build without `.git`).

fn main() {
    let version = env!("CARGO_PKG_VERSION");
    let described = std::process::Command::new("git")
        .args(["describe", "--tags", "--always"])
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map(|text| text.trim().to_owned())
        .filter(|text| !text.is_empty());
    let full = match described {
        Some(commit) => format!("{version} ({commit})"),
        None => version.to_owned(),
    };
    println!("cargo:rustc-env=IDEMGATE_VERSION={full}");
    println!("cargo:rerun-if-changed=.git/HEAD");
    println!("cargo:rerun-if-changed=.git/refs/heads");
}
