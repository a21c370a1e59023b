#!/usr/bin/env python3
"""Regenerates the seed corpora in tests/fuzz/corpus/<target>/.

The seeds are committed; run this only after changing it, or when the
example configurations or tests/vectors/{vectors,payments}.json change:

    python3 tests/fuzz/make-seeds.py

Every seed file is named after what it holds. Standard library only.
"""

import base64
import hashlib
import hmac
import json
import pathlib
import re
import shutil
import struct

ROOT = pathlib.Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "fuzz" / "corpus"


def write(target, name, data):
    if isinstance(data, str):
        data = data.encode()
    path = CORPUS / target / name
    path.write_bytes(data)


def request(line, headers, body):
    """The request text format of tests/fuzz/src/lib.rs."""
    head = [line] + [f"{k}: {v}" for k, v in headers]
    if isinstance(body, str):
        body = body.encode()
    return ("\n".join(head) + "\n\n").encode() + body


# --- config -----------------------------------------------------------------

HEAD = """[listen]
proxy = "127.0.0.1:0"
admin = "127.0.0.1:0"

[store]
kind = "embedded"
path = "data/idemgate.redb"

[upstream]
url = "http://127.0.0.1:3000"
"""


def config_seeds():
    for path in sorted((ROOT / "config").rglob("*.toml")):
        text = path.read_text()
        rel = path.relative_to(ROOT / "config").as_posix().replace("/", "-")
        write("config", f"example-{rel}", text)
        # The same with inline secrets, so the whole file validates.
        literal = re.sub(r'"env:([A-Za-z0-9_]+)"', r'"literal:\1-value"', text)
        if literal != text:
            write("config", f"example-literal-{rel}", literal)
    presets = ["standard-webhooks", "stripe", "github", "slack", "shopify"]
    for preset in presets:
        secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" if preset == "standard-webhooks" else "s3cret-0123456789abcdef"
        write("config", f"preset-{preset}.toml", HEAD + f"""
[[route]]
name = "{preset}"
path_prefix = "/{preset}"
[route.signature]
scheme = "{preset}"
secrets = ["literal:{secret}"]
""")
    write("config", "hmac-full.toml", HEAD + """
unmatched = "reject"
[limits]
max_body_bytes = 65536
header_read_timeout = "5s"
body_read_timeout = "1m30s"
[admin]
token = "literal:admin"

[[route]]
name = "pay"
path_prefix = "/notify/"
methods = ["POST", "put"]
upstream = "http://127.0.0.1:3001"
[route.signature]
scheme = "hmac"
secrets = ["literal:new-secret-0123456789", "literal:old-secret-0123456789"]
algorithm = "sha512"
signature = "header:X-Signature"
encoding = "base64"
prefix = "v1="
message = "{timestamp}.{method}{path}\\n{json:/id}{{x}}{body}"
timestamp = "json:/ts"
timestamp_unit = "ms"
tolerance = "2m"
[route.idempotency]
key = ["json:/id", "header:Idempotency-Key"]
require_key = false
fingerprint = ["method", "path", "query", "header:x-a", "body"]
fingerprint_ignore = ["json:/notify_time"]
lease = "30s"
retention = "7d"
on_in_flight = "conflict"
wait_timeout = "250ms"
cache_status = ["2xx", "404"]
on_upstream_timeout = "release"
unknown_hold = "5m"
mode = "shadow"
on_unavailable = "forward"

[[route]]
name = "form"
path_prefix = "/form"
[route.signature]
scheme = "none"
[route.idempotency]
key = ["form:out_trade_no", "query:k"]
fingerprint_ignore = ["form:sign"]
""")
    write("config", "redis.toml", HEAD.replace(
        'kind = "embedded"\npath = "data/idemgate.redb"',
        'kind = "redis"\nurl = "redis://127.0.0.1:6379/0"\nkey_prefix = "ig"\n'
        'command_timeout = "250ms"\non_unavailable = "reject"\n'
        'min_replicas_ack = 1\nreplica_ack_timeout = "100ms"'))
    write("config", "minimal.toml", HEAD)
    write("config", "invalid-everything.toml", """unmatched = "maybe"
[listen]
proxy = "nowhere"
[store]
kind = "tape"
key_prefix = "{x}"
[upstream]
url = "https://example.com/?q"
timeout = "0s"
[[route]]
name = "Bad Name"
path_prefix = "nope"
methods = ["B@D"]
[route.signature]
scheme = "hmac"
signature = "cookie:x"
message = "{nope"
timestamp = "json:ts"
[route.idempotency]
key = []
fingerprint = ["colour"]
fingerprint_ignore = ["header:x"]
lease = "1"
retention = "99999999999999999999s"
cache_status = ["6xx"]
""")


