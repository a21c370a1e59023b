//! A real OTLP/HTTP trace receiver on loopback: `POST /v1/traces` with an
//! `application/x-protobuf` `ExportTraceServiceRequest`, decoded with the
//! official definitions (`opentelemetry-proto`'s prost types). It keeps
//! every span it receives, with its resource's attributes, and the
//! headers of every export request.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
pub use opentelemetry_proto::tonic::trace::v1::Span as OtlpSpan;
use prost::Message;
use tokio::net::TcpListener;

/// One received span and the `service.name` it was exported under.
#[derive(Debug, Clone)]
pub struct Received {
    pub service: String,
    pub span: OtlpSpan,
    /// Its resource's attributes.
    pub resource: Vec<KeyValue>,
}

impl Received {
    pub fn name(&self) -> &str {
        &self.span.name
    }

    pub fn trace_id(&self) -> String {
        hex::encode(&self.span.trace_id)
    }

    pub fn span_id(&self) -> String {
        hex::encode(&self.span.span_id)
    }

    pub fn parent_span_id(&self) -> String {
        hex::encode(&self.span.parent_span_id)
    }

    /// The attribute `key` as text (numbers printed), if present.
    pub fn attribute(&self, key: &str) -> Option<String> {
        attribute(&self.span.attributes, key)
    }

    /// The resource attribute `key` as text, if present.
    pub fn resource_attribute(&self, key: &str) -> Option<String> {
        attribute(&self.resource, key)
    }
}

fn attribute(attributes: &[KeyValue], key: &str) -> Option<String> {
    let value = attributes.iter().find(|kv| kv.key == key)?.value.as_ref()?;
    match value {
        AnyValue {
            value: Some(any_value::Value::StringValue(text)),
        } => Some(text.clone()),
        AnyValue {
            value: Some(any_value::Value::IntValue(n)),
        } => Some(n.to_string()),
        AnyValue {
            value: Some(any_value::Value::BoolValue(b)),
        } => Some(b.to_string()),
        AnyValue {
            value: Some(any_value::Value::DoubleValue(x)),
        } => Some(x.to_string()),
        _ => None,
    }
}

/// The receiver; stops when dropped.
pub struct OtlpReceiver {
    pub addr: SocketAddr,
    spans: Arc<Mutex<Vec<Received>>>,
    headers: Arc<Mutex<Vec<http::HeaderMap>>>,
    task: tokio::task::JoinHandle<()>,
}

impl OtlpReceiver {
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the OTLP receiver");
        let addr = listener.local_addr().expect("receiver addr");
        let spans = Arc::new(Mutex::new(Vec::new()));
        let headers = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&spans);
        let heads = Arc::clone(&headers);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let kept = Arc::clone(&kept);
                let heads = Arc::clone(&heads);
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request: Request<_>| {
                        let kept = Arc::clone(&kept);
                        heads.lock().unwrap().push(request.headers().clone());
                        async move { Ok::<_, std::convert::Infallible>(receive(request, &kept).await) }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Self {
            addr,
            spans,
            headers,
            task,
        }
    }

    /// The base URL idemgate's `otlp_endpoint` is set to.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The headers of every export request received so far.
    pub fn export_headers(&self) -> Vec<http::HeaderMap> {
        self.headers.lock().unwrap().clone()
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Received> {
        self.spans.lock().unwrap().clone()
    }

    /// Waits (at most `limit`) until the spans received satisfy `done`,
    /// and returns them; panics with what did arrive otherwise.
    pub async fn wait_for(
        &self,
        limit: Duration,
        what: &str,
        mut done: impl FnMut(&[Received]) -> bool,
    ) -> Vec<Received> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let spans = self.spans();
            if done(&spans) {
                return spans;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no {what} within {limit:?}; received: {:#?}",
                spans
                    .iter()
                    .map(|r| (r.name().to_owned(), r.trace_id(), r.span_id()))
                    .collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn receive(
    request: Request<hyper::body::Incoming>,
    kept: &Mutex<Vec<Received>>,
) -> Response<Full<Bytes>> {
    let answer = |status: StatusCode, body: Bytes| {
        let mut response = Response::new(Full::new(body));
        *response.status_mut() = status;
        response
            .headers_mut()
            .insert("content-type", "application/x-protobuf".parse().unwrap());
        response
    };
    let protobuf = request
        .headers()
        .get("content-type")
        .is_some_and(|v| v.as_bytes() == b"application/x-protobuf");
    if request.method() != http::Method::POST || request.uri().path() != "/v1/traces" || !protobuf {
        return answer(StatusCode::NOT_FOUND, Bytes::new());
    }
    let Ok(body) = request.into_body().collect().await else {
        return answer(StatusCode::BAD_REQUEST, Bytes::new());
    };
    let Ok(export) = ExportTraceServiceRequest::decode(body.to_bytes()) else {
        return answer(StatusCode::BAD_REQUEST, Bytes::new());
    };
    let mut spans = kept.lock().unwrap();
    for resource_spans in export.resource_spans {
        let resource = resource_spans
            .resource
            .map(|r| r.attributes)
            .unwrap_or_default();
        let service = attribute(&resource, "service.name").unwrap_or_default();
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                spans.push(Received {
                    service: service.clone(),
                    span,
                    resource: resource.clone(),
                });
            }
        }
    }
    let ok = ExportTraceServiceResponse::default().encode_to_vec();
    answer(StatusCode::OK, Bytes::from(ok))
}
