//! The embedded side of `store::audit`: the table `audit` of the same
//! file, `(ms, seq)` → the entry's JSON text. An append runs in its own
//! write transaction (committed durably before the API answers) and trims
//! what the retention and [`MAX_ENTRIES`] no longer keep, oldest first, a
//! bounded number per append.

use std::time::Duration;

use redb::{ReadableTable, ReadableTableMetadata, TableDefinition};

use super::{EmbeddedStore, backend};
use crate::store::Call;
use crate::store::audit::{AuditId, AuditOps, MAX_ENTRIES};

/// `(appended at, unix ms; sequence within that ms)` → entry JSON.
pub(super) const AUDIT: TableDefinition<'static, (u64, u64), &str> = TableDefinition::new("audit");

/// The most entries one append trims: an append never holds the writer
/// long, and a trail over its bounds shrinks by this much per action.
const TRIM_PER_APPEND: usize = 1_000;

impl AuditOps for EmbeddedStore {
    fn audit_append<'a>(
        &'a self,
        _prefix: &'a str,
        entry: String,
        retention: Duration,
    ) -> Call<'a, AuditId> {
        Box::pin(self.transact(move |txn| {
            let mut table = txn.open_table(AUDIT).map_err(backend)?;
            let now = crate::time::now_ms();
            let last = table.last().map_err(backend)?.map(|(key, _)| key.value());
            let id = match last {
                Some((ms, seq)) if ms >= now => AuditId { ms, seq: seq + 1 },
                _ => AuditId { ms: now, seq: 0 },
            };
            table
                .insert((id.ms, id.seq), entry.as_str())
                .map_err(backend)?;
            let cutoff = now.saturating_sub(crate::time::millis(retention));
            let mut excess = usize::try_from(table.len().map_err(backend)?)
                .unwrap_or(usize::MAX)
                .saturating_sub(MAX_ENTRIES);
            for _ in 0..TRIM_PER_APPEND {
                let Some(ms) = table
                    .first()
                    .map_err(backend)?
                    .map(|(key, _)| key.value().0)
                else {
                    break;
                };
                if ms >= cutoff && excess == 0 {
                    break;
                }
                table.pop_first().map_err(backend)?;
                excess = excess.saturating_sub(1);
            }
            Ok((id, true))
        }))
    }

    fn audit_page<'a>(
        &'a self,
        _prefix: &'a str,
        before: Option<AuditId>,
        since_ms: u64,
        limit: usize,
    ) -> Call<'a, Vec<(AuditId, String)>> {
        Box::pin(self.read(AUDIT, move |table| {
            let end = before.map_or((u64::MAX, u64::MAX), |id| (id.ms, id.seq));
            let mut page = Vec::new();
            for item in table.range((since_ms, 0)..end).map_err(backend)?.rev() {
                let (key, value) = item.map_err(backend)?;
                let (ms, seq) = key.value();
                page.push((AuditId { ms, seq }, value.value().to_owned()));
                if page.len() >= limit {
                    break;
                }
            }
            Ok(page)
        }))
    }
}
