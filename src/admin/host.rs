//! Which `Host` the admin listener answers: its own address (the one the
//! client connected to), the loopback names and addresses, and the names
//! of `[admin] allowed_hosts`. Anything else is refused before any
//! endpoint runs, `/metrics` and `/healthz` included: a web page that
//! points a name it controls at 127.0.0.1 (DNS rebinding) sends its own
//! name as `Host`, and so reads nothing. A request without a `Host` (HTTP
//! 1.0) is answered: a browser always sends one.

use std::net::{IpAddr, SocketAddr};

use http::Request;

/// Whether `request` names a host this listener answers to.
pub(super) fn allowed<B>(
    request: &Request<B>,
    local: Option<SocketAddr>,
    names: &[String],
) -> bool {
    // HTTP/2 carries it as `:authority` (in the URI); HTTP/1 as `Host`.
    let host = request.uri().host().map(str::to_owned).or_else(|| {
        request
            .headers()
            .get(http::header::HOST)
            .and_then(|value| value.to_str().ok())
            .map(|value| host_part(value).to_owned())
    });
    let Some(host) = host else { return true };
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .trim_end_matches('.')
        .to_ascii_lowercase();
    if host == "localhost" || names.contains(&host) {
        return true;
    }
    match host.parse::<IpAddr>() {
        Ok(ip) => ip.is_loopback() || local.is_some_and(|local| local.ip() == ip),
        Err(_) => false,
    }
}

/// `value` without its port: `[v6]:port`, `name:port` or `name`.
fn host_part(value: &str) -> &str {
    if let Some(rest) = value.strip_prefix('[') {
        return rest.split(']').next().unwrap_or_default();
    }
    match value.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => value,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_host(host: &str) -> Request<()> {
        Request::get("/metrics")
            .header("host", host)
            .body(())
            .unwrap()
    }

    #[test]
    fn only_known_hosts_are_answered() {
        let local: SocketAddr = "10.0.0.7:8790".parse().unwrap();
        let names = vec!["idemgate-admin.pay.svc".to_owned()];
        for host in [
            "127.0.0.1:8790",
            "localhost",
            "LOCALHOST:8790",
            "[::1]:8790",
            "10.0.0.7:8790",
            "10.0.0.7",
            "idemgate-admin.pay.svc:8790",
            "Idemgate-Admin.pay.svc.",
        ] {
            assert!(allowed(&with_host(host), Some(local), &names), "{host}");
        }
        for host in [
            "attacker.example",
            "attacker.example:8790",
            "127.0.0.1.attacker.example",
            "10.0.0.8:8790",
            "localhost.attacker.example",
            "",
        ] {
            assert!(!allowed(&with_host(host), Some(local), &names), "{host}");
        }
        let bare = Request::get("/healthz").body(()).unwrap();
        assert!(allowed(&bare, Some(local), &names), "no Host: HTTP/1.0");
        let h2 = Request::get("http://attacker.example/metrics")
            .body(())
            .unwrap();
        assert!(!allowed(&h2, Some(local), &names), ":authority is read");
    }
}
