//! The user guide's pages hold together: the README is a front page with
//! the two set-up commands and an index, and every relative link in it and
//! in `docs/` names a file that exists and, for a Markdown page, a heading
//! that page has (GitHub's anchor), so moving a section can not leave a
//! dead link behind.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::support::{heading_anchor, repo_path};

/// The front page stays a front page: it is read top to bottom.
const FRONT_PAGE_MAX_LINES: usize = 200;

/// The lines of a Markdown text outside fenced code blocks.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .filter(|line| {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

/// The anchors of a page's headings.
fn anchors(text: &str) -> BTreeSet<String> {
    prose(text)
        .into_iter()
        .filter(|line| line.starts_with('#'))
        .map(|line| heading_anchor(line.trim_start_matches('#')))
        .collect()
}

/// The targets of the inline links `[text](target)` of a page's prose.
fn links(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in prose(text) {
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            if let Some(end) = rest.find(')') {
                found.push(rest[..end].to_owned());
                rest = &rest[end..];
            }
        }
    }
    found
}

/// README.md and every page of docs/.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![repo_path("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo_path("docs"))
        .expect("docs/")
        .map(|entry| entry.expect("docs entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// Every link problem of one page: a missing file, or an anchor the
/// target page has no heading for.
fn dead_links(page: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(page).expect("page");
    let dir = page.parent().expect("page dir");
    let mut dead = Vec::new();
    for target in links(&text) {
        if target.contains("://") || target.starts_with("mailto:") {
            continue;
        }
        let (file, fragment) = match target.split_once('#') {
            Some((file, fragment)) => (file, Some(fragment)),
            None => (target.as_str(), None),
        };
        let path = if file.is_empty() {
            page.to_path_buf()
        } else {
            dir.join(file)
        };
        let normal = normalise(&path);
        if !normal.exists() {
            dead.push(format!("{target}: no such file"));
            continue;
        }
        if let Some(fragment) = fragment {
            if normal.extension().is_some_and(|ext| ext == "md") {
                let target_text = std::fs::read_to_string(&normal).expect("target page");
                if !anchors(&target_text).contains(fragment) {
                    dead.push(format!("{target}: no heading #{fragment}"));
                }
            }
        }
    }
    dead
}

/// `path` with `.` and `..` components applied (the files may not exist,
/// so not `canonicalize`).
fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

#[test]
fn every_relative_link_in_the_readme_and_docs_resolves() {
    let mut dead = Vec::new();
    for page in pages() {
        for problem in dead_links(&page) {
            dead.push(format!("{}: {problem}", page.display()));
        }
    }
    assert!(dead.is_empty(), "dead links:\n{}", dead.join("\n"));
}

#[test]
fn the_link_check_finds_dead_links() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("a.md"),
        "# A page\n\n## Second part\n\n[ok](#second-part) [ok](b.md#b-title) [ok](https://example.com/x)\n\
         [dead](#third) [dead](c.md) [dead](b.md#nope)\n\n```sh\n# not a heading [nor](a link.md)\n```\n",
    )
    .expect("write");
    std::fs::write(dir.path().join("b.md"), "# B title\n").expect("write");
    let dead = dead_links(&dir.path().join("a.md"));
    assert_eq!(
        dead,
        [
            "#third: no heading #third",
            "c.md: no such file",
            "b.md#nope: no heading #nope"
        ]
    );
    assert_eq!(
        heading_anchor("Durable inbox (nothing lost)"),
        "durable-inbox-nothing-lost"
    );
    assert_eq!(
        heading_anchor("4. The rules that make it safe"),
        "4-the-rules-that-make-it-safe"
    );
}

