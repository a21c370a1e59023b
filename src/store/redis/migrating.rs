//! A slot on its way to another node (a Cluster reshard).
//!
//! While a slot migrates, its source node answers `ASK host:port` for a key
//! that has already moved, and `TRYAGAIN` for a script whose keys are split
//! between the two nodes. The request path's per-primary pools
//! (`shards.rs`) talk to one node each, so the redirect is followed here:
//! `ASKING` and the call again, pipelined on one connection of the
//! importing node's pool (nothing can come between them). `TRYAGAIN` lasts
//! until the last keys of the slot have moved, so it is retried a few
//! times, briefly, on the source. What still fails is an unavailable store,
//! which a stored answer outlasts (`pipeline::persist` keeps storing it)
//! and a claim answers with 503.
//!
//! Without this, a completion caught by a migration gave up the answer in
//! hand, and the delivery turned into an unknown outcome.

use std::time::Duration;

use fred::interfaces::ClientLike;
use fred::prelude::{Client, Error as FredError, Server, Value};
use fred::types::{ClusterHash, CustomCommand};

use super::scripts::Named;
use super::shards::Shards;

/// Calls in all while a slot's keys are split (`TRYAGAIN`) or move.
const ATTEMPTS: u32 = 5;
/// Pause before each further call: a slot's keys move in milliseconds.
const PAUSE: Duration = Duration::from_millis(50);

/// Where a migrating slot's key is now, from the error.
#[derive(Debug, PartialEq, Eq)]
enum Redirect {
    /// `ASK slot host:port`: the key is on that node, for this call only.
    Ask(Server),
    /// `TRYAGAIN`: the script's keys are split between the two nodes.
    TryAgain,
}

fn redirect(error: &FredError) -> Option<Redirect> {
    let details = error.details();
    if details.starts_with("TRYAGAIN") {
        return Some(Redirect::TryAgain);
    }
    let address = details.strip_prefix("ASK ")?.split_whitespace().nth(1)?;
    let (host, port) = address.rsplit_once(':')?;
    Some(Redirect::Ask(Server::new(host, port.parse().ok()?)))
}

/// Whether `error` says the key's slot is migrating.
pub(super) fn is_migrating(error: &FredError) -> bool {
    redirect(error).is_some()
}

/// Runs `script` again where the slot's migration says (module docs),
/// starting from `first`, the error `client` got. `client` then names the
/// client that took the write, so a `WAIT` after it follows the same
/// connection.
pub(super) async fn follow(
    shards: &Shards,
    client: &mut Client,
    script: &Named,
    (keys, args): (Vec<String>, Vec<Value>),
    first: FredError,
) -> Result<Value, FredError> {
    let source = client.clone();
    let mut error = first;
    for _ in 1..ATTEMPTS {
        let result = match redirect(&error) {
            Some(Redirect::Ask(server)) => {
                let Some(pool) = shards.pool_at(&server) else {
                    return Err(error);
                };
                *client = pool.next_connected().clone();
                asked(client, script, keys.clone(), args.clone()).await
            }
            Some(Redirect::TryAgain) => {
                tokio::time::sleep(PAUSE).await;
                *client = source.clone();
                script
                    .evalsha_with_reload::<Value, _, _>(client, keys.clone(), args.clone())
                    .await
            }
            None => return Err(error),
        };
        match result {
            Err(next) => error = next,
            done => return done,
        }
    }
    Err(error)
}

/// `ASKING` then `EVALSHA`, pipelined on `client`'s one connection.
async fn asked(
    client: &Client,
    script: &Named,
    keys: Vec<String>,
    args: Vec<Value>,
) -> Result<Value, FredError> {
    let pipeline = client.pipeline();
    let asking = CustomCommand::new_static("ASKING", ClusterHash::FirstKey, false);
    let _: () = pipeline.custom(asking, Vec::<Value>::new()).await?;
    let evalsha = CustomCommand::new_static("EVALSHA", ClusterHash::FirstKey, false);
    let mut call = vec![
        Value::from(script.sha1().clone()),
        Value::Integer(i64::try_from(keys.len()).unwrap_or(i64::MAX)),
    ];
    call.extend(keys.into_iter().map(Value::from));
    call.extend(args);
    let _: () = pipeline.custom(evalsha, call).await?;
    let mut replies = pipeline.try_all::<Value>().await.into_iter();
    replies.next().transpose()?;
    replies
        .next()
        .unwrap_or_else(|| Err(FredError::new(fred::error::ErrorKind::Protocol, "no reply")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use fred::error::ErrorKind;

    #[test]
    fn ask_and_tryagain_are_a_migration_and_pass() {
        let ask = FredError::new(ErrorKind::Cluster, "ASK 3999 127.0.0.1:7002");
        let tryagain = FredError::new(
            ErrorKind::Unknown,
            "TRYAGAIN Multiple keys request during rehashing of slot",
        );
        let moved = FredError::new(ErrorKind::Cluster, "MOVED 3999 127.0.0.1:7002");
        assert_eq!(
            redirect(&ask),
            Some(Redirect::Ask(Server::new("127.0.0.1", 7002)))
        );
        assert_eq!(redirect(&tryagain), Some(Redirect::TryAgain));
        assert_eq!(redirect(&moved), None);
        for error in [ask, tryagain, moved] {
            assert!(
                super::super::classify(&error).is_transient(),
                "{error:?} is retried, not given up"
            );
        }
        let wrongtype = FredError::new(ErrorKind::Unknown, "WRONGTYPE Operation");
        assert!(!super::super::classify(&wrongtype).is_transient());
    }
}
