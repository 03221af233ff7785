#!/usr/bin/env node
// Proves the test bed without the gateway (npm test): starts testbed.mjs and the hand-written
// resource server, pays with the Node (pay.mjs) and Python (pay.py) reference clients, and checks
// token balances on chain, replay refusal, the facilitator's test controls and process cleanup.
// env: X402_PYTHON (python with x402 installed; default .venv/bin/python, created from
// requirements.txt when missing), X402_SKIP_PYTHON=1 to skip the Python client.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createPublicClient, http } from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { erc20Abi } from './lib/chain.mjs';
import { startResourceServer } from './resource.mjs';
import { pidAlive, runJSON, startBed, waitGone } from './lib/spawn.mjs';

const root = path.dirname(fileURLToPath(import.meta.url));
const OVERALL_TIMEOUT_MS = 300000;
const watchdog = setTimeout(() => {
  console.error(`selftest: overall timeout ${OVERALL_TIMEOUT_MS} ms`);
  cleanup().finally(() => process.exit(1));
}, OVERALL_TIMEOUT_MS);

const results = [];
const timings = [];
let bed = null;
let resource = null;
const extraBeds = [];

function log(s) { process.stderr.write(`${s}\n`); }

async function cleanup() {
  try { await resource?.close(); } catch { /* ignore */ }
  for (const b of [bed, ...extraBeds]) {
    if (!b) continue;
    try { await b.stop('stdin', 5000); } catch { /* ignore */ }
    if (pidAlive(b.info.anvil_pid)) try { process.kill(b.info.anvil_pid, 'SIGKILL'); } catch { /* gone */ }
  }
}

async function check(name, fn) {
  const t0 = performance.now();
  try {
    const detail = await fn();
    results.push({ name, ok: true });
    console.log(`PASS ${name}${detail ? `  (${detail})` : ''}  [${Math.round(performance.now() - t0)} ms]`);
  } catch (e) {
    results.push({ name, ok: false });
    console.log(`FAIL ${name}: ${e.message}`);
  }
}
function skip(name, why) {
  results.push({ name, ok: null });
  console.log(`SKIP ${name}: ${why}`);
}
function assert(cond, msg) { if (!cond) throw new Error(msg); }
function eq(a, b, msg) { if (a !== b) throw new Error(`${msg}: got ${JSON.stringify(a)}, want ${JSON.stringify(b)}`); }

function pythonExe() {
  if (process.env.X402_SKIP_PYTHON === '1') return { skip: 'X402_SKIP_PYTHON=1' };
  const probe = (py) => spawnSync(py, ['-c', 'import x402, web3, httpx, eth_account'], { stdio: 'ignore', timeout: 60000 }).status === 0;
  if (process.env.X402_PYTHON) {
    return probe(process.env.X402_PYTHON) ? { py: process.env.X402_PYTHON } : { skip: `X402_PYTHON=${process.env.X402_PYTHON} cannot import x402` };
  }
  const venvPy = path.join(root, '.venv', 'bin', 'python');
  if (fs.existsSync(venvPy) && probe(venvPy)) return { py: venvPy };
  log('selftest: creating .venv from requirements.txt (PyPI)...');
  const t0 = performance.now();
  let r = spawnSync('python3', ['-m', 'venv', path.join(root, '.venv')], { stdio: 'inherit', timeout: 120000 });
  if (r.status !== 0) return { skip: 'python3 -m venv failed' };
  r = spawnSync(venvPy, ['-m', 'pip', 'install', '-q', '-r', path.join(root, 'requirements.txt')], { stdio: ['ignore', 'inherit', 'inherit'], timeout: 600000 });
  if (r.status !== 0 || !probe(venvPy)) return { skip: 'pip install -r requirements.txt failed' };
  timings.push(['python venv setup', `${((performance.now() - t0) / 1000).toFixed(1)} s`]);
  return { py: venvPy };
}

