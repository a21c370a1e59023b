//! `[hot_keys]`: the per-route top-k of keys by deliveries in a sliding
//! window (`crate::hot_keys`), read, defaulted and printed by serde.
//!
//! `k` bounds both the label cardinality of the per-key series (at most
//! `k` per route, and only with `export_keys`) and the memory of each
//! route's table, so it has a hard ceiling, enforced as the file is read
//! ([`TopK`]); the window must be long enough to split into its slices.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::duration::{self, format_duration};
use super::problems::Problems;

/// Shortest accepted window: one second still splits into slices of a
/// sixth of a second.
const MIN_WINDOW: Duration = Duration::from_secs(1);
/// Longest accepted window: a day is already far beyond what "a sender in
/// a retry loop right now" means.
const MAX_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// How many keys per route are reported: 1 to [`TopK::MAX`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(try_from = "usize", into = "usize")]
pub struct TopK(u8);

impl TopK {
    /// The largest `k`: it bounds series per route and table memory.
    pub const MAX: usize = 100;

    /// `k`, if it is within 1 to [`TopK::MAX`].
    pub fn new(k: usize) -> Option<Self> {
        (1..=Self::MAX)
            .contains(&k)
            .then(|| u8::try_from(k).ok().map(Self))
            .flatten()
    }

    /// The value.
    pub fn get(self) -> usize {
        usize::from(self.0)
    }
}

impl TryFrom<usize> for TopK {
    type Error = String;

    fn try_from(k: usize) -> Result<Self, String> {
        Self::new(k).ok_or_else(|| format!("must be 1 to {}", Self::MAX))
    }
}

impl From<TopK> for usize {
    fn from(k: TopK) -> Self {
        k.get()
    }
}

/// `[hot_keys]`, as written and as used.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct HotKeysConfig {
    /// Whether deliveries are tracked and exported at all.
    pub enabled: bool,
    /// Keys reported per route: ten fill a dashboard table and keep the
    /// exported series at ten per route.
    pub k: TopK,
    /// Length of the sliding window: a minute shows a retry loop while it
    /// runs and forgets it soon after it stops.
    #[serde(with = "duration::field")]
    pub window: Duration,
    /// Whether `/metrics` names keys: off by default, because a series per
    /// key churns with every new key a sender uses; the key-less
    /// `idemgate_hot_key_max_deliveries` is exported either way.
    pub export_keys: bool,
}

impl Default for HotKeysConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            k: TopK(10),
            window: Duration::from_secs(60),
            export_keys: false,
        }
    }
}

/// Checks the window of `[hot_keys]`; the error names its key.
pub(super) fn hot_keys(problems: &mut Problems, hot_keys: HotKeysConfig) -> HotKeysConfig {
    if !(MIN_WINDOW..=MAX_WINDOW).contains(&hot_keys.window) {
        problems.push(
            "hot_keys.window",
            format!(
                "must be {} to {}",
                format_duration(MIN_WINDOW),
                format_duration(MAX_WINDOW)
            ),
        );
    }
    hot_keys
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::config::tests::{MINIMAL, problems_of};

    /// The `[hot_keys]` a file with `table` reads as, or its problems.
    fn check(table: &str) -> (Option<HotKeysConfig>, Vec<String>) {
        let text = format!("{MINIMAL}\n[hot_keys]\n{table}\n");
        match Config::parse(&text) {
            Ok(config) => (Some(config.hot_keys), Vec::new()),
            Err(error) => (None, error.0),
        }
    }

    #[test]
    fn defaults_are_on_ten_keys_one_minute_no_key_series() {
        let (config, problems) = check("");
        assert!(problems.is_empty(), "{problems:?}");
        let config = config.unwrap();
        assert_eq!(config, HotKeysConfig::default());
        assert_eq!(
            (
                config.enabled,
                config.k.get(),
                config.window,
                config.export_keys
            ),
            (true, 10, Duration::from_secs(60), false)
        );
    }

    #[test]
    fn every_error_names_its_key() {
        for (table, expected) in [
            ("k = 0", "hot_keys.k: must be 1 to 100"),
            ("k = 101", "hot_keys.k: must be 1 to 100"),
            ("window = \"500ms\"", "hot_keys.window: must be 1s to 24h"),
        ] {
            let (_, problems) = check(table);
            assert_eq!(problems.len(), 1, "{problems:?}");
            assert!(problems[0].starts_with(expected), "{problems:?}");
        }
        let (config, problems) =
            check("enabled = false\nk = 100\nwindow = \"5m\"\nexport_keys = true");
        assert!(problems.is_empty());
        let config = config.unwrap();
        assert_eq!(
            (
                config.enabled,
                config.k.get(),
                config.window,
                config.export_keys
            ),
            (false, 100, Duration::from_secs(300), true)
        );
        assert_eq!(TopK::new(1).map(TopK::get), Some(1));
        // A window that is not a duration is refused while the file is read.
        let text = format!("{MINIMAL}\n[hot_keys]\nwindow = \"soon\"\n");
        let problems = problems_of(&text);
        assert!(problems.starts_with("hot_keys.window: "), "{problems}");
        assert_eq!(problems.lines().count(), 1, "{problems}");
    }
}