# --- selector_template --------------------------------------------------------

def selector_template_seeds():
    seeds = {
        "header": "header:X-Signature",
        "query": "query:t",
        "json": "json:/data/items/0/id",
        "json-escapes": "json:/a~1b/~0c",
        "form": "form:sign",
        "xml": "xml:/xml/out_trade_no",
        "template-json": "{json:/id}\n{timestamp}.{body}{{x}}",
        "template-all": "{method} {path}?{query:a}&{header:x-a}{form:b}{timestamp}{body}",
        "template-unicode": "caf\u00e9 {json:/\u00e9}}}{{\U0001F600",
        "duration": "1m30s",
        "duration-all": "7d24h5m30s250ms",
        "path-dots": "/notify/./a/../%2e%2E/b//c/",
        "path-percent": "/%6Eotify/%2F%25%zz",
    }
    for name, text in seeds.items():
        write("selector_template", name, text)


# --- signature_headers --------------------------------------------------------

PRESET_PATH = {"standard-webhooks": "/standard-webhooks", "svix": "/standard-webhooks",
               "stripe": "/stripe", "github": "/github", "slack": "/slack",
               "shopify": "/shopify"}


def signature_seeds():
    vectors = json.loads((ROOT / "tests" / "vectors" / "vectors.json").read_text())
    for v in vectors:
        if v["scheme"] not in PRESET_PATH:
            continue  # twilio, wechatpay-v2: no preset (generic hmac only)
        now_ms = (v["timestamp"] or 1_700_000_000) * 1000
        headers = list(v["expect_headers"].items())
        line = f"POST {PRESET_PATH[v['scheme']]} {now_ms}"
        write("signature_headers", f"vector-{v['name']}", request(line, headers, v["body"]))

    def mac(key, msg, algo=hashlib.sha256):
        return hmac.new(key.encode(), msg.encode(), algo).digest()

    ts = 1_700_000_000
    body = '{"id":"p-1","amount":10.50}'
    sig = mac("fuzz-secret-0123456789", f"{ts}.POST /hmac-header.{body}").hex()
    write("signature_headers", "hmac-header", request(
        f"POST /hmac-header {ts * 1000}",
        [("X-Signature", f"sha256={sig}"), ("X-Timestamp", str(ts))], body))

    ts_ms = 1_700_000_000_123
    msg = f"p-2\n10.50\n{ts_ms}\n" + '{"k":[1,2]}' + "{x}"
    sig = base64.b64encode(mac("fuzz-secret-0123456789", msg, hashlib.sha512)).decode()
    body = json.dumps({"id": "p-2", "amount": 0, "ts": ts_ms, "data": {"k": [1, 2]},
                       "sign": sig}).replace('"amount": 0', '"amount": 10.50')
    write("signature_headers", "hmac-json", request(f"POST /hmac-json {ts_ms}", [], body))

    sig = mac("fuzz-secret-0123456789", f"T-3&100&{ts}&q1").hex()
    body = f"out_trade_no=T-3&total_fee=100&ts={ts}&sign={sig}"
    write("signature_headers", "hmac-form", request(
        f"POST /hmac-form?t=q1 {ts * 1000}",
        [("content-type", "application/x-www-form-urlencoded")], body))

    sig = base64.b64encode(mac("fuzz-secret-0123456789", "GET/hmac-query?a=x y")).decode().rstrip("=")
    sig = sig.replace("+", "%2B").replace("/", "%2F")
    write("signature_headers", "hmac-query", request(
        f"GET /hmac-query?a=x+y&sig={sig} {ts * 1000}", [], ""))

    write("signature_headers", "stripe-messy", request(
        "POST /stripe 1700000000000",
        [("stripe-signature", " t=1700000000 , v1= ,v0=aa,x,,t=9,v1=ZZ ")], "{}"))
    write("signature_headers", "webhook-duplicates", request(
        "POST /standard-webhooks",
        [("webhook-id", "a"), ("webhook-id", "b"), ("webhook-timestamp", "17e8"),
         ("webhook-signature", "v1a,x v1, v2,y v1,AAAA")], "{}"))
    write("signature_headers", "shopify-plain-names", request(
        "POST /shopify",
        [("shopify-hmac-sha256", "AAAA"), ("shopify-topic", "t"),
         ("shopify-shop-domain", "d"), ("shopify-api-version", "v"),
         ("shopify-webhook-id", "w")], "body"))


