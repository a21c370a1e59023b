// Regenerates ../payments.json: known-answer signature vectors for five
// payment-channel webhook schemes. Every vector is signed here (with the SDK's
// own signing helper where it has one) and then handed to the SDK's own
// verifier; the script exits non-zero if any verifier rejects.
// Deterministic: fixed timestamps, nonces and secrets; RSA PKCS#1 v1.5
// signatures are deterministic for a given key. Test keys only (../keys).
import { createRequire } from 'node:module';
import { readFileSync, writeFileSync } from 'node:fs';
import { createHash, createSign, X509Certificate, createPublicKey } from 'node:crypto';
import { parse as parseQs } from 'node:querystring';
import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';

const require = createRequire(import.meta.url);
const here = dirname(fileURLToPath(import.meta.url));
const keysDir = join(here, '..', 'keys');
const outFile = join(here, '..', 'payments.json');
const readKey = (name) => readFileSync(join(keysDir, name), 'utf8');
const version = (pkg) => require(`${pkg}/package.json`).version;

const { AlipaySdk } = require('alipay-sdk');
const { Hash, Transformer, Rsa, Aes, Decorator } = require('wechatpay-axios-plugin');
const WxPay = require('wechatpay-node-v3');
const HmacValidator = require('@adyen/api-library/lib/src/utils/hmacValidator').default;
const twilio = require('twilio');

const V = {
  alipay: `alipay-sdk@${version('alipay-sdk')}`,
  wxp: `wechatpay-axios-plugin@${version('wechatpay-axios-plugin')}`,
  wxn: `wechatpay-node-v3@${version('wechatpay-node-v3')}`,
  adyen: `@adyen/api-library@${version('@adyen/api-library')}`,
  twilio: `twilio@${version('twilio')}`,
};

const FIELDS = ['name', 'scheme', 'event', 'key', 'serial', 'secret', 'public_url', 'method',
  'path', 'headers', 'body', 'now', 'options', 'verified_by', 'note'];
const vectors = [];
function push(v) {
  const out = {};
  for (const f of FIELDS) out[f] = v[f] === undefined ? null : v[f];
  for (const k of Object.keys(v)) if (!FIELDS.includes(k)) throw new Error(`unknown field ${k}`);
  if (out.options === null) out.options = {};
  if (out.method === null) out.method = 'POST';
  if (vectors.some((x) => x.name === out.name)) throw new Error(`duplicate ${out.name}`);
  vectors.push(out);
}
function must(ok, what) {
  if (ok !== true) throw new Error(`verifier rejected: ${what}`);
}
function mustReject(ok, what) {
  if (ok !== false) throw new Error(`verifier accepted a tampered input: ${what}`);
}
// A frozen clock for verifiers that read Date.now().
function atClock(unix, fn) {
  const real = Date.now;
  Date.now = () => unix * 1000;
  try { return fn(); } finally { Date.now = real; }
}

