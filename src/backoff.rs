//! Growing, jittered pauses with a floor and a ceiling: how long to wait
//! before asking the store again.
//!
//! A waiting duplicate re-checks its key, an answer in hand is stored
//! again, and an inbox worker swaps its record again after pauses that
//! start short, so a quick recovery is noticed at once, and grow up to a
//! ceiling, so a long wait or outage is neither hammered nor noticed late.
//!
//! Every pause is drawn with *decorrelated jitter*: uniformly between the
//! first pause and three times the previous one, capped. Without it every
//! request and every instance that failed on the same Redis blink would
//! retry on the same schedule and hit the recovering store together, in
//! waves; with it they spread over the whole window while the mean still
//! grows about geometrically. The floor stays `first`, so a pause is never
//! so short that a retry loop spins.
//!
//! Each backoff draws from its own small generator seeded from the
//! operating system, so two retry loops (in one process or in two) never
//! share a schedule; tests seed it to pin one. The seed is read at the
//! first draw, not when the backoff is made: a claim makes one for every
//! request and almost never pauses twice, and a `getrandom` call per
//! request was measurable (bench/RESULTS.md, "What the features
//! cost"). The schedule is kept apart
//! from the store calls so it can be pinned by tests of its own.

use std::time::Duration;

/// A pause that grows with jitter after each use, between a floor and a
/// ceiling.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    first: Duration,
    max: Duration,
    /// The previous pause; `None` before the first.
    last: Option<Duration>,
    /// The generator; `None` until the first draw (the first pause draws
    /// nothing).
    draws: Option<SplitMix>,
}

impl Backoff {
    /// Starts at `first`; no pause is shorter than `first` (unless `max`
    /// is) nor longer than `max`. Seeded from the operating system at its
    /// first draw.
    pub(crate) fn new(first: Duration, max: Duration) -> Self {
        Self {
            first,
            max,
            last: None,
            draws: None,
        }
    }

    /// [`Backoff::new`] with a chosen seed: the same seed, the same pauses.
    #[cfg(test)]
    pub(crate) fn seeded(first: Duration, max: Duration, seed: u64) -> Self {
        Self {
            draws: Some(SplitMix(seed)),
            ..Self::new(first, max)
        }
    }

    /// The pause to take now: uniform in `first ..= 3 × previous`, capped
    /// at `max`. The first pause is always `first`, so the first retry
    /// after a blink is as quick as before.
    pub(crate) fn next_pause(&mut self) -> Duration {
        let floor = self.first.min(self.max);
        let pause = match self.last {
            None => floor,
            Some(last) => {
                let top = last.saturating_mul(3).min(self.max).max(floor);
                // A failed read of the random source still gives a
                // working, merely less independent, schedule.
                let draws = self
                    .draws
                    .get_or_insert_with(|| SplitMix(getrandom::u64().unwrap_or(0x1de9_6a7e)));
                floor + (top - floor).mul_f64(draws.unit())
            }
        };
        self.last = Some(pause);
        pause
    }
}

/// SplitMix64: a tiny, fast, well-mixed generator. Pauses need spreading,
/// not secrecy, so one seed from the operating system per backoff is
/// enough.
#[derive(Debug, Clone)]
struct SplitMix(u64);

impl SplitMix {
    const STEP: u64 = 0x9e37_79b9_7f4a_7c15;

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(Self::STEP);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0.0..1.0`.
    fn unit(&mut self) -> f64 {
        // The top 53 bits fill an f64's mantissa exactly.
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use tokio::time::Instant;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_first_pause_is_the_floor_and_none_leaves_the_bounds() {
        for seed in 0..500 {
            let mut backoff = Backoff::seeded(ms(50), ms(1_000), seed);
            assert_eq!(backoff.next_pause(), ms(50));
            let mut last = ms(50);
            for _ in 0..40 {
                let pause = backoff.next_pause();
                assert!(pause >= ms(50) && pause <= ms(1_000), "{pause:?}");
                assert!(pause <= last * 3, "{pause:?} after {last:?}");
                last = pause;
            }
        }
    }

    #[test]
    fn pauses_grow_towards_the_ceiling() {
        // Averaged over many schedules, the twentieth pause is well on its
        // way to the ceiling while the second is still short: the outage is not
        // hammered, and a quick recovery is noticed early.
        let nth = |n: usize| {
            let total: Duration = (0..1_000)
                .map(|seed| {
                    let mut backoff = Backoff::seeded(ms(50), ms(1_000), seed);
                    (0..n).map(|_| backoff.next_pause()).last().unwrap()
                })
                .sum();
            total / 1_000
        };
        assert!(nth(2) < ms(120), "{:?}", nth(2));
        assert!(nth(20) > ms(400), "{:?}", nth(20));
    }

    #[test]
    fn a_seed_pins_the_schedule_and_two_seeds_differ() {
        let schedule = |seed| {
            let mut backoff = Backoff::seeded(ms(10), ms(100), seed);
            (0..8).map(|_| backoff.next_pause()).collect::<Vec<_>>()
        };
        assert_eq!(schedule(7), schedule(7));
        assert_ne!(schedule(7), schedule(8));
        // Two loops seeded by the operating system do not share one either.
        let mut a = Backoff::new(ms(10), ms(100));
        let mut b = Backoff::new(ms(10), ms(100));
        let a: Vec<_> = (0..8).map(|_| a.next_pause()).collect();
        let b: Vec<_> = (0..8).map(|_| b.next_pause()).collect();
        assert_ne!(a, b);
    }

    #[test]
    fn the_random_source_is_read_at_the_first_draw_not_before() {
        let mut backoff = Backoff::new(ms(50), ms(1_000));
        assert!(backoff.draws.is_none());
        assert_eq!(backoff.next_pause(), ms(50));
        assert!(backoff.draws.is_none(), "the first pause draws nothing");
        backoff.next_pause();
        assert!(backoff.draws.is_some());
    }

    #[test]
    fn a_ceiling_below_the_first_pause_wins() {
        let mut backoff = Backoff::new(ms(10), ms(4));
        for _ in 0..5 {
            assert_eq!(backoff.next_pause(), ms(4));
        }
    }

    /// Fifty retry loops that failed on the same blink: when does each
    /// make its fifth attempt?
    async fn fifth_attempts(backoff: impl Fn(u64) -> Backoff) -> Vec<Duration> {
        let started = Instant::now();
        let loops = (0..50).map(|seed| {
            let mut backoff = backoff(seed);
            tokio::spawn(async move {
                for _ in 0..4 {
                    tokio::time::sleep(backoff.next_pause()).await;
                }
                started.elapsed()
            })
        });
        let mut times = Vec::new();
        for handle in loops.collect::<Vec<_>>() {
            times.push(handle.await.unwrap());
        }
        times.sort();
        times
    }

    #[tokio::test(start_paused = true)]
    async fn retries_after_one_blink_do_not_march_in_step() {
        let times = fifth_attempts(|_| Backoff::new(ms(50), ms(1_000))).await;
        let mut distinct = times.clone();
        distinct.dedup();
        // The timer counts whole milliseconds, so a few may coincide.
        assert!(distinct.len() >= 40, "{} distinct of 50", distinct.len());
        let spread = times[times.len() - 1] - times[0];
        assert!(spread > ms(500), "fifth attempts within {spread:?}");
        // Plain doubling would have put all fifty at 50+100+200+400 ms.
        assert!(times.iter().any(|t| *t != ms(750)));
    }
}
