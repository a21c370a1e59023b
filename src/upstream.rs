//! Talking to the handler: the one pooled client, forwarding a request
//! (live or redelivered) and passing one through untouched, and the stored
//! form of the answer. The pipeline forwards first deliveries through it,
//! the inbox redelivers through it; neither goes through the other.
//!
//! * [`forward`] (`upstream/forward.rs`): re-framed requests, hop-by-hop
//!   headers, `X-Forwarded-For`, the bounded answer read, failures sorted
//!   by what they mean for idempotency.
//! * `upstream/quick_ack.rs`: the connector that sets `TCP_QUICKACK` on
//!   connections whose backend delays its ACKs.
//! * [`stored`] (`upstream/answer.rs`): what a record keeps of an answer.

mod answer;
mod forward;
mod quick_ack;

pub(crate) use answer::stored;
pub(crate) use forward::{
    AnswerBody, ForwardError, UpstreamAnswer, UpstreamClient, X_FORWARDED_FOR, client, forward,
    forwarded_for, pass_through, target,
};
