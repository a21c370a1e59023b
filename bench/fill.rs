//! Fills a store with completed records, for the scale curve
//! (`bench/scale`): what start-up, memory, file size and throughput cost
//! as the store grows.
//!
//! ```text
//! cargo run --release --example fill -- embedded PATH COUNT [ANSWER] [SECONDS]
//! cargo run --release --example fill -- redis URL COUNT [ANSWER] [SECONDS]
//! ```
//!
//! Each record is written through the store's own API, as the pipeline
//! writes a completed answer (`Store::complete` on a free key, one call a
//! record, up to [`IN_FLIGHT`] at once, so the embedded store's group
//! commit and Redis's pipelining both see a busy proxy's traffic). The
//! keys are those of route scope `pay` under prefix `idemgate`, kept for 7
//! days: by default hashes that no request would ever make (`f111` first);
//! with `FILL_DELIVERIES=PREFIX` and `FILL_BODY=FILE`, the records of the
//! deliveries `PREFIX-1` … `PREFIX-COUNT` (the id in `X-GitHub-Delivery`,
//! the body in `FILE`) as `bench/scale`'s route keys and fingerprints them
//! (key `["header:X-GitHub-Delivery"]`, fingerprint `["body"]`), so a
//! request can replay any of them. `ANSWER` is `alipay` (the 7-byte `success` acknowledgement,
//! `text/plain`: the smallest real answer), `alipay-ack` (the same answer
//! as the route's acknowledgement: a route with `[route.inbox]` `ack_*`
//! keeps it as a 60-byte marker, `src/record/compact.rs`) or `github` (a
//! 22-byte JSON body and three headers); default `alipay`. The fill stops at `COUNT`
//! records or after `SECONDS` (default 900), whichever comes first, and
//! prints one line: `filled N records in S s (R records/s)`.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use idemgate::pipeline::admit::identify::hash_key_parts;
use idemgate::record::{Fingerprint, OwnerMint, Record, RecordState, StoredBody, StoredResponse};
use idemgate::store::entity::EntityEffect;
use idemgate::store::{Store, StoreKey};
use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;

/// Writes in flight at once.
const IN_FLIGHT: usize = 256;

/// How long each record is kept.
const KEPT: Duration = Duration::from_secs(7 * 24 * 3600);

