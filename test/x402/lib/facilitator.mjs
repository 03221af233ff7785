// A real x402 v2 facilitator (@x402/core x402Facilitator + @x402/evm exact and upto schemes,
// backed by a viem wallet on the local chain) behind node:http, plus test controls.
//
// Facilitator API (x402 v2):  POST /verify, POST /settle, GET /supported
// Test controls (not part of x402): POST /__control, GET /__control, GET /__calls (each call
//   with aborted: true when its caller hung up before the answer), POST /__reset,
//   POST /__fund, GET /__balance?address=0x.., GET /__health
import http from 'node:http';
import { getAddress, isAddress } from 'viem';
import { privateKeyToAccount, nonceManager } from 'viem/accounts';
import { x402Facilitator } from '@x402/core/facilitator';
import { toFacilitatorEvmSigner, PERMIT2_ADDRESS } from '@x402/evm';
import { ExactEvmScheme } from '@x402/evm/exact/facilitator';
import { UptoEvmScheme } from '@x402/evm/upto/facilitator';
import { erc20Abi, walletFor } from './chain.mjs';

const MAX_BODY = 1 << 20;
const MAX_LOGGED_CALLS = 1000;
const MAX_DELAY_MS = 120000;

function defaultControls() {
  return {
    down: false, // true: /verify, /settle, /supported fail as down_mode says
    down_mode: '503', // "503" (answer 503 JSON) | "drop" (destroy the connection, no answer)
    verify: 'real', // "real" | "invalid" (200 {isValid:false}) | "error" (500)
    settle: 'real', // "real"|"ok" | "fail" (200 {success:false}) | "error" (500)
    delay_ms: 0, // extra latency before /verify and /settle answer
    // What /settle does once the real settlement is done (on chain): "answer" (its result),
    // "delay" (answer after after_settle_delay_ms), "drop" (destroy the connection, no answer)
    // or "500" (answer 500 {error}), for every settle until changed.
    after_settle: 'answer',
    after_settle_delay_ms: 0,
  };
}

function json(res, status, obj, extraHeaders = {}) {
  const body = JSON.stringify(obj, (_, v) => (typeof v === 'bigint' ? v.toString() : v));
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), ...extraHeaders });
  res.end(body);
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    let size = 0;
    const chunks = [];
    req.on('data', (c) => {
      size += c.length;
      if (size > MAX_BODY) {
        reject(Object.assign(new Error('body too large'), { status: 413 }));
        req.destroy();
        return;
      }
      chunks.push(c);
    });
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

/**
 * @param {object} o
 * @param {import('viem').Chain} o.chain
 * @param {import('viem').Transport} o.transport
 * @param {`0x${string}`} o.facilitatorKey
 * @param {object} o.publicClient
 * @param {object} o.testClient
 * @param {object} o.minterWallet  wallet client allowed to mint the token (for /__fund)
 * @param {`0x${string}`} o.asset
 * @param {string} o.network
 */
