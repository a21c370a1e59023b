//! Tests of RSA public key parsing, against the keys in `tests/vectors/keys`.

use super::*;

fn keys_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/keys")
}

fn file(name: &str) -> String {
    format!("file:{}", keys_dir().join(name).display())
}

fn literal(name: &str) -> String {
    format!(
        "literal:{}",
        std::fs::read_to_string(keys_dir().join(name)).unwrap()
    )
}

/// alipay-2's key as PKCS#1 (`openssl rsa -RSAPublicKey_out`).
const PKCS1: &str = "-----BEGIN RSA PUBLIC KEY-----
MIIBCgKCAQEAoD/Gm3+E8OVL20+0GIumo6vDax7jjO7VuL5uGJdYskLKed/H73Ah
dI+h/ywwb3+FpEwjy/IGs5qUmb2ykJZc2s56Oy+lnEeZ7uc0FX/Lq4vpvWiyulMY
FLlWtu9E2hJqkTvUMO2ZSx4EZ1JmmwpaVPEaQ7mo8+KJWYD70GOPMm6igmYLBIPv
HL6rxfyGCgmpmNJ4fxDdGKd6LQJjV73q/eM9LPyF1WbQ/YodJLeVxv9lqOuw5Iwg
G7EK7lu3lPSxHIqfRbJ4w3RqyYs5fCQ97TyHrnVkw0mWpo+gN5bh7Lzwcv0MOVhD
edYxvwJcHCiO9LJKPZjTWB75GI234h6JLQIDAQAB
-----END RSA PUBLIC KEY-----";

/// A 1024-bit RSA key: well formed, too short.
const SHORT: &str = "-----BEGIN PUBLIC KEY-----
MIGfMA0GCSqGSIb3DQEBAQUAA4GNADCBiQKBgQDSLSLTVCz09QwyR5ymdHIlx8YG
ND1Jw/3xk5yj0g31VwFXmLLK7C8xXVdeQwZCAb7yZgS5JHJ6/ptGC6d3u9+wqU4m
no4deyyUXiuQPa2MZtAqgVeX+EZW40SlOuB/7U3tPOoqEN4Od0Kia97pwHrXopoT
Xgf24rSlNiOPDq6HLwIDAQAB
-----END PUBLIC KEY-----";

/// A P-256 key: well formed, not RSA.
const EC: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEhZjMwlrNUv/1Isww5AT4Zo/ZtzHh
frFDYh/yoyQENicfnfGD/IxagLEwASCeHx476++OD/DLTdB6IAb0rPzU8g==
-----END PUBLIC KEY-----";

fn one(entry: RawPublicKey) -> Result<PublicKeys, Vec<(usize, String)>> {
    PublicKeys::resolve(&[entry])
}

fn ids(keys: &PublicKeys) -> Vec<Option<String>> {
    keys.keys
        .read()
        .unwrap()
        .iter()
        .map(|k| k.id.clone())
        .collect()
}

#[test]
fn every_supported_form_parses() {
    for source in [
        file("alipay-1.pub.b64"),
        file("alipay-1.pub.pem"),
        literal("alipay-2.pub.pem"),
        format!("literal:{PKCS1}"),
    ] {
        let keys =
            one(RawPublicKey::Source(source.clone())).unwrap_or_else(|e| panic!("{source}: {e:?}"));
        assert_eq!(ids(&keys), [None], "{source}");
    }
    let pkcs1 = one(RawPublicKey::Source(format!("literal:{PKCS1}"))).unwrap();
    let spki = one(RawPublicKey::Source(file("alipay-2.pub.pem"))).unwrap();
    assert_eq!(
        pkcs1.keys.read().unwrap()[0].pkcs1,
        spki.keys.read().unwrap()[0].pkcs1,
        "one key, two encodings"
    );
}