# --- payment_signatures -------------------------------------------------------

def payment_seeds():
    """Every payment vector, verifying at the vector's time (WeChat Pay v3)
    on the route of its preset, and malformed variants of each kind."""
    vectors = json.loads((ROOT / "tests" / "vectors" / "payments.json").read_text())
    for v in vectors:
        now_ms = (v["now"] or 1_700_000_000) * 1000
        line = f"{v['method']} {v['path']} {now_ms}"
        write("payment_signatures", f"vector-{v['name']}",
              request(line, list(v["headers"].items()), v["body"]))
    form = [("content-type", "application/x-www-form-urlencoded")]
    write("payment_signatures", "alipay-sign-twice", request(
        "POST /hooks/alipay", form, "sign=AAAA&sign=BBBB&sign_type=RSA2&trade_no=1"))
    write("payment_signatures", "alipay-rsa-unknown-type", request(
        "POST /hooks/alipay", form, "sign=%2B%2F%3D&sign_type=DSA&a=&b=%ZZ"))
    write("payment_signatures", "wechatpay-v2-nested-dtd", request(
        "POST /hooks/wechatpay/v2", [("content-type", "text/xml")],
        "<!DOCTYPE xml [<!ENTITY e \"x\">]><xml><a><b>&e;</b></a>"
        "<sign><![CDATA[00]]></sign><sign>1</sign></xml>"))
    write("payment_signatures", "wechatpay-v3-duplicates", request(
        "POST /hooks/wechatpay/v3 1700000000000",
        [("wechatpay-signature", "AAAA"), ("wechatpay-signature", "BBBB"),
         ("wechatpay-serial", "00005157f09efdc096de15ebe81a47057a7232f1b8e1"),
         ("wechatpay-timestamp", "1700000000"), ("wechatpay-nonce", "n")], "{}"))
    write("payment_signatures", "adyen-items-shapes", request(
        "POST /hooks/adyen", [("content-type", "application/json")],
        '{"notificationItems":[{"NotificationRequestItem":{"amount":{"value":1e3},'
        '"success":true,"additionalData":{"hmacSignature":"=="}}},{},null]}'))
    write("payment_signatures", "twilio-json-hash", request(
        "POST /hooks/twilio/json?bodySHA256=00&bodySHA256=11",
        [("x-twilio-signature", "AAAA"),
         ("x-twilio-webhooks-signature-settings", " algorithm=HMAC_SHA256 ,x")], "{}"))


# --- key_fingerprint ----------------------------------------------------------

def key_seeds():
    seeds = {
        "json-key": request("POST /json?q=1", [("Idempotency-Key", "k-1"), ("x-a", "1")],
                            '{"a":"x:y","ts":"10:00","meta":{"nonce":5},"items":[1,2],"a/b":{"~c":1}}'),
        "json-required": request("POST /json-required", [("Idempotency-Key", '"a\\"b\\\\c"')],
                                 '{ "notify_time":"10:05", "amount":5.10, "id":"1", "":0 }'),
        "form-key": request("POST /form?k=7", [],
                            "out_trade_no=T1&sign=ab%2Bc&notify_time=1&x=2&x=1&%E2%9C%93=+"),
        "header-sf": request("PUT /header", [("Idempotency-Key", '"abc"')], "same"),
        "json-and-form": request("POST /json", [("Idempotency-Key", "k")],
                                 '{"&b=1&":"","a":"x"}'),
        "xml-key": request("POST /xml", [("content-type", "text/xml")],
                           "<xml><out_trade_no><![CDATA[T1]]></out_trade_no>"
                           "<nonce_str>n1</nonce_str><total_fee>1</total_fee></xml>"),
        "no-key-numbers": request("POST /no-key?x", [],
                                  '{"ts":1e400,"n":-0.0,"big":123456789012345678901234567890}'),
    }
    for name, data in seeds.items():
        write("key_fingerprint", name, data)