export async function startFacilitator(o) {
  const log = o.log ?? (() => {});
  const account = privateKeyToAccount(o.facilitatorKey, { nonceManager });
  const wallet = walletFor(o.chain, o.transport, account);
  const signer = toFacilitatorEvmSigner(
    {
      address: account.address,
      readContract: (args) => wallet.readContract({ ...args, args: args.args ?? [] }),
      verifyTypedData: (args) => wallet.verifyTypedData(args),
      writeContract: (args) => wallet.writeContract({ ...args, args: args.args ?? [] }),
      sendTransaction: (args) => wallet.sendTransaction(args),
      waitForTransactionReceipt: (args) => wallet.waitForTransactionReceipt(args),
      getCode: (args) => wallet.getCode(args),
    },
    { confirmationTimeoutMs: 30000 },
  );
  const facilitator = new x402Facilitator();
  facilitator.register(o.network, new ExactEvmScheme(signer));
  facilitator.register(o.network, new UptoEvmScheme(signer));

  let controls = defaultControls();
  let calls = [];
  const counts = { verify: 0, settle: 0, supported: 0 };
  const record = (entry) => {
    calls.push(entry);
    if (calls.length > MAX_LOGGED_CALLS) calls.shift();
  };

  async function handleFacilitator(route, req, res) {
    const at = new Date().toISOString();
    let raw = '';
    if (req.method === 'POST') raw = await readBody(req);
    counts[route]++;
    let body = null;
    if (raw) {
      try { body = JSON.parse(raw); } catch { body = raw; }
    }
    const entry = { n: calls.length ? calls[calls.length - 1].n + 1 : 1, path: `/${route}`, at, body, status: 0, response: null };
    record(entry);
    // aborted: the caller (the gateway) hung up before an answer, as it does for a request
    // whose client went away; aborted_ms is how long after the call arrived.
    const arrived = Date.now();
    res.on('close', () => {
      if (!res.writableEnded && entry.status === 0) Object.assign(entry, { aborted: true, aborted_ms: Date.now() - arrived });
    });
    const answer = (status, obj) => {
      entry.status = status;
      entry.response = obj;
      json(res, status, obj);
    };
    if (controls.down) {
      if (controls.down_mode === 'drop') {
        entry.status = -1;
        req.socket.destroy();
        return;
      }
      return answer(503, { error: 'facilitator down (test control)' });
    }
    if (route === 'supported') return answer(200, facilitator.getSupported());
    if (controls.delay_ms > 0) await new Promise((r) => setTimeout(r, Math.min(controls.delay_ms, MAX_DELAY_MS)));
    if (entry.aborted) return undefined; // nobody is waiting for the answer
    if (!body || typeof body !== 'object' || !body.paymentPayload || !body.paymentRequirements) {
      return answer(400, { error: 'body must be JSON {x402Version, paymentPayload, paymentRequirements}' });
    }
    const { paymentPayload, paymentRequirements } = body;
    const payer = paymentPayload?.payload?.authorization?.from ?? paymentPayload?.payload?.permit2Authorization?.from;
    if (route === 'verify') {
      if (controls.verify === 'invalid') return answer(200, { isValid: false, invalidReason: 'test_forced_invalid', payer });
      if (controls.verify === 'error') return answer(500, { error: 'verify failed (test control)' });
      try {
        return answer(200, await facilitator.verify(paymentPayload, paymentRequirements));
      } catch (e) {
        log(`verify threw: ${e.message}`);
        return answer(500, { error: String(e.message ?? e) });
      }
    }
    // settle
    if (controls.settle === 'fail') {
      return answer(200, { success: false, errorReason: 'test_forced_settle_failure', transaction: '', network: paymentRequirements.network, payer });
    }
    if (controls.settle === 'error') return answer(500, { error: 'settle failed (test control)' });
    try {
      const r = await facilitator.settle(paymentPayload, paymentRequirements);
      if (!r.success) log(`settle refused: ${r.errorReason}`);
      return await afterSettle(entry, req, res, () => answer(200, r));
    } catch (e) {
      log(`settle threw: ${e.message}`);
      return answer(500, { error: String(e.message ?? e) });
    }
  }

  // afterSettle answers a settle that ran as the after_settle control says (fault injection:
  // a facilitator that settled on chain but answers late, never, or with an error).
  async function afterSettle(entry, req, res, answerResult) {
    const mode = controls.after_settle;
    if (mode === 'answer') return answerResult();
    entry.after_settle = mode;
    if (mode === 'drop') {
      entry.status = -1;
      req.socket.destroy();
      return undefined;
    }
    if (mode === '500') {
      entry.status = 500;
      entry.response = { error: 'settled, then failed (test control)' };
      return json(res, 500, entry.response);
    }
    await new Promise((r) => setTimeout(r, controls.after_settle_delay_ms));
    return answerResult();
  }

  async function handleControl(path, url, req, res) {
    if (path === '/__health') return json(res, 200, { ok: true });
    if (path === '/__control' && req.method === 'GET') return json(res, 200, controls);
    if (path === '/__control' && req.method === 'POST') {
      const raw = await readBody(req);
      let patch;
      try { patch = raw ? JSON.parse(raw) : {}; } catch { return json(res, 400, { error: 'bad JSON' }); }
      const next = { ...controls };
      if ('down' in patch) next.down = Boolean(patch.down);
      if ('down_mode' in patch) {
        if (!['503', 'drop'].includes(String(patch.down_mode))) return json(res, 400, { error: 'down_mode must be "503" or "drop"' });
        next.down_mode = String(patch.down_mode);
      }
      if ('verify' in patch) {
        if (!['real', 'ok', 'invalid', 'error'].includes(patch.verify)) return json(res, 400, { error: 'verify must be real|ok|invalid|error' });
        next.verify = patch.verify === 'ok' ? 'real' : patch.verify;
      }
      if ('settle' in patch) {
        if (!['real', 'ok', 'fail', 'error'].includes(patch.settle)) return json(res, 400, { error: 'settle must be real|ok|fail|error' });
        next.settle = patch.settle === 'ok' ? 'real' : patch.settle;
      }
      if ('after_settle' in patch) {
        if (!['answer', 'delay', 'drop', '500'].includes(String(patch.after_settle))) return json(res, 400, { error: 'after_settle must be answer|delay|drop|500' });
        next.after_settle = String(patch.after_settle);
      }
      if ('after_settle_delay_ms' in patch) {
        const n = Number(patch.after_settle_delay_ms);
        if (!Number.isInteger(n) || n < 0 || n > MAX_DELAY_MS) return json(res, 400, { error: `after_settle_delay_ms must be a whole number 0..${MAX_DELAY_MS}` });
        next.after_settle_delay_ms = n;
      }
      if ('delay_ms' in patch) {
        const d = Number(patch.delay_ms);
        if (!Number.isFinite(d) || d < 0 || d > MAX_DELAY_MS) return json(res, 400, { error: `delay_ms must be 0..${MAX_DELAY_MS}` });
        next.delay_ms = d;
      }
      controls = next;
      log(`controls now ${JSON.stringify(controls)}`);
      return json(res, 200, controls);
    }
    if (path === '/__calls' && req.method === 'GET') {
      return json(res, 200, { verify: counts.verify, settle: counts.settle, supported: counts.supported, calls });
    }
    if (path === '/__reset' && req.method === 'POST') {
      controls = defaultControls();
      calls = [];
      counts.verify = counts.settle = counts.supported = 0;
      return json(res, 200, { ok: true, controls });
    }
    if (path === '/__balance' && req.method === 'GET') {
      const a = url.searchParams.get('address');
      if (!a || !isAddress(a)) return json(res, 400, { error: 'address query parameter required' });
      const address = getAddress(a);
      const [token, eth, permit2Allowance] = await Promise.all([
        o.publicClient.readContract({ address: o.asset, abi: erc20Abi, functionName: 'balanceOf', args: [address] }),
        o.publicClient.getBalance({ address }),
        o.publicClient.readContract({ address: o.asset, abi: erc20Abi, functionName: 'allowance', args: [address, PERMIT2_ADDRESS] }),
      ]);
      return json(res, 200, { address, token: token.toString(), eth: eth.toString(), permit2_allowance: permit2Allowance.toString() });
    }
    if (path === '/__fund' && req.method === 'POST') {
      const raw = await readBody(req);
      let b;
      try { b = JSON.parse(raw); } catch { return json(res, 400, { error: 'bad JSON' }); }
      if (!b.address || !isAddress(b.address)) return json(res, 400, { error: 'address required' });
      const address = getAddress(b.address);
      if (b.eth != null) {
        await o.testClient.setBalance({ address, value: BigInt(b.eth) });
      }
      if (b.token != null && BigInt(b.token) > 0n) {
        const hash = await o.minterWallet.writeContract({ address: o.asset, abi: erc20Abi, functionName: 'mint', args: [address, BigInt(b.token)] });
        const rcpt = await o.publicClient.waitForTransactionReceipt({ hash, timeout: 30000 });
        if (rcpt.status !== 'success') return json(res, 500, { error: 'mint reverted' });
      }
      const token = await o.publicClient.readContract({ address: o.asset, abi: erc20Abi, functionName: 'balanceOf', args: [address] });
      const eth = await o.publicClient.getBalance({ address });
      return json(res, 200, { address, token: token.toString(), eth: eth.toString() });
    }
    return json(res, 404, { error: 'not found' });
  }

  const server = http.createServer(async (req, res) => {
    const url = new URL(req.url, 'http://x');
    const path = url.pathname.replace(/\/+$/, '') || '/';
    try {
      if (path === '/verify' && req.method === 'POST') return await handleFacilitator('verify', req, res);
      if (path === '/settle' && req.method === 'POST') return await handleFacilitator('settle', req, res);
      if (path === '/supported' && req.method === 'GET') return await handleFacilitator('supported', req, res);
      if (path.startsWith('/__')) return await handleControl(path, url, req, res);
      return json(res, 404, { error: 'not found' });
    } catch (e) {
      log(`${req.method} ${path} failed: ${e.stack ?? e}`);
      if (!res.headersSent) json(res, e.status ?? 500, { error: String(e.message ?? e) });
      else res.destroy();
    }
  });
  server.keepAliveTimeout = 5000;
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(o.port ?? 0, o.host ?? '127.0.0.1', resolve);
  });
  const { port } = server.address();
  const url = `http://${o.host ?? '127.0.0.1'}:${port}`;
  const close = () =>
    new Promise((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections?.();
    });
  return { url, port, address: account.address, close, facilitator };
}
