#!/usr/bin/env node
// A minimal x402 v2 resource server written by hand (node:http only, no x402 server SDK), used to
// prove the test bed without the gateway. Paid URLs (any method):
//   /paid         JSON answer
//   /paid/stream  text/event-stream answer (settles first, then streams)
//   /paid/sponsored  upto only, with the eip2612GasSponsoring extension declared
// No PAYMENT-SIGNATURE -> 402 + PAYMENT-REQUIRED (base64 JSON; accepts: exact, then upto).
// With one -> decode (400 if malformed), strict match of `accepted` against the offer, facilitator
// /verify, business answer, facilitator /settle (upto: the actual amount, by default half the cap),
// 200 + PAYMENT-RESPONSE; a failed settle gives 402 + PAYMENT-RESPONSE {success:false}.
//
// CLI: node resource.mjs --facilitator-url URL --asset 0x.. --pay-to 0x.. [--asset-name USDC]
//        [--asset-version 2] [--network eip155:31337] [--port 0] [--exact-amount 10000]
//        [--upto-cap 20000] [--upto-settle-percent 50]
// prints one JSON line {"url": "..."} when listening.
import http from 'node:http';
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';

export const b64json = (obj) => Buffer.from(JSON.stringify(obj), 'utf8').toString('base64');
export function unb64json(s) {
  if (typeof s !== 'string' || !/^[A-Za-z0-9+/]+={0,2}$/.test(s.trim())) throw new Error('not base64');
  return JSON.parse(Buffer.from(s.trim(), 'base64').toString('utf8'));
}