/// The answer every record holds.
fn answer(kind: &str) -> StoredResponse {
    let header = |name: &'static str, value: &'static str| {
        (
            Bytes::from_static(name.as_bytes()),
            Bytes::from_static(value.as_bytes()),
        )
    };
    match kind {
        "github" => StoredResponse {
            status: 200,
            headers: vec![
                header("content-type", "application/json"),
                header("date", "Mon, 07 Dec 2026 10:00:00 GMT"),
                header("x-request-id", "0f2c7a9e-61d4-4b8e-9a53-6b1f0e2d4c11"),
            ],
            body: StoredBody::Kept(Bytes::from_static(br#"{"ok":true,"id":123456}"#)),
        },
        _ => StoredResponse {
            status: 200,
            headers: vec![header("content-type", "text/plain")],
            body: StoredBody::Kept(Bytes::from_static(b"success")),
        },
    }
}

/// Which records the fill writes: their keys and their fingerprint.
enum Shape {
    /// Keys no request makes: 64 hex digits, `f111` first so no
    /// request's SHA-256 is likely to meet them.
    Unreachable,
    /// The records of deliveries `{prefix}-{n}`, all with one body.
    Deliveries {
        prefix: String,
        fingerprint: Fingerprint,
    },
}

impl Shape {
    /// From `FILL_DELIVERIES` and `FILL_BODY`.
    fn from_env() -> Self {
        let Ok(prefix) = std::env::var("FILL_DELIVERIES") else {
            return Self::Unreachable;
        };
        let path = std::env::var("FILL_BODY").expect("FILL_DELIVERIES needs FILL_BODY");
        let body = std::fs::read(&path).expect("read FILL_BODY");
        Self::Deliveries {
            prefix,
            fingerprint: body_fingerprint(&body),
        }
    }

    /// The `n`th record's key (from 0).
    fn key(&self, n: u64) -> StoreKey {
        let hash = match self {
            Self::Unreachable => format!("f111{n:060x}"),
            Self::Deliveries { prefix, .. } => {
                let id = format!("{prefix}-{}", n + 1);
                hex::encode(hash_key_parts([id.as_bytes()]))
            }
        };
        StoreKey::new("idemgate", "pay", &hash)
    }

    fn fingerprint(&self) -> Fingerprint {
        match self {
            Self::Unreachable => Fingerprint([7; 32]),
            Self::Deliveries { fingerprint, .. } => *fingerprint,
        }
    }
}

/// The fingerprint a route with `fingerprint = ["body"]` (and no
/// `fingerprint_ignore`) gives `body`: SHA-256 over the part's tag `B`,
/// its length and the body's SHA-256, as
/// `pipeline::admit::identify::fingerprint` writes it. Should that layout
/// change, `bench/scale`'s spread rounds answer 422 and the run fails.
fn body_fingerprint(body: &[u8]) -> Fingerprint {
    let body_digest = Sha256::digest(body);
    let mut hasher = Sha256::new();
    hasher.update([b'B']);
    hasher.update((body_digest.len() as u64).to_be_bytes());
    hasher.update(body_digest);
    Fingerprint(hasher.finalize().into())
}

async fn fill<S: Store + Send + Sync + 'static>(
    store: Arc<S>,
    count: u64,
    answer: StoredResponse,
    compact: bool,
    shape: &Shape,
    budget: Duration,
) -> u64 {
    let started = Instant::now();
    let mint = OwnerMint::new();
    let permits = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut writes = JoinSet::new();
    let mut sent = 0;
    while sent < count && started.elapsed() < budget {
        let permit = Arc::clone(&permits).acquire_owned().await.expect("open");
        let record = Record::in_flight(mint.next(), shape.fingerprint(), None)
            .with_state(RecordState::Completed(answer.clone()));
        let record = if compact {
            record.compacted(Some(&answer))
        } else {
            record
        };
        let store = Arc::clone(&store);
        let key = shape.key(sent);
        writes.spawn(async move {
            let written = store
                .complete(&key, record.owner, &record, KEPT, EntityEffect::Keep)
                .await;
            drop(permit);
            written.is_ok()
        });
        sent += 1;
        while let Some(done) = writes.try_join_next() {
            assert!(done.expect("a write task"), "a write failed");
        }
    }
    while let Some(done) = writes.join_next().await {
        assert!(done.expect("a write task"), "a write failed");
    }
    let seconds = started.elapsed().as_secs_f64();
    #[expect(clippy::cast_precision_loss, reason = "a rate to print")]
    let rate = sent as f64 / seconds;
    println!("filled {sent} records in {seconds:.1} s ({rate:.0} records/s)");
    sent
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: fill embedded PATH COUNT [alipay|alipay-ack|github] [SECONDS] | fill redis URL COUNT [alipay|alipay-ack|github] [SECONDS]";
    let (Some(kind), Some(place), Some(count)) = (args.first(), args.get(1), args.get(2)) else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    let count: u64 = count.parse().expect("COUNT is a whole number");
    let kind_of_answer = args.get(3).map_or("alipay", String::as_str);
    let answer = answer(kind_of_answer);
    let compact = kind_of_answer == "alipay-ack";
    let budget = Duration::from_secs(args.get(4).map_or(900, |s| s.parse().expect("SECONDS")));
    let shape = Shape::from_env();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        match kind.as_str() {
            "embedded" => {
                let store =
                    idemgate::store::embedded::EmbeddedStore::open(std::path::Path::new(place))
                        .expect("open the embedded store");
                fill(Arc::new(store), count, answer, compact, &shape, budget).await;
            }
            "redis" => {
                let store = idemgate::store::redis::RedisStore::connect(
                    place,
                    Duration::from_secs(10),
                    None,
                    4,
                )
                .await
                .expect("connect to redis");
                fill(Arc::new(store), count, answer, compact, &shape, budget).await;
            }
            _ => {
                eprintln!("{usage}");
                std::process::exit(2);
            }
        }
    });
}
