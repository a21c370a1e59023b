//! Doubling pauses with a ceiling: how long to wait before asking the
//! store again.
//!
//! A waiting duplicate re-checks its key and an answer in hand is stored
//! again after pauses that start short, so a quick recovery is noticed at
//! once, and double up to a ceiling, so a long wait or outage is neither
//! hammered nor noticed late. The schedule is kept apart from the store
//! calls so it can be pinned by a test of its own.

use std::time::Duration;

/// A pause that doubles after each use, up to a ceiling.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    next: Duration,
    max: Duration,
}

impl Backoff {
    /// Starts at `first`; no pause is ever longer than `max`.
    pub(crate) const fn new(first: Duration, max: Duration) -> Self {
        Self { next: first, max }
    }

    /// The pause to take now; the next one is twice as long, capped.
    pub(crate) fn next_pause(&mut self) -> Duration {
        let pause = self.next.min(self.max);
        self.next = (self.next * 2).min(self.max);
        pause
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn pauses_double_then_stay_at_the_ceiling() {
        let mut backoff = Backoff::new(ms(50), ms(1_000));
        let pauses: Vec<_> = (0..8).map(|_| backoff.next_pause()).collect();
        assert_eq!(
            pauses,
            [50, 100, 200, 400, 800, 1_000, 1_000, 1_000].map(ms)
        );
    }

    #[test]
    fn a_ceiling_below_the_first_pause_wins() {
        let mut backoff = Backoff::new(ms(10), ms(4));
        assert_eq!(backoff.next_pause(), ms(4));
        assert_eq!(backoff.next_pause(), ms(4));
    }
}
