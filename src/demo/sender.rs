//! The simulated at-least-once sender: signed deliveries as a payment
//! gateway would send them, and the ways it sends them (one at a time, in a
//! concurrent burst, or hanging up mid-request).
//!
//! It also owns what the sender saw ([`Seen`], [`Answer`]), since that is
//! what the scenarios check and the report prints.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, header};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::task::JoinSet;

use super::{ACK_BODY, LIFECYCLE_PATH, NOTIFY_PATH, SECRET};
use crate::config::Algorithm;
use crate::pipeline::first_delivery::settle::REPLAYED_HEADER;
use crate::record::now_ms;
use crate::signature::mac;

/// Upper bound for any single exchange; the demo treats more as broken.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(10);

/// One signed notification, as a gateway would send it.
#[derive(Debug, Clone)]
pub(super) struct Delivery {
    /// Where it is delivered: [`NOTIFY_PATH`] unless [`Delivery::to`] says otherwise.
    path: &'static str,
    body: String,
    signature: String,
}

impl Delivery {
    /// A "payment succeeded" notification for `id`, stamped `age` ago and
    /// signed with `secret`. Calling it again for a retry re-signs it with a
    /// fresh timestamp, as real gateways do.
    pub(super) fn new(id: &str, secret: &[u8], age: Duration) -> Self {
        let age_ms = crate::time::millis(age);
        let body = serde_json::json!({
            "paymentNo": id,
            "status": "SUCCESS",
            "amount": "49.90",
            "currency": "EUR",
            "timestamp": now_ms().saturating_sub(age_ms),
        })
        .to_string();
        let signature = hex::encode(mac(Algorithm::Sha256, secret, &[body.as_bytes()]));
        Self {
            path: NOTIFY_PATH,
            body,
            signature,
        }
    }

    /// A fresh notice `notify_id` (its own id, as gateways number their
    /// notices) saying payment `id` is now `status`, for the lifecycle
    /// route ([`LIFECYCLE_PATH`]).
    pub(super) fn notice(id: &str, notify_id: &str, status: &str) -> Self {
        let body = serde_json::json!({
            "paymentNo": id,
            "notifyId": notify_id,
            "status": status,
            "amount": "49.90",
            "currency": "EUR",
            "timestamp": now_ms(),
        })
        .to_string();
        let signature = hex::encode(mac(Algorithm::Sha256, SECRET, &[body.as_bytes()]));
        Self {
            path: LIFECYCLE_PATH,
            body,
            signature,
        }
    }

    /// A fresh, correctly signed notification.
    pub(super) fn fresh(id: &str) -> Self {
        Self::new(id, SECRET, Duration::ZERO)
    }

    /// The same delivery, sent to `path` instead.
    pub(super) fn to(self, path: &'static str) -> Self {
        Self { path, ..self }
    }
}

/// What the sender got back for one delivery.
#[derive(Debug, Clone)]
pub(super) enum Seen {
    /// The sender closed the connection before any answer.
    HungUp,
    /// An HTTP answer.
    Answer(Answer),
}

/// The parts of an answer the scenarios check.
#[derive(Debug, Clone)]
pub(super) struct Answer {
    pub(super) status: u16,
    /// The `Idempotent-Replayed` header, if present.
    pub(super) replayed: Option<bool>,
    /// The problem+json `reason`, for answers idemgate produced itself.
    pub(super) reason: Option<String>,
    pub(super) body: Bytes,
}

impl Answer {
    /// Whether this is the inbox route's acknowledgement (`ACK_BODY`; the
    /// handler itself only ever answers JSON).
    pub(super) fn is_ack(&self) -> bool {
        self.body == ACK_BODY.as_bytes()
    }
}

impl Seen {
    /// Short text for the table, e.g. `200 replayed`.
    pub(super) fn label(&self) -> String {
        match self {
            Self::HungUp => "hung up".to_owned(),
            Self::Answer(answer) => match (&answer.reason, answer.replayed) {
                (Some(reason), _) => format!("{} {reason}", answer.status),
                (None, Some(false)) if answer.is_ack() => format!("{} acknowledged", answer.status),
                (None, Some(true)) if answer.is_ack() => format!("{} ack replayed", answer.status),
                (None, Some(true)) => format!("{} replayed", answer.status),
                (None, Some(false)) => format!("{} forwarded", answer.status),
                (None, None) => format!("{} unmarked", answer.status),
            },
        }
    }

