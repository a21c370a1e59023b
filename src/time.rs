//! Wall-clock time in unix milliseconds: the one unit records, inbox
//! indexes, schedules and TTLs are kept in, so every conversion from a
//! `Duration` saturates the same way instead of wrapping.

use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio_util::sync::CancellationToken;

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

/// Runs `tick` every `period`, the first time at once, until `shutdown`
/// is cancelled: the one loop behind every background chore (sweeps,
/// gauge refreshes, recorder upkeep). A tick under way finishes before
/// the loop looks at `shutdown` again (ticks missed meanwhile follow at
/// once: tokio's default `Burst`).
pub(crate) async fn every<F, Fut>(period: Duration, shutdown: CancellationToken, mut tick: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let mut ticker = tokio::time::interval(period);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            _ = ticker.tick() => tick().await,
        }
    }
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