// ---------------------------------------------------------------- alipay
{
  const appId = '2021000123456789';
  const pub1 = readFileSync(join(keysDir, 'alipay-1.pub.b64'), 'utf8').trim();
  const sdkFor = (pub) => new AlipaySdk({
    appId, privateKey: readKey('alipay-1.key.pem'), keyType: 'PKCS8', alipayPublicKey: pub,
  });
  const sdk1 = sdkFor(pub1); // bare base64 SPKI, as the Alipay console shows it
  const sdk2 = sdkFor(readKey('alipay-2.pub.pem'));
  // No query: idemgate refuses one beside Alipay's signed form body
  // (unsigned_parameters; the backend could read it in place of a signed one).
  const path = '/hooks/alipay';
  const headers = { 'content-type': 'application/x-www-form-urlencoded; charset=utf-8' };

  // Canonical string the SDK verifies: keys sorted, sign and sign_type left
  // out, k=v joined by &, values as parsed from the form (already decoded).
  const content = (p) => Object.keys(p).filter((k) => k !== 'sign' && k !== 'sign_type').sort()
    .map((k) => `${k}=${p[k]}`).join('&');
  const rsa = (p, keyFile, signType) => createSign(signType === 'RSA' ? 'RSA-SHA1' : 'RSA-SHA256')
    .update(content(p), 'utf8').sign(readKey(keyFile), 'base64');

  const subject = '测试商品 A+B & C=D 100% 优惠';
  const base = (trade, notify) => ({
    gmt_create: '2023-11-14 22:10:05',
    charset: 'utf-8',
    seller_email: 'seller@example.com',
    subject,
    buyer_id: '2088102177846880',
    invoice_amount: '88.88',
    notify_id: notify.id,
    fund_bill_list: '[{"amount":"88.88","fundChannel":"ALIPAYACCOUNT"}]',
    notify_type: 'trade_status_sync',
    trade_status: 'TRADE_SUCCESS',
    receipt_amount: '88.88',
    app_id: appId,
    buyer_pay_amount: '88.88',
    seller_id: '2088101117955611',
    gmt_payment: '2023-11-14 22:10:20',
    notify_time: notify.time,
    version: '1.0',
    out_trade_no: trade.out,
    total_amount: '88.88',
    trade_no: trade.no,
    auth_app_id: appId,
    buyer_logon_id: 'buy***@example.com',
    point_amount: '0.00',
  });
  const trade1 = { out: 'ORDER-2023-0001', no: '2023111422001446880500000001' };

  function alipay(v) {
    const signType = v.signType || 'RSA2';
    const p = { ...v.params };
    const sign = rsa(p, `${v.key}.key.pem`, signType);
    // Body in sender order; sign_type and sign sit in the middle like real ones.
    const entries = Object.entries(p);
    entries.splice(4, 0, ['sign', sign]);
    entries.splice(14, 0, ['sign_type', signType]);
    const body = new URLSearchParams(entries).toString();
    const parsed = { ...parseQs(body) };
    const sdk = v.key === 'alipay-2' ? sdk2 : sdk1;
    must(sdk.checkNotifySignV2(parsed), `${v.name} checkNotifySignV2`);
    mustReject(sdk.checkNotifySignV2({ ...parsed, total_amount: '88.89' }), `${v.name} tampered`);
    const verified = [`signed by node crypto ${signType === 'RSA' ? 'RSA-SHA1' : 'RSA-SHA256'} over the canonical string of ${V.alipay} AlipaySdk.notifyRSACheck`,
      `${V.alipay} AlipaySdk.checkNotifySignV2`];
    let legacy;
    try { legacy = sdk.checkNotifySign(parsed) ? 'accepts' : 'rejects'; } catch (e) { legacy = `throws ${e.name} on`; }
    if (legacy === 'accepts') verified.push(`${V.alipay} AlipaySdk.checkNotifySign`);
    push({
      name: v.name, scheme: 'alipay', event: v.event, key: v.key, path, headers, body,
      options: signType === 'RSA' ? { allow_rsa1: true } : {},
      verified_by: verified,
      note: `${v.note} Legacy checkNotifySign (decodeURIComponent on already-parsed values) ${legacy} this body.`,
    });
  }

  const paid1 = base(trade1, { id: '2023111400222221020046881400000001', time: '2023-11-14 22:10:21' });
  alipay({
    name: 'alipay-paid', event: 'alipay-trade-1-paid', key: 'alipay-1', params: paid1,
    note: 'Async TRADE_SUCCESS notification, RSA2 (SHA256withRSA) with alipay-1; the verifier is configured with alipay-1.pub.b64 (bare base64 SPKI). Signed content excludes sign and sign_type; subject has Chinese text and + & = % (form-encoded, space as +). Dedup key: out_trade_no/trade_no + trade_status (notify_id changes on retries).',
  });
  alipay({
    name: 'alipay-paid-retry', event: 'alipay-trade-1-paid', key: 'alipay-1',
    params: { ...paid1, notify_id: '2023111400222221020046881400000002', notify_time: '2023-11-14 22:14:25' },
    note: 'Genuine retry of alipay-paid: Alipay re-sends the same business fields with a new notify_id, a new notify_time and therefore a new sign (retry schedule per Alipay docs: 4m,10m,10m,1h,2h,6h,15h; not checked here).',
  });
  const refund = (n, outBiz, fee, gmt, notify) => ({
    ...base(trade1, notify), out_biz_no: outBiz, refund_fee: fee, gmt_refund: gmt,
  });
  const r1 = refund(1, 'REFUND-0001-1', '10.00', '2023-11-15 09:00:01.123', { id: '2023111500222090001046881400000011', time: '2023-11-15 09:00:02' });
  alipay({
    name: 'alipay-refund-1', event: 'alipay-trade-1-refund-1', key: 'alipay-1', params: r1,
    note: 'Partial refund 1 of trade 1: trade_status stays TRADE_SUCCESS, adds out_biz_no, refund_fee, gmt_refund (with milliseconds). Distinct state change from alipay-paid although trade_status is identical: a dedup key must include out_biz_no.',
  });
  alipay({
    name: 'alipay-refund-1-retry', event: 'alipay-trade-1-refund-1', key: 'alipay-1',
    params: { ...r1, notify_id: '2023111500222090001046881400000012', notify_time: '2023-11-15 09:04:05' },
    note: 'Retry of alipay-refund-1: new notify_id, notify_time and sign; same out_biz_no.',
  });
  alipay({
    name: 'alipay-refund-2', event: 'alipay-trade-1-refund-2', key: 'alipay-1',
    params: refund(2, 'REFUND-0001-2', '5.50', '2023-11-16 10:30:00.456', { id: '2023111600222103001046881400000021', time: '2023-11-16 10:30:01' }),
    note: 'Partial refund 2 of trade 1 (other out_biz_no, refund_fee 5.50): a different event from refund 1.',
  });
  const trade2 = { out: 'ORDER-2023-0002', no: '2023111422001446880500000002' };
  alipay({
    name: 'alipay-paid-key2', event: 'alipay-trade-2-paid', key: 'alipay-2',
    params: base(trade2, { id: '2023111400222221020046881400000031', time: '2023-11-14 23:00:00' }),
    note: 'Key rotation: signed with alipay-2; verifier configured with alipay-2.pub.pem (PEM SPKI). A sidecar holding both public keys must try each.',
  });
  const trade3 = { out: 'ORDER-2023-0003', no: '2023111422001446880500000003' };
  alipay({
    name: 'alipay-paid-rsa1', event: 'alipay-trade-3-paid', key: 'alipay-1', signType: 'RSA',
    params: base(trade3, { id: '2023111400222221020046881400000041', time: '2023-11-14 23:30:00' }),
    note: 'sign_type=RSA: SHA1withRSA with alipay-1. The SDK picks the hash from the sign_type field of the notification itself (RSA -> RSA-SHA1, RSA2 -> RSA-SHA256), so a strict verifier should accept this only when allow_rsa1 is set.',
  });
  const trade4 = { out: 'ORDER-2023-0004', no: '2023111422001446880500000004' };
  const p4 = { ...base(trade4, { id: '2023111400222221020046881400000051', time: '2023-11-15 00:00:00' }), body: '' };
  // Show the empty-value rule: a signature over the string WITHOUT body= is rejected.
  {
    const dropped = Object.keys(p4).filter((k) => p4[k] !== '').sort().map((k) => `${k}=${p4[k]}`).join('&');
    const s = createSign('RSA-SHA256').update(dropped).sign(readKey('alipay-1.key.pem'), 'base64');
    if (sdk1.checkNotifySignV2({ ...p4, sign: s, sign_type: 'RSA2' })) throw new Error('alipay: empty-dropped form unexpectedly accepted');
  }
  alipay({
    name: 'alipay-empty-value', event: 'alipay-trade-4-paid', key: 'alipay-1', params: p4,
    note: 'Has one empty-valued parameter (body=). alipay-sdk keeps it: the signed string contains "body=&" (notifyRSACheck filters on the KEY being non-empty, never on the value). The same notification signed over a string without body= is REJECTED by checkNotifySignV2 (checked in generate.mjs). Alipay\'s own docs/Java SDK behaviour for empty values: unverified.',
  });
}