async function main() {
  const py = pythonExe();

  // ---- bed -----------------------------------------------------------------------------------
  bed = await startBed({ timeoutMs: 60000, log: (l) => { if (process.env.X402_VERBOSE === '1') log(l); } });
  const B = bed.info;
  timings.push(['bed startup (spawn to JSON line)', `${(bed.startupMs / 1000).toFixed(2)} s`]);
  timings.push(['bed startup (internal)', `${(B.startup_ms / 1000).toFixed(2)} s`]);
  const pc = createPublicClient({ transport: http(B.rpc_url, { timeout: 20000 }) });
  const balance = (address) => pc.readContract({ address: B.asset, abi: erc20Abi, functionName: 'balanceOf', args: [address] });
  const balances = async () => ({ payer: await balance(B.payer_address), payTo: await balance(B.pay_to) });
  const fac = async (p, init) => {
    const r = await fetch(`${B.facilitator_url}${p}`, { ...init, signal: AbortSignal.timeout(30000) });
    return { status: r.status, body: await r.json().catch(() => null) };
  };
  const facPost = (p, body) => fac(p, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

  await check('bed JSON line has every documented field', async () => {
    for (const k of ['rpc_url', 'chain_id', 'network', 'asset', 'asset_name', 'asset_version', 'asset_decimals', 'permit2', 'upto_proxy',
      'payer_key', 'payer_address', 'pay_to', 'facilitator_url', 'facilitator_address', 'minter_key', 'anvil_pid']) {
      assert(B[k] !== undefined && B[k] !== null, `missing ${k}`);
    }
    eq(B.chain_id, 31337, 'chain_id');
    eq(B.network, 'eip155:31337', 'network');
    eq(B.upto_proxy, '0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002', 'upto_proxy');
    eq(B.permit2, '0x000000000022D473030F116dDEE9F6B43aC78BA3', 'permit2');
    const chainId = await pc.getChainId();
    eq(chainId, 31337, 'eth_chainId');
    return `asset ${B.asset} "${B.asset_name}" v${B.asset_version}`;
  });

  await check('facilitator /supported lists exact and upto on eip155:31337', async () => {
    const r = await fac('/supported');
    eq(r.status, 200, 'status');
    const kinds = r.body.kinds.map((k) => `${k.x402Version}/${k.scheme}/${k.network}`).sort();
    eq(JSON.stringify(kinds), JSON.stringify(['2/exact/eip155:31337', '2/upto/eip155:31337']), 'kinds');
    eq(r.body.kinds.find((k) => k.scheme === 'upto').extra.facilitatorAddress, B.facilitator_address, 'upto facilitatorAddress');
  });

  resource = await startResourceServer({
    facilitatorUrl: B.facilitator_url,
    network: B.network,
    asset: B.asset,
    assetName: B.asset_name,
    assetVersion: B.asset_version,
    payTo: B.pay_to,
    exactAmount: '10000',
    uptoCap: '20000',
    uptoSettlePercent: 50,
    log,
  });
  const R = resource.url;

  await check('resource server answers 402 with a v2 PAYMENT-REQUIRED header', async () => {
    const r = await fetch(`${R}/paid`, { signal: AbortSignal.timeout(10000) });
    eq(r.status, 402, 'status');
    const pr = JSON.parse(Buffer.from(r.headers.get('payment-required'), 'base64').toString('utf8'));
    eq(pr.x402Version, 2, 'x402Version');
    eq(pr.accepts.map((a) => a.scheme).join(','), 'exact,upto', 'schemes');
    eq(r.headers.get('cache-control'), 'no-store', 'cache-control');
  });

  const node = (args, key = B.payer_key) => runJSON(process.execPath, ['pay.mjs', '--key', key, '--rpc-url', B.rpc_url, ...args]);
  const python = (args, key = B.payer_key) => runJSON(py.py, ['pay.py', '--key', key, '--rpc-url', B.rpc_url, ...args]);

  // One paid request; asserts the on-chain deltas equal the settled amount. Returns the client JSON.
  const paid = {};
  async function payCase(label, runner, args, { scheme, expectAmount, sse = false }) {
    await check(label, async () => {
      const before = await balances();
      const r = await runner(args);
      assert(r.json, `client printed no JSON (exit ${r.code}): ${r.stderr.slice(-800)}`);
      assert(!r.json.error, `client error: ${r.json.error}`);
      eq(r.json.status, 200, `HTTP status (body ${String(r.json.body).slice(0, 300)})`);
      const pr = r.json.payment_response;
      assert(pr && pr.success === true, `PAYMENT-RESPONSE not success: ${JSON.stringify(pr)}`);
      assert(/^0x[0-9a-f]{64}$/i.test(pr.transaction), 'transaction hash');
      eq(r.json.payment_payload?.accepted?.scheme, scheme, 'scheme paid');
      if (scheme === 'upto') eq(pr.amount, String(expectAmount), 'settled amount in PAYMENT-RESPONSE');
      const rcpt = await pc.getTransactionReceipt({ hash: pr.transaction });
      eq(rcpt.status, 'success', 'settlement tx status');
      const after = await balances();
      eq(before.payer - after.payer, BigInt(expectAmount), 'payer balance delta');
      eq(after.payTo - before.payTo, BigInt(expectAmount), 'pay_to balance delta');
      if (sse) assert(r.json.body.trimEnd().endsWith('data: [DONE]'), 'SSE body read to the end');
      paid[label] = r.json;
      timings.push([label, `${r.ms} ms (client-internal ${r.json.elapsed_ms} ms)`]);
      return `paid ${expectAmount}${scheme === 'upto' ? ' of cap 20000' : ''}, tx ${pr.transaction.slice(0, 10)}…${r.json.approve_tx ? ', approved Permit2 first' : ''}`;
    });
  }

  const body = JSON.stringify({ model: 'demo', messages: [{ role: 'user', content: 'hi' }] });
  await payCase('node exact POST /paid', node,
    ['--url', `${R}/paid`, '--method', 'POST', '--body', body, '--header', 'authorization: Bearer test-key', '--scheme', 'exact', '--asset', B.asset, '--max-amount', '1000000'],
    { scheme: 'exact', expectAmount: 10000 });
  await check('business request reached the server intact (body, Authorization)', async () => {
    const j = JSON.parse(paid['node exact POST /paid'].body);
    eq(j.echo, body, 'echoed body');
    eq(j.authorization, 'Bearer test-key', 'authorization header');
  });
  await payCase('node upto POST /paid (settles half the cap)', node,
    ['--url', `${R}/paid`, '--method', 'POST', '--body', body, '--scheme', 'upto'],
    { scheme: 'upto', expectAmount: 10000 });
  await payCase('node upto GET /paid/stream (SSE)', node,
    ['--url', `${R}/paid/stream`, '--scheme', 'upto'],
    { scheme: 'upto', expectAmount: 10000, sse: true });
  await payCase('node exact GET /paid/stream (SSE)', node,
    ['--url', `${R}/paid/stream`, '--scheme', 'exact'],
    { scheme: 'exact', expectAmount: 10000, sse: true });

  if (py.py) {
    await payCase('python exact POST /paid', python,
      ['--url', `${R}/paid`, '--method', 'POST', '--body', body, '--header', 'authorization: Bearer test-key', '--scheme', 'exact', '--asset', B.asset],
      { scheme: 'exact', expectAmount: 10000 });
    await payCase('python upto POST /paid (settles half the cap)', python,
      ['--url', `${R}/paid`, '--method', 'POST', '--body', body, '--scheme', 'upto'],
      { scheme: 'upto', expectAmount: 10000 });
    await payCase('python upto GET /paid/stream (SSE)', python,
      ['--url', `${R}/paid/stream`, '--scheme', 'upto'],
      { scheme: 'upto', expectAmount: 10000, sse: true });
  } else {
    for (const n of ['python exact POST /paid', 'python upto POST /paid', 'python upto GET /paid/stream']) skip(n, py.skip);
  }

  // upto with the eip2612GasSponsoring extension: a payer holding tokens but no ETH signs an
  // EIP-2612 permit for Permit2; the facilitator submits it (settleWithPermit) with the payment.
  const sponsoredCase = async (label, runner) => {
    await check(label, async () => {
      const key = generatePrivateKey();
      const addr = privateKeyToAccount(key).address;
      const f = await facPost('/__fund', { address: addr, token: '1000000' });
      eq(f.status, 200, '/__fund status');
      const payToBefore = await balance(B.pay_to);
      const r = await runner(['--url', `${R}/paid/sponsored`], key);
      assert(r.json, `client printed no JSON (exit ${r.code}): ${r.stderr.slice(-800)}`);
      assert(!r.json.error, `client error: ${r.json.error}`);
      eq(r.json.status, 200, `HTTP status (body ${String(r.json.body).slice(0, 300)})`);
      eq(r.json.payment_response?.success, true, 'PAYMENT-RESPONSE success');
      eq(r.json.payment_response?.amount, '10000', 'settled amount');
      eq(r.json.approve_tx, null, 'no approve transaction from the payer');
      assert(r.json.payment_payload?.extensions?.eip2612GasSponsoring?.info?.signature, 'credential carries the EIP-2612 permit');
      eq(await balance(addr), 990000n, 'payer token balance');
      eq(await pc.getBalance({ address: addr }), 0n, 'payer ETH (never needed gas)');
      eq((await balance(B.pay_to)) - payToBefore, 10000n, 'pay_to delta');
      timings.push([label, `${r.ms} ms (client-internal ${r.json.elapsed_ms} ms)`]);
      return 'payer had 0 ETH';
    });
  };
  await sponsoredCase('node upto with eip2612GasSponsoring (gasless payer)', node);
  if (py.py) await sponsoredCase('python upto with eip2612GasSponsoring (gasless payer)', python);
  else skip('python upto with eip2612GasSponsoring (gasless payer)', py.skip);

  // ---- replays ---------------------------------------------------------------------------------
  const replay = async (label, scheme, settleAmount) => {
    await check(label, async () => {
      const j = paid[Object.keys(paid).find((k) => paid[k].payment_payload?.accepted?.scheme === scheme)];
      assert(j, `no earlier ${scheme} payment to replay`);
      const payload = j.payment_payload;
      const reqs = settleAmount ? { ...payload.accepted, amount: settleAmount } : payload.accepted;
      const before = await balances();
      const v = await facPost('/verify', { x402Version: 2, paymentPayload: payload, paymentRequirements: payload.accepted });
      const s = await facPost('/settle', { x402Version: 2, paymentPayload: payload, paymentRequirements: reqs });
      eq(s.status, 200, 'settle HTTP status');
      eq(s.body.success, false, 'replayed settle success');
      const after = await balances();
      eq(after.payer, before.payer, 'payer balance unchanged');
      // And through the resource server: the same header again must not be served.
      const r = await fetch(`${R}/paid`, { method: 'POST', body, headers: { 'payment-signature': j.payment_signature }, signal: AbortSignal.timeout(30000) });
      eq(r.status, 402, 'resource server status for replayed credential');
      return `verify isValid=${v.body?.isValid} (${v.body?.invalidReason ?? ''}), settle errorReason=${s.body.errorReason}`;
    });
  };
  await replay('replayed exact credential is refused (EIP-3009 nonce used)', 'exact');
  await replay('replayed upto credential is refused (Permit2 nonce used)', 'upto', '10000');

  // ---- facilitator test controls --------------------------------------------------------------
  await check('forged credential never reaches the facilitator (400 from resource server)', async () => {
    await facPost('/__reset', {});
    const r = await fetch(`${R}/paid`, { headers: { 'payment-signature': '!!not base64!!' }, signal: AbortSignal.timeout(10000) });
    eq(r.status, 400, 'status');
    const c = await fac('/__calls');
    eq(c.body.verify + c.body.settle, 0, 'facilitator verify+settle calls');
  });

  await check('control settle=fail: 402 + PAYMENT-RESPONSE success:false, no money moves', async () => {
    await facPost('/__control', { settle: 'fail' });
    const before = await balances();
    const r = await node(['--url', `${R}/paid`, '--scheme', 'exact']);
    await facPost('/__control', { settle: 'real' });
    assert(r.json && !r.json.error, `client error: ${r.json?.error ?? r.stderr}`);
    eq(r.json.status, 402, 'status');
    eq(r.json.payment_response?.success, false, 'PAYMENT-RESPONSE success');
    const after = await balances();
    eq(after.payer, before.payer, 'payer unchanged');
    const c = await fac('/__calls');
    eq(c.body.verify, 1, 'verify calls');
    eq(c.body.settle, 1, 'settle calls');
    assert(c.body.calls.at(-1).body.paymentPayload, '/__calls records request bodies');
  });

  await check('control verify=invalid: 402, nothing settled', async () => {
    await facPost('/__reset', {});
    await facPost('/__control', { verify: 'invalid' });
    const before = await balances();
    const r = await node(['--url', `${R}/paid`, '--scheme', 'upto']);
    await facPost('/__control', { verify: 'real' });
    assert(r.json && !r.json.error, `client error: ${r.json?.error ?? r.stderr}`);
    eq(r.json.status, 402, 'status');
    const pr = JSON.parse(Buffer.from(r.json.headers['payment-required'], 'base64').toString('utf8'));
    assert(/test_forced_invalid/.test(pr.error), `fresh PAYMENT-REQUIRED error: ${pr.error}`);
    eq((await balances()).payer, before.payer, 'payer unchanged');
    const c = await fac('/__calls');
    eq(c.body.settle, 0, 'settle calls');
  });

  await check('client spend cap: a price above --max-amount is refused before signing', async () => {
    await facPost('/__reset', {});
    const r = await node(['--url', `${R}/paid`, '--scheme', 'exact', '--asset', B.asset, '--max-amount', '9999']);
    eq(r.code, 1, 'exit code');
    assert(/spend|filtered|rejected/i.test(r.json?.error ?? ''), `error: ${r.json?.error}`);
    const c = await fac('/__calls');
    eq(c.body.verify, 0, 'verify calls');
    if (py.py) {
      const p = await python(['--url', `${R}/paid`, '--scheme', 'exact', '--asset', B.asset, '--max-amount', '9999']);
      eq(p.code, 1, 'python exit code');
    }
  });

  await check('control down (503 and drop) and delay_ms', async () => {
    await facPost('/__control', { down: true });
    const r503 = await facPost('/verify', { x402Version: 2, paymentPayload: {}, paymentRequirements: {} });
    eq(r503.status, 503, 'down verify status');
    await facPost('/__control', { down: true, down_mode: 'drop' });
    let dropped = false;
    try { await facPost('/settle', {}); } catch { dropped = true; }
    assert(dropped, 'drop mode should break the connection');
    await facPost('/__control', { down: false, delay_ms: 300 });
    const t0 = performance.now();
    const bad = await facPost('/verify', {});
    assert(performance.now() - t0 >= 290, 'delay_ms applied');
    eq(bad.status, 400, 'malformed verify body status');
    const reset = await facPost('/__reset', {});
    eq(reset.body.controls.down, false, 'reset clears controls');
  });

  await check('/__fund and /__balance', async () => {
    const who = '0x000000000000000000000000000000000000bEEF';
    const f = await facPost('/__fund', { address: who, token: '1234567', eth: '1000000000000000000' });
    eq(f.status, 200, 'fund status');
    const b = await fac(`/__balance?address=${who}`);
    eq(b.body.token, '1234567', 'token balance');
    eq(b.body.eth, '1000000000000000000', 'eth balance');
  });

  // ---- process hygiene ------------------------------------------------------------------------
  await resource.close();
  resource = null;
  await check('closing stdin stops the bed and its anvil', async () => {
    const r = await bed.stop('stdin', 10000);
    eq(r.code, 0, 'bed exit code');
    assert(await waitGone(B.anvil_pid, 5000), `anvil pid ${B.anvil_pid} still alive`);
  });
  for (const sig of ['SIGTERM', 'SIGKILL']) {
    await check(`${sig} to the bed leaves no anvil behind`, async () => {
      const b = await startBed({ timeoutMs: 60000 });
      extraBeds.push(b);
      timings.push([`bed startup #${extraBeds.length + 1}`, `${(b.startupMs / 1000).toFixed(2)} s`]);
      await b.stop(sig, 10000);
      assert(await waitGone(b.info.anvil_pid, 5000), `anvil pid ${b.info.anvil_pid} still alive after ${sig}`);
      return sig === 'SIGKILL' ? 'killed by PR_SET_PDEATHSIG' : 'handled';
    });
  }
}

main()
  .catch((e) => {
    results.push({ name: 'selftest setup', ok: false });
    console.log(`FAIL selftest setup: ${e.stack ?? e}`);
  })
  .finally(async () => {
    await cleanup();
    clearTimeout(watchdog);
    console.log('\ntimings:');
    for (const [k, v] of timings) console.log(`  ${k}: ${v}`);
    const passed = results.filter((r) => r.ok === true).length;
    const failed = results.filter((r) => r.ok === false).length;
    const skipped = results.filter((r) => r.ok === null).length;
    console.log(`\n${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ''}`);
    process.exit(failed ? 1 : 0);
  });