# --- record_decode ------------------------------------------------------------

def record(state, owner=b"\x07" * 16, fingerprint=b"\x09" * 32, created=1_700_000_000_000,
           status=200, headers=(), body=b""):
    out = bytes([1, state]) + owner + fingerprint + struct.pack(">Q", created)
    if state == 2:
        out += struct.pack(">HH", status, len(headers))
        for name, value in headers:
            out += struct.pack(">H", len(name)) + name + struct.pack(">I", len(value)) + value
        out += struct.pack(">I", len(body)) + body
    return out


def record_seeds():
    write("record_decode", "in-flight", record(1))
    write("record_decode", "unknown", record(3))
    write("record_decode", "completed-empty", record(2))
    write("record_decode", "completed", record(
        2, status=201,
        headers=[(b"content-type", b"application/json"), (b"x-a", b""), (b"set-cookie", b"a=1")],
        body=b'{"ok":true}'))
    write("record_decode", "completed-binary", record(
        2, status=0xFFFF, created=2**64 - 1, headers=[(b"", b"\x00\xff")], body=bytes(range(256))))
    # Layout v4 (src/record/compact.rs): a compact record, Date before the
    # ack's headers, 1 s before the answer time.
    write("record_decode", "compact", bytes([4, 2]) + b"\x07" * 16 + b"\x09" * 32
          + struct.pack(">I", 1_700_000_000) + bytes([0, 0x80 | 0x40 | 0x3F]) + b"\x12\x34\x56\x78")


# --- xml_body -----------------------------------------------------------------

def xml_seeds():
    laughs = "".join(
        f'<!ENTITY l{i} "{f"&l{i - 1};" * 10}">\n' for i in range(1, 10))
    seeds = {
        "wechat-notify": "<xml><appid><![CDATA[wx2421b1c4370ec43b]]></appid>"
                         "<mch_id><![CDATA[10000100]]></mch_id>"
                         "<nonce_str><![CDATA[5d2b6c2a8db53831f7eda20af46e531c]]></nonce_str>"
                         "<out_trade_no><![CDATA[1409811653]]></out_trade_no>"
                         "<result_code><![CDATA[SUCCESS]]></result_code>"
                         "<sign><![CDATA[B552ED6B279343CB493C5DD0D78AB241]]></sign>"
                         "<total_fee>1</total_fee></xml>",
        "declaration-bom-comments": "\ufeff<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                                    "<!-- c --><xml a=\"1\">\n  <b c='&amp;'> 2 </b>\n  <e/>\n</xml>\n",
        "references-nested": "<r><a><b>&lt;&gt;&amp;&quot;&apos;&#49;&#x4E2D;</b></a>"
                             "<a><b>dup</b></a></r>",
        "xxe": "<?xml version=\"1.0\"?>\n<!DOCTYPE xml [<!ENTITY xxe SYSTEM "
               "\"file:///etc/passwd\">]>\n<xml><out_trade_no>&xxe;</out_trade_no></xml>",
        "billion-laughs": "<?xml version=\"1.0\"?>\n<!DOCTYPE xml [\n<!ENTITY l0 \"lol\">\n"
                          + laughs + "]>\n<xml><a>&l9;</a></xml>",
        "mixed-content": "<xml>text<a>1</a><?pi x?></xml>",
    }
    for name, text in seeds.items():
        write("xml_body", name, text)


def main():
    if CORPUS.exists():
        shutil.rmtree(CORPUS)
    for target in ["config", "selector_template", "signature_headers", "key_fingerprint",
                   "record_decode", "xml_body", "payment_signatures"]:
        (CORPUS / target).mkdir(parents=True)
    config_seeds()
    selector_template_seeds()
    signature_seeds()
    payment_seeds()
    key_seeds()
    record_seeds()
    xml_seeds()
    for target in sorted(CORPUS.iterdir()):
        print(f"{target.name}: {len(list(target.iterdir()))} seeds")


if __name__ == "__main__":
    main()