// ---------------------------------------------------------------- wechatpay v2
{
  const apiKey = 'idemgateTestOnlyV2ApiKey20231114';
  if (apiKey.length !== 32) throw new Error('v2 key must be 32 chars');
  const mchId = '1900000109';
  // No query: WeChat Pay's notify_url carries none, and idemgate refuses one
  // beside the signed XML body (unsigned_parameters).
  const path = '/hooks/wechatpay/v2';
  const headers = { 'content-type': 'text/xml' };
  const trans = new Transformer(mchId, apiKey);
  const NUMERIC = new Set(['total_fee', 'cash_fee', 'refund_fee', 'settlement_refund_fee', 'settlement_total_fee']);
  const toXml = (p, root = 'xml') => `<${root}>${Object.entries(p).map(([k, v]) => (NUMERIC.has(k)
    ? `<${k}>${v}</${k}>` : `<${k}><![CDATA[${v}]]></${k}>`)).join('')}</${root}>`;
  const order = (n, nonce) => ({
    appid: 'wx2421b1c4370ec43b',
    bank_type: 'CMC',
    cash_fee: '100',
    fee_type: 'CNY',
    is_subscribe: 'N',
    mch_id: mchId,
    nonce_str: nonce,
    openid: 'oUpF8uMEb4qRXf22hE3X68TekukE',
    out_trade_no: `WX-ORDER-000${n}`,
    result_code: 'SUCCESS',
    return_code: 'SUCCESS',
    time_end: '20231114221020',
    total_fee: '100',
    trade_type: 'JSAPI',
    transaction_id: `420000200${n}202311141234567890`,
  });
  function v2(v) {
    const p = { ...v.params };
    if (v.signTypeField) p.sign_type = v.signTypeField;
    p.sign = Hash.sign(v.algo, p, apiKey);
    const body = toXml(p);
    const parsed = Transformer.toObject.call({}, body);
    const res = trans.verifier.call({ url: '/pay/unifiedorder' }, parsed, {}, 200);
    must(!(res instanceof Error) && res.sign === p.sign, `${v.name} Transformer.verifier ${res && res.message}`);
    mustReject(!(trans.verifier.call({ url: '/pay/unifiedorder' }, { ...parsed, total_fee: '101' }, {}, 200) instanceof Error), `${v.name} tampered`);
    push({
      name: v.name, scheme: 'wechatpay-v2', event: v.event, secret: apiKey, path, headers, body,
      verified_by: [`signed by ${V.wxp} Hash.sign('${v.algo}')`, `${V.wxp} Transformer.toObject + Transformer.verifier`],
      note: v.note,
    });
  }
  v2({
    name: 'wxv2-md5', event: 'wxv2-order-1-paid', algo: 'MD5', params: order(1, '5K8264ILTKCH16CQ2502SI8ZNMTM67VS'),
    note: 'Payment result notification, MD5 (uppercase hex, 32 chars), no sign_type field. String: sorted k=v of non-empty fields except sign, joined by &, then &key=<API key>.',
  });
  const o2 = order(2, 'Fr3sHn0nCe0000000000000000000002');
  v2({
    name: 'wxv2-hmac', event: 'wxv2-order-2-paid', algo: 'HMAC-SHA256', signTypeField: 'HMAC-SHA256', params: o2,
    note: 'HMAC-SHA256 with sign_type=HMAC-SHA256 present. sign_type IS part of the signed string (only sign is excluded). HMAC key = API key bytes; the message still ends with &key=<API key>. Uppercase hex, 64 chars.',
  });
  v2({
    name: 'wxv2-hmac-no-sign-type', event: 'wxv2-order-3-paid', algo: 'HMAC-SHA256', params: order(3, 'N0S1gnTyp3N0nce00000000000000003'),
    note: 'HMAC-SHA256 WITHOUT a sign_type field: the plugin verifier picks HMAC-SHA256 because the sign is 64 chars (MD5 otherwise); it never reads sign_type.',
  });
  v2({
    name: 'wxv2-hmac-retry', event: 'wxv2-order-2-paid', algo: 'HMAC-SHA256', signTypeField: 'HMAC-SHA256',
    params: { ...o2, nonce_str: 'Fr3sHn0nCe0000000000000000000R02' },
    note: 'Retry of wxv2-hmac: same payment (out_trade_no, transaction_id), new nonce_str and so a new sign. Dedup key: transaction_id (or out_trade_no).',
  });
  // Refund notification: no sign; req_info = base64(AES-256-ECB(md5hex(apiKey), PKCS7, xml)).
  const reqInfo = {
    out_refund_no: 'WX-REFUND-0001-1',
    out_trade_no: 'WX-ORDER-0001',
    refund_account: 'REFUND_SOURCE_RECHARGE_FUNDS',
    refund_fee: '40',
    refund_id: '50000408942023111400000000001',
    refund_recv_accout: '支付用户零钱',
    refund_request_source: 'API',
    refund_status: 'SUCCESS',
    settlement_refund_fee: '40',
    settlement_total_fee: '100',
    success_time: '2023-11-15 09:00:03',
    total_fee: '100',
    transaction_id: '4200002001202311141234567890',
  };
  const aesKey = Hash.md5(apiKey).toLowerCase();
  const plain = toXml(reqInfo, 'root');
  const enc = Aes.AesEcb.encrypt(plain, aesKey);
  const refundBody = toXml({ return_code: 'SUCCESS', appid: 'wx2421b1c4370ec43b', mch_id: mchId, nonce_str: 'R3fundN0nce00000000000000000001', req_info: enc });
  const outer = Transformer.toObject.call({}, refundBody);
  const dec = Aes.AesEcb.decrypt(outer.req_info, aesKey);
  must(dec === plain && Transformer.toObject.call({}, dec).refund_id === reqInfo.refund_id, 'wxv2 refund AesEcb.decrypt');
  push({
    name: 'wxv2-refund', scheme: 'wechatpay-v2', event: 'wxv2-order-1-refund-1', secret: apiKey, path, headers, body: refundBody,
    verified_by: [`encrypted by ${V.wxp} Aes.AesEcb.encrypt`, `${V.wxp} Aes.AesEcb.decrypt + Transformer.toObject (plaintext matched)`],
    note: 'Refund result notification: no sign at all; authenticity comes from req_info decrypting under key = lowercase hex MD5 of the API key (the 32 ASCII chars are the AES-256 key), AES-256-ECB, PKCS#7, base64. Decrypted <root> holds refund_id/out_refund_no (dedup key: refund_id + refund_status). The plugin\'s Transformer.verifier is NOT applicable (it would look for sign).',
  });
}

