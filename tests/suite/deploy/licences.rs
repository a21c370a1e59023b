//! The licence files and the changelog.

use super::*;

#[test]
fn licences_and_changelog() {
    let mit = read("LICENSE-MIT");
    assert!(mit.contains("Copyright (c) The idemgate developers"));
    assert!(mit.contains("Permission is hereby granted, free of charge"));
    assert!(mit.contains("THE SOFTWARE IS PROVIDED \"AS IS\""));
    let apache = read("LICENSE-APACHE");
    assert!(apache.contains("Apache License"));
    assert!(apache.contains("Version 2.0, January 2004"));
    assert!(apache.contains("END OF TERMS AND CONDITIONS"));
    let changelog = read("CHANGELOG.md");
    assert!(changelog.contains("keepachangelog.com"));
    assert!(changelog.contains("## [Unreleased]"));
}