    pub(super) fn answer(&self) -> Option<&Answer> {
        match self {
            Self::HungUp => None,
            Self::Answer(answer) => Some(answer),
        }
    }
}

/// The simulated gateway: a pooled HTTP client pointed at idemgate.
pub(super) struct Sender {
    client: Client<HttpConnector, Full<Bytes>>,
    proxy: SocketAddr,
}

impl Sender {
    pub(super) fn new(proxy: SocketAddr) -> Self {
        Self {
            client: Client::builder(TokioExecutor::new()).build_http(),
            proxy,
        }
    }

    /// Sends one delivery and reads the whole answer.
    pub(super) async fn send(&self, delivery: &Delivery) -> Result<Seen, String> {
        let request = Request::post(format!("http://{}{}", self.proxy, delivery.path))
            .header(header::CONTENT_TYPE, "application/json")
            .header("X-Signature", &delivery.signature)
            .body(Full::new(Bytes::from(delivery.body.clone())))
            .map_err(|error| format!("building a request: {error}"))?;
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|error| format!("sending to idemgate: {error}"))?;
            let (parts, body) = response.into_parts();
            let body = body
                .collect()
                .await
                .map_err(|error| format!("reading idemgate's answer: {error}"))?
                .to_bytes();
            Ok::<_, String>(Seen::Answer(answer_of(&parts, body)))
        };
        tokio::time::timeout(EXCHANGE_TIMEOUT, exchange)
            .await
            .map_err(|_| format!("no answer from idemgate within {EXCHANGE_TIMEOUT:?}"))?
    }

    /// Sends `copies` of a delivery one after the other, each made afresh
    /// by `delivery` (re-signed, as a gateway's retries are) once the one
    /// before has its answer.
    pub(super) async fn in_turn(
        &self,
        delivery: impl Fn() -> Delivery,
        copies: usize,
    ) -> Result<Vec<Seen>, String> {
        let mut seen = Vec::with_capacity(copies);
        for _ in 0..copies {
            seen.push(self.send(&delivery()).await?);
        }
        Ok(seen)
    }

    /// Sends `copies` of one delivery at once and collects every answer.
    pub(super) async fn burst(
        &self,
        delivery: &Delivery,
        copies: usize,
    ) -> Result<Vec<Seen>, String> {
        let mut tasks = JoinSet::new();
        for _ in 0..copies {
            let sender = Self {
                client: self.client.clone(),
                proxy: self.proxy,
            };
            let delivery = delivery.clone();
            tasks.spawn(async move { sender.send(&delivery).await });
        }
        let mut seen = Vec::with_capacity(copies);
        while let Some(joined) = tasks.join_next().await {
            seen.push(joined.map_err(|error| format!("sender task failed: {error}"))??);
        }
        // Arrival order means nothing here; list live answers before replays.
        seen.sort_by_key(|s| s.answer().and_then(|a| a.replayed));
        Ok(seen)
    }

    /// Writes a complete HTTP/1.1 request on a raw connection, waits for
    /// `until`, and closes the connection without reading any answer.
    pub(super) async fn hang_up(
        &self,
        delivery: &Delivery,
        until: impl std::future::Future<Output = ()>,
    ) -> Result<Seen, String> {
        let mut stream = TcpStream::connect(self.proxy)
            .await
            .map_err(|error| format!("connecting to idemgate: {error}"))?;
        let request = format!(
            "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             X-Signature: {}\r\nContent-Length: {}\r\n\r\n{}",
            delivery.path,
            self.proxy,
            delivery.signature,
            delivery.body.len(),
            delivery.body,
        );
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|error| format!("writing to idemgate: {error}"))?;
        until.await;
        drop(stream);
        Ok(Seen::HungUp)
    }
}

fn answer_of(parts: &http::response::Parts, body: Bytes) -> Answer {
    let replayed = parts
        .headers
        .get(REPLAYED_HEADER)
        .and_then(|value| value.to_str().ok())
        .map(|value| value == "true");
    let is_problem = parts
        .headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|value| value.as_bytes().starts_with(b"application/problem+json"));
    let reason = is_problem
        .then(|| serde_json::from_slice::<serde_json::Value>(&body).ok())
        .flatten()
        .and_then(|problem| problem.get("reason")?.as_str().map(str::to_owned));
    Answer {
        status: parts.status.as_u16(),
        replayed,
        reason,
        body,
    }
}