// ---------------------------------------------------------------- wechatpay v3
{
  const apiV3Key = 'idemgateTestOnlyApiV3Key20231114';
  const path = '/hooks/wechatpay/v3?tenant=acme';
  const c1 = new X509Certificate(readKey('wechatpay-1.cert.pem'));
  const c2 = new X509Certificate(readKey('wechatpay-2.cert.pem'));
  const pubId = 'PUB_KEY_ID_0112345678202501010000000000000000';
  const certs = {
    [c1.serialNumber]: c1.publicKey,
    [c2.serialNumber]: c2.publicKey,
    [pubId]: createPublicKey(readKey('wechatpay-pub.pub.pem')),
  };
  WxPay.certificates = Object.fromEntries(Object.entries(certs).map(([k, v]) => [k, v.export({ type: 'spki', format: 'pem' })]));
  const keyFile = { [c1.serialNumber]: 'wechatpay-1', [c2.serialNumber]: 'wechatpay-2', [pubId]: 'wechatpay-pub' };
  const verifier = Decorator.responseVerifier(certs);

  const notification = (n, id) => {
    const tx = {
      mchid: '1900000109', appid: 'wxd678efh567hg6787', out_trade_no: `WX3-ORDER-000${n}`,
      transaction_id: `420000300${n}202311141234567890`, trade_type: 'JSAPI', trade_state: 'SUCCESS',
      trade_state_desc: '支付成功', bank_type: 'CMC', attach: '', success_time: '2023-11-14T22:10:20+08:00',
      payer: { openid: 'oUpF8uMuAJO_M2pxb1Q9zNjWeS6o' }, amount: { total: 100, payer_total: 100, currency: 'CNY', payer_currency: 'CNY' },
    };
    const nonce = `fdasflkja48${n}`; // 12 chars, as WeChat uses
    const aad = 'transaction';
    return JSON.stringify({
      id, create_time: '2023-11-14T22:10:21+08:00', resource_type: 'encrypt-resource', event_type: 'TRANSACTION.SUCCESS',
      summary: '支付成功',
      resource: {
        original_type: 'transaction', algorithm: 'AEAD_AES_256_GCM',
        ciphertext: Aes.AesGcm.encrypt(JSON.stringify(tx), apiV3Key, nonce, aad), associated_data: aad, nonce,
      },
    });
  };
  async function v3(v) {
    const keyName = keyFile[v.serial];
    const message = `${v.ts}\n${v.nonce}\n${v.body}\n`;
    const signature = Rsa.sign(message, readKey(`${keyName}.key.pem`));
    const headers = {
      'content-type': 'application/json',
      'wechatpay-nonce': v.nonce,
      'wechatpay-serial': v.serial,
      'wechatpay-signature': signature,
      'wechatpay-signature-type': 'WECHATPAY2-SHA256-RSA2048',
      'wechatpay-timestamp': String(v.ts),
    };
    const now = v.ts + 3;
    const res = atClock(now, () => verifier.call({ url: '/hooks' }, v.body, headers, 200));
    must(res === v.body, `${v.name} Decorator.responseVerifier ${res && res.message}`);
    mustReject(atClock(now, () => verifier.call({ url: '/hooks' }, `${v.body} `, headers, 200)) === `${v.body} `, `${v.name} tampered`);
    mustReject(atClock(v.ts + 301, () => verifier.call({ url: '/hooks' }, v.body, headers, 200)) === v.body, `${v.name} 301 s late`);
    const ok = await WxPay.prototype.verifySign.call({}, {
      timestamp: String(v.ts), nonce: v.nonce, body: v.body, serial: v.serial, signature,
    });
    must(ok, `${v.name} wechatpay-node-v3 verifySign`);
    const plain = JSON.parse(v.body).resource;
    const dec = Aes.AesGcm.decrypt(plain.ciphertext, apiV3Key, plain.nonce, plain.associated_data);
    must(JSON.parse(dec).trade_state === 'SUCCESS', `${v.name} AesGcm.decrypt`);
    push({
      name: v.name, scheme: 'wechatpay-v3', event: v.event, key: keyName, serial: v.serial, path, headers, body: v.body, now,
      verified_by: [`signed by ${V.wxp} Rsa.sign over Formatter.response(timestamp, nonce, body)`,
        `${V.wxp} Decorator.responseVerifier (clock frozen at now)`, `${V.wxn} Pay.verifySign`],
      note: `${v.note} resource decrypts with the test APIv3 key "${apiV3Key}" (AEAD_AES_256_GCM, verified with ${V.wxp} Aes.AesGcm.decrypt); the sidecar only needs the signature.`,
    });
  }
  const b1 = notification(1, 'EV-2018022511223320873');
  await v3({
    name: 'wxv3-paid', event: 'wxv3-order-1-paid', serial: c1.serialNumber, ts: 1700000000, nonce: 'fdasfwqewlkja484w', body: b1,
    note: 'TRANSACTION.SUCCESS signed with platform cert wechatpay-1; Wechatpay-Serial is its serial in uppercase hex. Message: timestamp\\nnonce\\nbody\\n.',
  });
  await v3({
    name: 'wxv3-paid-retry', event: 'wxv3-order-1-paid', serial: c1.serialNumber, ts: 1700000900, nonce: 'qq8b2k1zjd0hx3mw', body: b1,
    note: 'Retry of wxv3-paid: identical body (same notification id), new Wechatpay-Timestamp/Nonce and so a new signature. Dedup key: body id (or decrypted transaction_id).',
  });
  await v3({
    name: 'wxv3-paid-cert2', event: 'wxv3-order-2-paid', serial: c2.serialNumber, ts: 1700001000, nonce: 'r0tat3dc3rtn0nc3',
    body: notification(2, 'EV-2018022511223320874'),
    note: 'Platform certificate rotation: signed with wechatpay-2, Wechatpay-Serial names cert 2; the verifier selects the key by serial.',
  });
  await v3({
    name: 'wxv3-paid-pubkey', event: 'wxv3-order-3-paid', serial: pubId, ts: 1700002000, nonce: 'pubk3ym0d3n0nc3x',
    body: notification(3, 'EV-2018022511223320875'),
    note: 'WeChat Pay public-key mode: Wechatpay-Serial carries the public key id (PUB_KEY_ID_...), verified with keys/wechatpay-pub.pub.pem; same message format.',
  });
}

