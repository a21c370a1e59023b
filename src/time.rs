//! Wall-clock time in unix milliseconds: the one unit records, inbox
//! indexes, schedules and TTLs are kept in, so every conversion from a
//! `Duration` saturates the same way instead of wrapping.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Current wall-clock time in unix milliseconds (0 if the clock is set
/// before 1970).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, millis)
}

/// `duration` in whole milliseconds, saturating at `u64::MAX` (a
/// "hundred years" TTL and an unbounded timeout both stay ordered).
pub fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_saturate() {
        assert_eq!(millis(Duration::from_millis(1500)), 1500);
        assert_eq!(millis(Duration::MAX), u64::MAX);
        assert!(now_ms() > 1_700_000_000_000);
    }
}