function canonical(v) {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  if (v && typeof v === 'object') {
    return `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${canonical(v[k])}`).join(',')}}`;
  }
  return JSON.stringify(v);
}

async function postJSON(url, body, timeoutMs = 30000) {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(timeoutMs),
  });
  const text = await res.text();
  let data;
  try { data = JSON.parse(text); } catch { data = { error: text }; }
  return { status: res.status, data };
}

/**
 * @param {{facilitatorUrl: string, network?: string, asset: string, assetName?: string,
 *   assetVersion?: string, payTo: string, exactAmount?: string, uptoCap?: string,
 *   uptoSettlePercent?: number, maxTimeoutSeconds?: number, host?: string, port?: number,
 *   log?: (s: string) => void}} o
 */
export async function startResourceServer(o) {
  const log = o.log ?? (() => {});
  const network = o.network ?? 'eip155:31337';
  const host = o.host ?? '127.0.0.1';
  const exactAmount = String(o.exactAmount ?? '10000');
  const uptoCap = String(o.uptoCap ?? '20000');
  const uptoPercent = BigInt(o.uptoSettlePercent ?? 50);
  const maxTimeoutSeconds = o.maxTimeoutSeconds ?? 300;
  const extra = { name: o.assetName ?? 'USDC', version: o.assetVersion ?? '2' };

  // The upto requirement must name the facilitator that will settle (witness.facilitator).
  const supRes = await fetch(`${o.facilitatorUrl}/supported`, { signal: AbortSignal.timeout(10000) });
  if (!supRes.ok) throw new Error(`facilitator /supported answered ${supRes.status}`);
  const supported = await supRes.json();
  const uptoKind = supported.kinds.find((k) => k.scheme === 'upto' && k.network === network && k.x402Version === 2);
  const facilitatorAddress = uptoKind?.extra?.facilitatorAddress;
  if (!facilitatorAddress) throw new Error(`facilitator offers no upto kind with facilitatorAddress on ${network}`);

  const accepts = [
    { scheme: 'exact', network, amount: exactAmount, asset: o.asset, payTo: o.payTo, maxTimeoutSeconds, extra },
    { scheme: 'upto', network, amount: uptoCap, asset: o.asset, payTo: o.payTo, maxTimeoutSeconds, extra: { ...extra, facilitatorAddress } },
  ];
  // /paid/sponsored offers only upto and declares the eip2612GasSponsoring extension: the client
  // then signs an EIP-2612 permit for Permit2 instead of sending an approve transaction itself.
  const sponsoredAccepts = [accepts[1]];
  const sponsoredExtensions = {
    eip2612GasSponsoring: {
      info: { description: 'The facilitator submits an EIP-2612 permit for the canonical Permit2 contract.', version: '1' },
      schema: { type: 'object' },
    },
  };
  const offerFor = (path) => (path === '/paid/sponsored' ? sponsoredAccepts : accepts);
  const settlements = [];

  function paymentRequired(req, error) {
    const path = new URL(req.url, 'http://x').pathname;
    const pr = {
      x402Version: 2,
      error,
      resource: { url: `http://${req.headers.host}${req.url}`, description: 'test bed paid resource', mimeType: 'application/json' },
      accepts: offerFor(path),
    };
    if (path === '/paid/sponsored') pr.extensions = sponsoredExtensions;
    return pr;
  }
  function send402(req, res, error, extraHeaders = {}) {
    const body = JSON.stringify({ error });
    res.writeHead(402, {
      'PAYMENT-REQUIRED': b64json(paymentRequired(req, error)),
      'Cache-Control': 'no-store',
      'Content-Type': 'application/json',
      'Content-Length': Buffer.byteLength(body),
      ...extraHeaders,
    });
    res.end(body);
  }
  function sendJSON(res, status, obj, headers = {}) {
    const body = JSON.stringify(obj);
    res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body), ...headers });
    res.end(body);
  }

  const server = http.createServer(async (req, res) => {
    try {
      const chunks = [];
      for await (const c of req) chunks.push(c);
      const reqBody = Buffer.concat(chunks).toString('utf8');
      const path = new URL(req.url, 'http://x').pathname;
      if (!['/paid', '/paid/stream', '/paid/sponsored'].includes(path)) return sendJSON(res, 404, { error: 'not found' });

      const sig = req.headers['payment-signature'];
      if (!sig) return send402(req, res, 'PAYMENT-SIGNATURE header is required');
      let payload;
      try {
        payload = unb64json(sig);
      } catch {
        return sendJSON(res, 400, { error: 'malformed PAYMENT-SIGNATURE' });
      }
      if (!payload || typeof payload !== 'object' || payload.x402Version !== 2 || !payload.accepted || !payload.payload) {
        return sendJSON(res, 400, { error: 'PAYMENT-SIGNATURE is not an x402 v2 PaymentPayload' });
      }
      const requirement = offerFor(path).find((a) => canonical(a) === canonical(payload.accepted));
      if (!requirement) return send402(req, res, 'accepted does not match any offered requirement');

      const v = await postJSON(`${o.facilitatorUrl}/verify`, { x402Version: 2, paymentPayload: payload, paymentRequirements: requirement });
      if (v.status !== 200) return sendJSON(res, 502, { error: `facilitator /verify answered ${v.status}`, detail: v.data });
      if (!v.data.isValid) return send402(req, res, `verify failed: ${v.data.invalidReason}`);

      // "Business" done; settle. upto: charge the actual usage, here a fixed share of the cap.
      const settleReq = requirement.scheme === 'upto'
        ? { ...requirement, amount: ((BigInt(requirement.amount) * uptoPercent) / 100n).toString() }
        : requirement;
      const s = await postJSON(`${o.facilitatorUrl}/settle`, { x402Version: 2, paymentPayload: payload, paymentRequirements: settleReq });
      if (s.status !== 200) return sendJSON(res, 502, { error: `facilitator /settle answered ${s.status}`, detail: s.data });
      const settlement = s.data;
      settlements.push({ scheme: requirement.scheme, requested: settleReq.amount, settlement });
      const payResp = b64json(settlement);
      if (!settlement.success) return send402(req, res, `settle failed: ${settlement.errorReason}`, { 'PAYMENT-RESPONSE': payResp });

      if (path === '/paid/stream') {
        res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache', 'PAYMENT-RESPONSE': payResp });
        for (let i = 0; i < 5; i++) {
          res.write(`data: ${JSON.stringify({ chunk: i, scheme: requirement.scheme })}\n\n`);
          await new Promise((r) => setTimeout(r, 20));
        }
        res.end('data: [DONE]\n\n');
        return;
      }
      return sendJSON(res, 200, { ok: true, method: req.method, scheme: requirement.scheme, echo: reqBody, authorization: req.headers.authorization ?? null }, { 'PAYMENT-RESPONSE': payResp });
    } catch (e) {
      log(`resource server error: ${e.stack ?? e}`);
      if (!res.headersSent) sendJSON(res, 500, { error: String(e.message ?? e) });
      else res.destroy();
    }
  });
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(o.port ?? 0, host, resolve);
  });
  const url = `http://${host}:${server.address().port}`;
  return {
    url,
    accepts,
    settlements,
    close: () => new Promise((r) => { server.close(() => r()); server.closeAllConnections?.(); }),
  };
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const { values } = parseArgs({
    options: {
      'facilitator-url': { type: 'string' },
      asset: { type: 'string' },
      'pay-to': { type: 'string' },
      'asset-name': { type: 'string', default: 'USDC' },
      'asset-version': { type: 'string', default: '2' },
      network: { type: 'string', default: 'eip155:31337' },
      port: { type: 'string', default: '0' },
      'exact-amount': { type: 'string', default: '10000' },
      'upto-cap': { type: 'string', default: '20000' },
      'upto-settle-percent': { type: 'string', default: '50' },
    },
  });
  for (const k of ['facilitator-url', 'asset', 'pay-to']) {
    if (!values[k]) { process.stderr.write(`--${k} is required\n`); process.exit(2); }
  }
  const srv = await startResourceServer({
    facilitatorUrl: values['facilitator-url'],
    asset: values.asset,
    payTo: values['pay-to'],
    assetName: values['asset-name'],
    assetVersion: values['asset-version'],
    network: values.network,
    port: Number(values.port),
    exactAmount: values['exact-amount'],
    uptoCap: values['upto-cap'],
    uptoSettlePercent: Number(values['upto-settle-percent']),
    log: (s) => process.stderr.write(`[resource] ${s}\n`),
  });
  process.stdout.write(JSON.stringify({ url: srv.url }) + '\n');
  const stop = () => srv.close().then(() => process.exit(0));
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}