// ---------------------------------------------------------------- adyen
{
  const hex = createHash('sha256').update('idemgate adyen TEST ONLY hmac key').digest('hex').toUpperCase();
  const hv = new HmacValidator();
  const path = '/hooks/adyen?tenant=acme';
  const headers = { 'content-type': 'application/json' };
  const item = (o) => ({
    additionalData: { authCode: '58747', cardSummary: '1111', expiryDate: '03/2030' },
    amount: { currency: 'EUR', value: o.value ?? 1130 },
    eventCode: o.eventCode || 'AUTHORISATION',
    eventDate: o.eventDate || '2023-11-14T22:10:20+01:00',
    merchantAccountCode: 'IdemgateTestECOM',
    merchantReference: o.ref,
    ...(o.originalReference ? { originalReference: o.originalReference } : {}),
    paymentMethod: 'visa',
    pspReference: o.psp,
    reason: o.reason ?? '58747:1111:03/2030',
    success: 'true',
  });
  const signed = (it) => {
    const sig = hv.calculateHmac(it, hex);
    return { ...it, additionalData: { ...it.additionalData, hmacSignature: sig } };
  };
  function adyen(v) {
    const body = JSON.stringify({ live: 'false', notificationItems: v.items.map((it) => ({ NotificationRequestItem: signed(it) })) });
    for (const { NotificationRequestItem: n } of JSON.parse(body).notificationItems) {
      must(hv.validateHMAC(n, hex), `${v.name} validateHMAC`);
      mustReject(hv.validateHMAC({ ...n, amount: { ...n.amount, value: n.amount.value + 1 } }, hex), `${v.name} tampered`);
    }
    push({
      name: v.name, scheme: 'adyen', event: v.event, secret: hex, path, headers, body,
      verified_by: [`signed by ${V.adyen} HmacValidator.calculateHmac(NotificationRequestItem)`, `${V.adyen} HmacValidator.validateHMAC (every item)`],
      note: v.note,
    });
  }
  const auth = item({ ref: 'ORDER-2023-0001', psp: 'V4HZ4RBFJGXXGN82' });
  const signedString = hv.getDataToSign(auth);
  adyen({
    name: 'adyen-auth', event: 'adyen-psp-V4HZ4RBFJGXXGN82-authorisation', items: [auth],
    note: `AUTHORISATION success=true. Signed string: pspReference:originalReference:merchantAccountCode:merchantReference:value:currency:eventCode:success = "${signedString}" (missing originalReference -> empty). HMAC-SHA256 with the hex-decoded key, base64, in additionalData.hmacSignature. Dedup key per item: pspReference + eventCode (+ success).`,
  });
  adyen({
    name: 'adyen-auth-retry', event: 'adyen-psp-V4HZ4RBFJGXXGN82-authorisation', items: [auth],
    note: 'Retry of adyen-auth: byte-identical body. Adyen re-sends the same notification (same pspReference, eventCode, eventDate, hmacSignature) until it gets [accepted]; that nothing changes on retries is unverified against Adyen docs here.',
  });
  const ref = item({
    ref: 'ORDER-2023-0001', psp: 'QFQTPCQ8HXSKGK82', originalReference: 'V4HZ4RBFJGXXGN82', eventCode: 'REFUND', value: 500,
    eventDate: '2023-11-15T09:00:01+01:00', reason: '',
  });
  adyen({
    name: 'adyen-refund', event: 'adyen-psp-QFQTPCQ8HXSKGK82-refund', items: [ref],
    note: `REFUND of adyen-auth (new pspReference, originalReference = the payment's). Signed string: "${hv.getDataToSign(ref)}".`,
  });
  const odd = item({ ref: 'shop:42\\b:c', psp: 'K6NWFLX9J7RSGN82' });
  const escaped = ['K6NWFLX9J7RSGN82', '', 'IdemgateTestECOM', 'shop\\:42\\\\b\\:c', '1130', 'EUR', 'AUTHORISATION', 'true'].join(':');
  if (hv.calculateHmac(escaped, hex) === hv.calculateHmac(odd, hex)) throw new Error('adyen: escaping unexpectedly irrelevant');
  adyen({
    name: 'adyen-escaping', event: 'adyen-psp-K6NWFLX9J7RSGN82-authorisation', items: [odd],
    note: `merchantReference "shop:42\\b:c" (colons and a backslash) is put in the signed string VERBATIM: "${hv.getDataToSign(odd)}". The library escapes \\ and : only in its other branch (flat all-string maps, e.g. HPP/redirect params), never for NotificationRequestItem; a string with escaping applied gives a different, rejected HMAC.`,
  });
  adyen({
    name: 'adyen-batch', event: 'adyen-batch-psp-7Z5JT6DTPR2GXK82-and-R8LJ9BDSC54KGN82', items: [
      item({ ref: 'ORDER-2023-0005', psp: '7Z5JT6DTPR2GXK82', value: 2500 }),
      item({ ref: 'ORDER-2023-0006', psp: 'R8LJ9BDSC54KGN82', value: 999, eventCode: 'CAPTURE', originalReference: 'R8LJ9BDSC54KGN82', reason: '' }),
    ],
    note: 'Two notification items in one request, each with its own hmacSignature; both must verify. Each item is its own state change (dedup per item: pspReference + eventCode), the event label here names the batch.',
  });
}

