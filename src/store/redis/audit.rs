//! The Redis side of `store::audit`: one stream, `{prefix}:audit`. The
//! server names each entry (`{ms}-{seq}`, later than every entry before,
//! whichever instance appends), `XADD … MAXLEN ~` bounds its length and
//! `XTRIM … MINID ~` drops what the retention no longer keeps; an append
//! is confirmed at the declared `[store] durability` like a claim. A page
//! is one `XREVRANGE` from the cursor down to the retention's start.

use std::time::Duration;

use fred::interfaces::ClientLike;
use fred::prelude::Value;
use fred::types::{ClusterHash, CustomCommand};

use super::{RedisStore, classify};
use crate::store::audit::{AuditId, AuditOps, MAX_ENTRIES};
use crate::store::{Call, StoreError, StoreKey};

/// The field each stream entry keeps its JSON text under.
const FIELD: &str = "e";

/// The trail's stream under the key prefix `prefix`.
fn stream(prefix: &str) -> String {
    format!("{prefix}:audit")
}

impl RedisStore {
    async fn append_audit(
        &self,
        prefix: &str,
        entry: String,
        retention: Duration,
    ) -> Result<AuditId, StoreError> {
        let key = stream(prefix);
        let client = self.routed(&key);
        let command = |name| CustomCommand::new_static(name, ClusterHash::FirstKey, false);
        let max = i64::try_from(MAX_ENTRIES).unwrap_or(i64::MAX);
        let added: Value = client
            .custom(
                command("XADD"),
                vec![
                    Value::from(key.as_str()),
                    Value::from("MAXLEN"),
                    Value::from("~"),
                    Value::Integer(max),
                    Value::from("*"),
                    Value::from(FIELD),
                    Value::from(entry),
                ],
            )
            .await
            .map_err(|e| classify(&e))?;
        let id: AuditId = added
            .as_string()
            .ok_or_else(|| StoreError::Backend("XADD answered no id".into()))?
            .parse()?;
        let cutoff = id.ms.saturating_sub(crate::time::millis(retention));
        let _: Value = client
            .custom(
                command("XTRIM"),
                vec![
                    Value::from(key.as_str()),
                    Value::from("MINID"),
                    Value::from("~"),
                    Value::from(cutoff.to_string()),
                ],
            )
            .await
            .map_err(|e| classify(&e))?;
        match self.durable(&client, &StoreKey(key, false)).await? {
            Ok(()) => Ok(id),
            Err(why) => Err(StoreError::Backend(format!(
                "audit entry {id} kept, but not confirmed durable: {why}"
            ))),
        }
    }

    async fn audit_entries(
        &self,
        prefix: &str,
        before: Option<AuditId>,
        since_ms: u64,
        limit: usize,
    ) -> Result<Vec<(AuditId, String)>, StoreError> {
        let key = stream(prefix);
        let end = before.map_or_else(|| "+".to_owned(), |id| format!("({id}"));
        let reply: Value = self
            .routed(&key)
            .custom(
                CustomCommand::new_static("XREVRANGE", ClusterHash::FirstKey, true),
                vec![
                    Value::from(key.as_str()),
                    Value::from(end),
                    Value::from(since_ms.to_string()),
                    Value::from("COUNT"),
                    Value::Integer(i64::try_from(limit).unwrap_or(i64::MAX)),
                ],
            )
            .await
            .map_err(|e| classify(&e))?;
        let unexpected = || StoreError::Backend("unexpected XREVRANGE reply".into());
        let mut page = Vec::new();
        for item in reply.into_array() {
            let mut parts = item.into_array().into_iter();
            let id: AuditId = parts
                .next()
                .and_then(|id| id.as_string())
                .ok_or_else(unexpected)?
                .parse()?;
            let fields = parts.next().ok_or_else(unexpected)?.into_array();
            let text = fields
                .chunks(2)
                .find(|pair| pair[0].as_str().as_deref() == Some(FIELD))
                .and_then(|pair| pair.get(1)?.as_string())
                .ok_or_else(unexpected)?;
            page.push((id, text));
        }
        Ok(page)
    }
}

impl AuditOps for RedisStore {
    fn audit_append<'a>(
        &'a self,
        prefix: &'a str,
        entry: String,
        retention: Duration,
    ) -> Call<'a, AuditId> {
        Box::pin(self.append_audit(prefix, entry, retention))
    }

    fn audit_page<'a>(
        &'a self,
        prefix: &'a str,
        before: Option<AuditId>,
        since_ms: u64,
        limit: usize,
    ) -> Call<'a, Vec<(AuditId, String)>> {
        Box::pin(self.audit_entries(prefix, before, since_ms, limit))
    }
}