/// The front page keeps the two set-up commands, stays short and indexes
/// every page of docs/.
#[test]
fn the_readme_is_a_front_page_indexing_docs() {
    let readme = std::fs::read_to_string(repo_path("README.md")).expect("README.md");
    let setup = readme
        .split("\n## Set up\n")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("README has a Set up section");
    for command in ["cargo run --release -- demo", ".ci/run"] {
        assert!(
            setup.lines().any(|line| line.starts_with(command)),
            "Set up has no line starting with {command:?}"
        );
    }
    let lines = readme.lines().count();
    assert!(
        lines <= FRONT_PAGE_MAX_LINES,
        "README.md is {lines} lines; move sections into docs/"
    );
    let linked: BTreeSet<String> = links(&readme)
        .into_iter()
        .map(|target| target.split('#').next().unwrap_or_default().to_owned())
        .collect();
    for page in pages().into_iter().skip(1) {
        let name = format!("docs/{}", page.file_name().expect("name").to_string_lossy());
        assert!(linked.contains(&name), "README.md does not link {name}");
    }
}

/// Whether `line` points outside the repository, at something a reader
/// of it can not look up: an issue by its number (with or without `#`,
/// either case) or the specification the contract grew from (named in
/// capitals).
/// The needles are put together here so that this file does not match.
fn points_outside(line: &str) -> bool {
    let spec = ["SP", "EC"].concat();
    let spec_named = line.match_indices(&spec).any(|(at, _)| {
        let before = line[..at].chars().next_back();
        let after = line[at + spec.len()..].chars().next();
        !before.is_some_and(char::is_alphanumeric) && !after.is_some_and(char::is_alphanumeric)
    });
    let issue = ["ssue", " "].concat();
    let issue_numbered = line.match_indices(&issue).any(|(at, _)| {
        let mut before = line[..at].chars().rev();
        let word_starts = matches!(before.next(), Some('i' | 'I'))
            && !before.next().is_some_and(char::is_alphanumeric);
        let rest = line[at + issue.len()..].trim_start_matches('#');
        word_starts && rest.starts_with(|c: char| c.is_ascii_digit())
    });
    spec_named || issue_numbered
}

/// Every text file in the repository (not `target/`, not `.git/`), as
/// (path, contents); files that are not UTF-8 are skipped.
fn repository_texts() -> Vec<(PathBuf, String)> {
    let mut found = Vec::new();
    let mut dirs = vec![repo_path("")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read_dir").flatten() {
            let path = entry.path();
            let name = entry.file_name();
            if path.is_dir() {
                if name != "target" && name != ".git" {
                    dirs.push(path);
                }
            } else if let Ok(text) = std::fs::read_to_string(&path) {
                found.push((path, text));
            }
        }
    }
    found
}

/// Code, configuration comments, docs, benchmarks and the changelog cite
/// what the repository holds (`docs/contract.md §N`, a doc page), never an
/// issue number or the outside specification.
#[test]
fn nothing_cites_an_issue_number_or_the_outside_specification() {
    let mut cited = Vec::new();
    for (path, text) in repository_texts() {
        for (n, line) in text.lines().enumerate() {
            if points_outside(line) {
                cited.push(format!("{}:{}: {line}", path.display(), n + 1));
            }
        }
    }
    assert!(
        cited.is_empty(),
        "point these at docs/:\n{}",
        cited.join("\n")
    );
}

#[test]
fn the_reference_check_finds_issue_numbers_and_the_specification() {
    let spec = ["SP", "EC"].concat();
    let (issue, capital) = (["iss", "ue"].concat(), ["Iss", "ue"].concat());
    for line in [
        format!("# Entity state ({spec} §9)"),
        format!("see {spec}.md"),
        format!("deliveries that made them ({issue} 31), so"),
        format!("{capital} 26 §4: HTTP/2 connections"),
        format!("fixed in {issue} #7"),
    ] {
        assert!(points_outside(&line), "{line}");
    }
    for line in [
        "Adyen issues 64 hex characters",
        "an issue with the handler",
        "docs/contract.md §9",
        "a KEYSPECS table, a specification",
        "tissue 3",
    ] {
        assert!(!points_outside(line), "{line}");
    }
}