// ---------------------------------------------------------------- twilio
{
  const token = createHash('md5').update('idemgate twilio TEST ONLY auth token').digest('hex');
  const publicUrl = 'https://hooks.example.com';
  const formHeaders = (sig, idem) => ({
    'content-type': 'application/x-www-form-urlencoded',
    'i-twilio-idempotency-token': idem,
    'x-twilio-signature': sig,
  });
  const sms = (status) => [
    ['SmsSid', 'SM2f9a3c1b7d4e5f60718293a4b5c6d7e8'], ['SmsStatus', status], ['MessageStatus', status],
    ['To', '+15558675310'], ['MessagingServiceSid', 'MG9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b'],
    ['MessageSid', 'SM2f9a3c1b7d4e5f60718293a4b5c6d7e8'], ['AccountSid', 'AC0123456789abcdef0123456789abcdef'],
    ['From', '+15017122661'], ['ApiVersion', '2010-04-01'],
  ];
  function tw(v) {
    const body = new URLSearchParams(v.entries).toString();
    const params = { ...parseQs(body) };
    const signedUrl = (v.signedOrigin || publicUrl) + v.path;
    const sig = twilio.getExpectedTwilioSignature(token, signedUrl, params);
    must(twilio.validateRequest(token, sig, publicUrl + v.path, params), `${v.name} validateRequest`);
    mustReject(twilio.validateRequest(token, sig, `${publicUrl + v.path}&y=2`, params), `${v.name} other url`);
    push({
      name: v.name, scheme: 'twilio', event: v.event, secret: token, public_url: publicUrl, path: v.path,
      headers: formHeaders(sig, v.idem), body,
      verified_by: [`signed by ${V.twilio} getExpectedTwilioSignature(url=${signedUrl})`, `${V.twilio} validateRequest(url=${publicUrl + v.path})`],
      note: v.note,
    });
  }
  const statusPath = '/hooks/twilio/status?tenant=acme&x=1';
  tw({
    name: 'twilio-sent', event: 'twilio-SM2f9a-sent', path: statusPath, entries: sms('sent'),
    idem: 'c7f2b1d0-1a2b-4c3d-8e9f-000000000001-sent',
    note: 'SMS status callback (sent). Signed: public_url + path (with query) followed by every POST param as name+value, names sorted, HMAC-SHA1 with the auth token, base64 in X-Twilio-Signature. Dedup key: MessageSid + MessageStatus (or I-Twilio-Idempotency-Token).',
  });
  tw({
    name: 'twilio-delivered', event: 'twilio-SM2f9a-delivered', path: statusPath, entries: sms('delivered'),
    idem: 'c7f2b1d0-1a2b-4c3d-8e9f-000000000002-delivered',
    note: 'Next status of the same message (delivered): same MessageSid, a distinct event.',
  });
  tw({
    name: 'twilio-sent-retry', event: 'twilio-SM2f9a-sent', path: statusPath, entries: sms('sent'),
    idem: 'c7f2b1d0-1a2b-4c3d-8e9f-000000000001-sent',
    note: 'Retry of twilio-sent: identical body, signature and I-Twilio-Idempotency-Token. Twilio does not retry status callbacks by default; retries come from connection overrides (#rc=...) and keep the same idempotency token (per Twilio docs as recalled; unverified here).',
  });
  tw({
    name: 'twilio-port-443', event: 'twilio-SM7c1d-sent', path: '/hooks/twilio/status?tenant=acme',
    signedOrigin: 'https://hooks.example.com:443',
    entries: sms('sent').map(([k, v]) => [k, v.replace('SM2f9a3c1b7d4e5f60718293a4b5c6d7e8', 'SM7c1d0000000000000000000000000001')]),
    idem: 'c7f2b1d0-1a2b-4c3d-8e9f-000000000003-sent',
    note: 'Signed over https://hooks.example.com:443/... (explicit default port). The sidecar\'s public_url has no port; validateRequest accepts because it tries the URL both without and with the default port (:443 for https, :80 for http).',
  });
  {
    const json = JSON.stringify({ MessageSid: 'SM9b9b0000000000000000000000000001', MessageStatus: 'delivered', AccountSid: 'AC0123456789abcdef0123456789abcdef' });
    const hash = twilio.getExpectedBodyHash(json);
    const path = `/hooks/twilio/json?tenant=acme&bodySHA256=${hash}`;
    const sig = twilio.getExpectedTwilioSignature(token, publicUrl + path, null);
    must(twilio.validateRequestWithBody(token, sig, publicUrl + path, json), 'twilio-json validateRequestWithBody');
    push({
      name: 'twilio-json-body', scheme: 'twilio', event: 'twilio-SM9b9b-delivered', secret: token, public_url: publicUrl, path,
      headers: { 'content-type': 'application/json', 'i-twilio-idempotency-token': 'c7f2b1d0-1a2b-4c3d-8e9f-000000000004', 'x-twilio-signature': sig },
      body: json,
      verified_by: [`signed by ${V.twilio} getExpectedTwilioSignature(url, null)`, `${V.twilio} validateRequestWithBody`],
      note: 'Non-form body: the signature covers only the URL (with the bodySHA256 query param, no POST params); bodySHA256 = lowercase hex SHA-256 of the raw body.',
    });
  }
  tw({
    name: 'twilio-repeated-params', event: 'twilio-SMaa01-received', path: '/hooks/twilio/sms?tenant=acme',
    entries: [['MessageSid', 'SMaa010000000000000000000000000001'], ['AccountSid', 'AC0123456789abcdef0123456789abcdef'],
      ['From', '+15017122661'], ['To', '+15558675310'], ['Body', 'Hi + bye & 100%'],
      ['Tag', 'zeta'], ['Tag', 'alpha'], ['Tag', 'zeta'], ['NumMedia', '0']],
    idem: 'c7f2b1d0-1a2b-4c3d-8e9f-000000000005',
    note: 'Repeated name Tag=zeta&Tag=alpha&Tag=zeta: the SDK de-duplicates the values and sorts them, contributing "Tagalpha" then "Tagzeta" once each (the duplicate zeta is signed once). Body also has + & % in a value.',
  });
}

writeFileSync(outFile, `${JSON.stringify(vectors, null, 1)}\n`);
console.log(`wrote ${vectors.length} vectors to ${outFile}`);
console.log(JSON.stringify(V));
