//! Reads what one primary keeps of a write (`store::durability`): its
//! server and version, its AOF and RDB settings, its online replicas and,
//! on a Cluster, whether it stops every slot when one is uncovered.

use std::collections::HashMap;

use fred::interfaces::ServerInterface;
use fred::prelude::{ClientLike, Value};
use fred::types::{ClusterHash, CustomCommand, InfoKind};

use super::classify;
use crate::store::StoreError;
use crate::store::durability::Persistence;
use crate::store::server::{Server, info_field};

/// `node`'s persistence. Only "unreachable" is an error; a setting the
/// server refuses to show (managed Redis without `CONFIG`) is `None`.
pub(in crate::store) async fn persistence<C: ClientLike + ServerInterface>(
    client: &C,
    node: String,
    clustered: bool,
) -> Result<Persistence, StoreError> {
    let server = readable(info(client, InfoKind::Server).await)?
        .as_deref()
        .and_then(Server::from_info);
    let append = readable(config_get(client, "append*").await)?;
    let save = readable(config_get(client, "save").await)?;
    let appendonly = match append.as_ref().and_then(|a| a.get("appendonly")) {
        Some(value) => Some(value == "yes"),
        // `INFO persistence` still tells whether the AOF is on.
        None => readable(info(client, InfoKind::Persistence).await)?
            .as_deref()
            .and_then(|text| info_field(text, "aof_enabled"))
            .map(|value| value == "1"),
    };
    let replication = readable(info(client, InfoKind::Replication).await)?;
    let full_coverage = if clustered {
        readable(config_get(client, "cluster-require-full-coverage").await)?
            .and_then(|settings| settings.get("cluster-require-full-coverage").cloned())
            .map(|value| value == "yes")
    } else {
        None
    };
    Ok(Persistence {
        node,
        server,
        appendonly,
        appendfsync: append.as_ref().and_then(|a| a.get("appendfsync").cloned()),
        save: save.and_then(|settings| settings.get("save").cloned()),
        replicas: replication.as_deref().map_or(0, online_replicas),
        full_coverage,
    })
}

/// `Ok(None)` for a refused command, the error for an unreachable node.
fn readable<T>(result: Result<T, StoreError>) -> Result<Option<T>, StoreError> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(StoreError::Unavailable(error)) => Err(StoreError::Unavailable(error)),
        Err(_) => Ok(None),
    }
}

/// `CONFIG GET pattern` (one pattern: Redis before 7 takes only one).
async fn config_get<C: ClientLike>(
    client: &C,
    pattern: &'static str,
) -> Result<HashMap<String, String>, StoreError> {
    let command = CustomCommand::new_static("CONFIG", ClusterHash::Random, false);
    let args = vec![Value::from("GET"), Value::from(pattern)];
    client.custom(command, args).await.map_err(|e| classify(&e))
}

async fn info<C: ServerInterface>(client: &C, section: InfoKind) -> Result<String, StoreError> {
    client
        .info::<String>(Some(section))
        .await
        .map_err(|e| classify(&e))
}

/// Replicas of an `INFO replication` reply whose `state` is `online`
/// (`slave0:ip=…,port=…,state=online,offset=…,lag=0`).
fn online_replicas(text: &str) -> u32 {
    let online = text.lines().filter(|line| {
        line.split_once(':').is_some_and(|(key, value)| {
            key.starts_with("slave")
                && key[5..].bytes().all(|b| b.is_ascii_digit())
                && value.split(',').any(|part| part == "state=online")
        })
    });
    u32::try_from(online.count()).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_online_replicas_count() {
        let text = "# Replication\r\nrole:master\r\nconnected_slaves:3\r\n\
                    slave0:ip=127.0.0.1,port=7001,state=online,offset=10,lag=0\r\n\
                    slave1:ip=127.0.0.1,port=7002,state=wait_bgsave,offset=0,lag=0\r\n\
                    slave2:ip=127.0.0.1,port=7003,state=online,offset=10,lag=1\r\n\
                    slave_read_repl_offset:10\r\n";
        assert_eq!(online_replicas(text), 2);
        assert_eq!(online_replicas("role:master\r\nconnected_slaves:0\r\n"), 0);
    }
}
