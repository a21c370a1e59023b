//! The inbox listing's cursor: the (time, key hash) of the last delivery a
//! page showed, so the next page starts after it in the index's order (a
//! keyset walk). Dropping or retrying a delivery already shown, or a new
//! one arriving, moves none of those still to come, where an offset would
//! skip as many as were removed before it.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::store::inbox::IndexPosition;
use crate::store::listing::BadCursor;

/// The version tag of the cursor text.
const TAG: &str = "i1";

/// The cursor as clients see it: base64url (no padding) of
/// `i1:{listing}:{time}:{key hash}`, where `listing` names the walk
/// (`inbox/{scope}/{state}`, no `:`), so another listing's cursor is
/// refused rather than positioning this walk in an index it never read.
pub(super) fn encode(at: &IndexPosition, listing: &str) -> String {
    URL_SAFE_NO_PAD.encode(format!("{TAG}:{listing}:{}:{}", at.score, at.member))
}

/// Reads what [`encode`] wrote for the same `listing`.
pub(super) fn decode(text: &str, listing: &str) -> Result<IndexPosition, BadCursor> {
    let raw = URL_SAFE_NO_PAD.decode(text).map_err(|_| BadCursor)?;
    let raw = String::from_utf8(raw).map_err(|_| BadCursor)?;
    let rest = raw
        .strip_prefix(TAG)
        .and_then(|rest| rest.strip_prefix(':'))
        .and_then(|rest| rest.strip_prefix(listing))
        .and_then(|rest| rest.strip_prefix(':'))
        .ok_or(BadCursor)?;
    let (score, member) = rest.split_once(':').ok_or(BadCursor)?;
    let score = score.parse().map_err(|_| BadCursor)?;
    if member.len() != 64 || !member.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(BadCursor);
    }
    Ok(IndexPosition {
        score,
        member: member.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_resumes_only_its_own_listing() {
        let at = IndexPosition {
            score: 1_765_000_000_123,
            member: "ab".repeat(32),
        };
        let text = encode(&at, "inbox/pay/dead");
        assert_eq!(decode(&text, "inbox/pay/dead"), Ok(at));
        assert_eq!(decode(&text, "inbox/pay/queued"), Err(BadCursor));
        assert_eq!(decode(&text, "inbox/pay:eu/dead"), Err(BadCursor));
        for bad in [
            "14",
            "",
            &URL_SAFE_NO_PAD.encode("i1:inbox/pay/dead:x:abab"),
            &URL_SAFE_NO_PAD.encode("i1:inbox/pay/dead:5:zz"),
            &URL_SAFE_NO_PAD.encode(format!("i0:inbox/pay/dead:5:{}", "a".repeat(64))),
        ] {
            assert_eq!(decode(bad, "inbox/pay/dead"), Err(BadCursor), "{bad}");
        }
    }
}