#[test]
fn certificates_are_named_by_their_serial_and_bound_keys_by_their_id() {
    let certificate = one(RawPublicKey::Source(file("wechatpay-1.cert.pem"))).unwrap();
    assert_eq!(
        ids(&certificate),
        [Some("5157F09EFDC096DE15EBE81A47057A7232F1B8E1".to_owned())]
    );
    let chain = format!(
        "literal:{}{}",
        std::fs::read_to_string(keys_dir().join("wechatpay-1.cert.pem")).unwrap(),
        std::fs::read_to_string(keys_dir().join("wechatpay-2.cert.pem")).unwrap()
    );
    let both = one(RawPublicKey::Source(chain)).unwrap();
    assert_eq!(both.len(), 1, "one entry");
    assert_eq!(ids(&both).len(), 2, "two certificates, two keys");
    let bound = one(RawPublicKey::Bound {
        id: "PUB_KEY_ID_0112345678202501010000000000000000".into(),
        key: file("wechatpay-pub.pub.pem"),
    })
    .unwrap();
    assert_eq!(
        ids(&bound),
        [Some(
            "PUB_KEY_ID_0112345678202501010000000000000000".to_owned()
        )]
    );
    assert_eq!(normalize_id("000a1B"), "A1B");
}

#[test]
fn malformed_keys_are_start_up_errors_naming_the_entry() {
    let entries = [
        RawPublicKey::Source(file("alipay-1.pub.pem")),
        RawPublicKey::Source(format!("literal:{SHORT}")),
        RawPublicKey::Source(format!("literal:{EC}")),
        RawPublicKey::Source("literal:not base64 at all!".into()),
        RawPublicKey::Source(
            "literal:-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----".into(),
        ),
        RawPublicKey::Source(file("missing.pem")),
        RawPublicKey::Source("env:IDEMGATE_SURELY_UNSET_KEY".into()),
        RawPublicKey::Source("vault:x".into()),
        RawPublicKey::Bound {
            id: " ".into(),
            key: file("alipay-1.pub.pem"),
        },
        RawPublicKey::Source(file("alipay-1.key.pem")),
    ];
    let errors = PublicKeys::resolve(&entries).unwrap_err();
    let indexes: Vec<usize> = errors.iter().map(|(i, _)| *i).collect();
    assert_eq!(indexes, [1, 2, 3, 4, 5, 6, 7, 8, 9], "{errors:?}");
    let text = |i: usize| &errors.iter().find(|(at, _)| *at == i).unwrap().1;
    assert!(text(1).contains("1024 bits; 2048 to 8192"), "{}", text(1));
    assert!(text(2).contains("not RSA"), "{}", text(2));
    assert!(text(9).contains("not a public key"), "{}", text(9));
}

#[test]
fn reload_swaps_keys_and_a_failed_reload_keeps_the_old_ones() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("platform.pem");
    std::fs::copy(keys_dir().join("wechatpay-1.cert.pem"), &path).unwrap();
    let keys = one(RawPublicKey::Source(format!("file:{}", path.display()))).unwrap();
    let shared = keys.clone();
    assert_eq!(keys.reload(), Ok(false), "unchanged");
    std::fs::copy(keys_dir().join("wechatpay-2.cert.pem"), &path).unwrap();
    assert_eq!(keys.reload(), Ok(true));
    assert_eq!(
        ids(&shared),
        [Some("7E4B2C19A0D3F5E6B7C8D9E0F1A2B3C4D5E6F708".to_owned())],
        "clones share the keys"
    );
    std::fs::write(&path, "garbage").unwrap();
    assert!(keys.reload().is_err());
    assert_eq!(
        ids(&shared),
        [Some("7E4B2C19A0D3F5E6B7C8D9E0F1A2B3C4D5E6F708".to_owned())],
        "a failed reload keeps the old key"
    );
    let literal_only = one(RawPublicKey::Source(literal("alipay-2.pub.pem"))).unwrap();
    assert_eq!(literal_only.reload(), Ok(false), "nothing to re-read");
    assert_eq!(
        format!("{literal_only:?}"),
        "[\"literal:<key>\"]",
        "a literal key is printed by kind only"
    );
}
