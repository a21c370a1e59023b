//! The payment-channel vectors (`tests/vectors/payments.json`, made by the
//! channels' SDKs: `tests/vectors/payments/README.md`), the route each one
//! is verified on, and fresh WeChat Pay v3 signatures made with the test
//! keys (its vectors' timestamps are long out of the live window).

use base64::Engine;
use serde::Deserialize;

use super::{Headers, repo_path};

/// One vector, as `generate.mjs` writes it.
#[derive(Debug, Clone, Deserialize)]
pub struct PaymentVector {
    pub name: String,
    pub scheme: String,
    /// Vectors with one `event` are retries of one state change.
    pub event: String,
    /// The test key that signed it (RSA schemes).
    pub key: Option<String>,
    /// `Wechatpay-Serial` sent (v3).
    pub serial: Option<String>,
    /// The secret as an operator configures it (HMAC schemes).
    pub secret: Option<String>,
    pub public_url: Option<String>,
    pub path: String,
    pub headers: std::collections::BTreeMap<String, String>,
    pub body: String,
    /// The verifier's clock, unix seconds (v3).
    pub now: Option<u64>,
    #[serde(default)]
    pub options: serde_json::Map<String, serde_json::Value>,
}

impl PaymentVector {
    /// The headers as a request sends them.
    pub fn header_list(&self) -> Headers {
        self.headers
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// The path prefix of its route (the path without the query).
    pub fn prefix(&self) -> &str {
        self.path.split('?').next().unwrap_or("/")
    }
}

/// Every payment vector.
pub fn payment_vectors() -> Vec<PaymentVector> {
    let text = std::fs::read_to_string(repo_path("tests/vectors/payments.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Vectors the SDK accepts and idemgate refuses on purpose: a WeChat Pay
/// v2 refund (no `sign`; its AES-ECB `req_info` authenticates nothing) and
/// an Adyen batch of two items (items are signed one by one, so a batch
/// could splice captured notifications into a new delivery).
pub const REFUSED_PAYMENT_VECTORS: [&str; 2] = ["wxv2-refund", "adyen-batch"];

/// The vectors idemgate verifies.
pub fn verifiable_payment_vectors() -> Vec<PaymentVector> {
    payment_vectors()
        .into_iter()
        .filter(|v| !REFUSED_PAYMENT_VECTORS.contains(&v.name.as_str()))
        .collect()
}

/// The vector called `name`.
pub fn payment_vector(name: &str) -> PaymentVector {
    payment_vectors()
        .into_iter()
        .find(|v| v.name == name)
        .unwrap_or_else(|| panic!("no payment vector {name}"))
}

/// A test key file, as a `file:` source.
pub fn key_source(file: &str) -> String {
    format!(
        "file:{}",
        repo_path(&format!("tests/vectors/keys/{file}")).display()
    )
}

/// The public key a vector's RSA key verifies with, as a `public_keys`
/// TOML entry: Alipay's first key as the bare base64 the console shows,
/// the second as PEM; WeChat Pay's certificates, and its public-key-mode
/// key bound to its id.
pub fn public_key_entry(key: &str) -> String {
    match key {
        "alipay-1" => toml_string(&key_source("alipay-1.pub.b64")),
        "alipay-2" => toml_string(&key_source("alipay-2.pub.pem")),
        "wechatpay-pub" => format!(
            "{{ id = \"{WECHATPAY_PUB_KEY_ID}\", key = {} }}",
            toml_string(&key_source("wechatpay-pub.pub.pem"))
        ),
        other => toml_string(&key_source(&format!("{other}.cert.pem"))),
    }
}

/// The id WeChat Pay's public-key mode names the test key by.
pub const WECHATPAY_PUB_KEY_ID: &str = "PUB_KEY_ID_0112345678202501010000000000000000";

fn toml_string(text: &str) -> String {
    serde_json::to_string(text).unwrap()
}

/// The `[route.signature]` body for `scheme` with `credentials` (secret
/// texts for HMAC schemes, `public_keys` entries for RSA ones) and extra
/// lines (`allow_rsa1 = true`, …).
pub fn payment_signature(scheme: &str, credentials: &[String], extra: &str) -> String {
    let field = match scheme {
        "alipay" | "wechatpay-v3" => "public_keys",
        _ => "secrets",
    };
    let list = if field == "secrets" {
        credentials
            .iter()
            .map(|s| toml_string(&format!("literal:{s}")))
            .collect::<Vec<_>>()
    } else {
        credentials.to_vec()
    };
    let public_url = if scheme == "twilio" {
        "public_url = \"https://hooks.example.com\"\n"
    } else {
        ""
    };
    format!(
        "scheme = \"{scheme}\"\n{field} = [{}]\n{public_url}{extra}",
        list.join(", ")
    )
}

/// The credential that verifies `vector` (a secret text or a
/// `public_keys` entry).
pub fn right_credential(vector: &PaymentVector) -> String {
    match &vector.key {
        Some(key) => public_key_entry(key),
        None => vector.secret.clone().expect("an HMAC vector has a secret"),
    }
}

/// A credential of the same kind that does not verify `vector`: the other
/// test key (for WeChat Pay, bound to the serial the vector presents, so
/// the key is found and its signature check fails), or another secret.
pub fn wrong_credential(vector: &PaymentVector) -> String {
    match (vector.scheme.as_str(), vector.key.as_deref()) {
        ("alipay", Some("alipay-2")) => public_key_entry("alipay-1"),
        ("alipay", _) => public_key_entry("alipay-2"),
        ("wechatpay-v3", Some(key)) => {
            let other = if key == "wechatpay-2" {
                "wechatpay-1.cert.pem"
            } else {
                "wechatpay-2.cert.pem"
            };
            format!(
                "{{ id = \"{}\", key = {} }}",
                vector.serial.as_deref().unwrap(),
                toml_string(&key_source(other))
            )
        }
        ("adyen", _) => {
            "00112233445566778899AABBCCDDEEFF00112233445566778899AABBCCDDEEFF".to_owned()
        }
        _ => "not-the-secret-0123456789abcdefx".to_owned(),
    }
}

/// `Wechatpay-*` headers for `body` signed now-ish by the test key `key`
/// (`wechatpay-1`, `wechatpay-2` or `wechatpay-pub`), as WeChat Pay signs:
/// SHA256withRSA over `timestamp\nnonce\nbody\n`.
pub fn wechatpay_v3_headers(
    key: &str,
    serial: &str,
    timestamp: u64,
    nonce: &str,
    body: &str,
) -> Headers {
    use ring::signature::{RSA_PKCS1_SHA256, RsaKeyPair};
    let pem =
        std::fs::read_to_string(repo_path(&format!("tests/vectors/keys/{key}.key.pem"))).unwrap();
    let der: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(der)
        .unwrap();
    let pair = RsaKeyPair::from_pkcs8(&der).expect("a PKCS#8 RSA test key");
    let message = format!("{timestamp}\n{nonce}\n{body}\n");
    let mut signature = vec![0; pair.public().modulus_len()];
    pair.sign(
        &RSA_PKCS1_SHA256,
        &ring::rand::SystemRandom::new(),
        message.as_bytes(),
        &mut signature,
    )
    .unwrap();
    vec![
        ("content-type".into(), "application/json".into()),
        ("wechatpay-serial".into(), serial.into()),
        ("wechatpay-timestamp".into(), timestamp.to_string()),
        ("wechatpay-nonce".into(), nonce.into()),
        (
            "wechatpay-signature".into(),
            base64::engine::general_purpose::STANDARD.encode(signature),
        ),
    ]
}
