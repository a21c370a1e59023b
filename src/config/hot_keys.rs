//! `[hot_keys]`: the per-route top-k of keys by deliveries in a sliding
//! window (`crate::hot_keys`), validated.
//!
//! `k` bounds both the label cardinality of the per-key series (at most
//! `k` per route, and only with `export_keys`) and the memory of each route's table, so it has a hard
//! ceiling; the window must be long enough to split into its slices.

use std::time::Duration;

use super::problems::Problems;
use super::raw::{self, RawHotKeys, format_duration};

/// Shortest accepted window: one second still splits into slices of a
/// sixth of a second.
const MIN_WINDOW: Duration = Duration::from_secs(1);
/// Longest accepted window: a day is already far beyond what "a sender in
/// a retry loop right now" means.
const MAX_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// How many keys per route are reported: 1 to [`TopK::MAX`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

/// The validated `[hot_keys]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HotKeysConfig {
    /// Whether deliveries are tracked and exported at all.
    pub enabled: bool,
    /// Keys reported per route.
    pub k: TopK,
    /// Length of the sliding window.
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
            k: TopK(raw::DEFAULT_HOT_KEYS_K),
            window: raw::DEFAULT_HOT_KEYS_WINDOW.get(),
            export_keys: false,
        }
    }
}

impl HotKeysConfig {
    /// The table as `check-config` prints it.
    pub(super) fn to_raw(&self) -> RawHotKeys {
        RawHotKeys {
            enabled: Some(self.enabled),
            k: Some(self.k.get()),
            window: Some(self.window.into()),
            export_keys: Some(self.export_keys),
        }
    }
}

/// Validates `[hot_keys]`; every error names its key.
pub(super) fn hot_keys(problems: &mut Problems, raw: &RawHotKeys) -> HotKeysConfig {
    let defaults = HotKeysConfig::default();
    let k = match raw.k {
        None => defaults.k,
        Some(k) => TopK::new(k).unwrap_or_else(|| {
            problems.push("hot_keys.k", format!("must be 1 to {}", TopK::MAX));
            defaults.k
        }),
    };
    let window = raw.window.unwrap_or(raw::DEFAULT_HOT_KEYS_WINDOW).get();
    if !(MIN_WINDOW..=MAX_WINDOW).contains(&window) {
        problems.push(
            "hot_keys.window",
            format!(
                "must be {} to {}",
                format_duration(MIN_WINDOW),
                format_duration(MAX_WINDOW)
            ),
        );
    }
    HotKeysConfig {
        enabled: raw.enabled.unwrap_or(true),
        k,
        window,
        export_keys: raw.export_keys.unwrap_or(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::raw::ConfigDuration;
    use crate::config::tests::{MINIMAL, problems_of};

    fn check(raw: &RawHotKeys) -> (HotKeysConfig, Vec<String>) {
        let mut problems = Problems::default();
        let config = hot_keys(&mut problems, raw);
        (config, problems.0)
    }

    #[test]
    fn defaults_are_on_ten_keys_one_minute_no_key_series() {
        let (config, problems) = check(&RawHotKeys::default());
        assert!(problems.is_empty(), "{problems:?}");
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
        for (raw, expected) in [
            (
                RawHotKeys {
                    k: Some(0),
                    ..RawHotKeys::default()
                },
                "hot_keys.k: must be 1 to 100",
            ),
            (
                RawHotKeys {
                    k: Some(101),
                    ..RawHotKeys::default()
                },
                "hot_keys.k: must be 1 to 100",
            ),
            (
                RawHotKeys {
                    window: Some(ConfigDuration::millis(500)),
                    ..RawHotKeys::default()
                },
                "hot_keys.window: must be 1s to 24h",
            ),
        ] {
            let (_, problems) = check(&raw);
            assert_eq!(problems.len(), 1, "{problems:?}");
            assert!(problems[0].starts_with(expected), "{problems:?}");
        }
        let (config, problems) = check(&RawHotKeys {
            enabled: Some(false),
            k: Some(100),
            window: Some(ConfigDuration::secs(300)),
            export_keys: Some(true),
        });
        assert!(problems.is_empty());
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
