#!/usr/bin/env node
// Captures the PAYMENT-SIGNATURE an official x402 reference client sends for a fixed
// PAYMENT-REQUIRED, as a test vector for the Go verifier (no chain needed: the client only signs).
//
//   node capture.mjs --scheme exact|upto [--client node|python] > vector-node-exact.json
//
// It serves one 402 with PAYMENT-REQUIRED on 127.0.0.1, runs test/x402's pay.mjs (or pay.py)
// unmodified against it with a fixed dev key and --approve none, and prints
// {client, scheme, requirements, payment_signature, payer, signed_at}. signed_at is the Unix time
// just before the client ran: the Go tests verify the vector at that time, since the credential
// expires maxTimeoutSeconds after signing.
import http from 'node:http';
import { execFile } from 'node:child_process';
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

const bed = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../test/x402');
const { values: a } = parseArgs({ options: { scheme: { type: 'string' }, client: { type: 'string', default: 'node' } } });
if (!['exact', 'upto'].includes(a.scheme) || !['node', 'python'].includes(a.client)) {
  process.stderr.write('usage: node capture.mjs --scheme exact|upto [--client node|python]\n');
  process.exit(2);
}

// Anvil's well-known dev account 1 (a test key, public): the expected payer.
const key = '0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d';
const payer = '0x70997970C51812dc3A010C7d01b50e0d17dc79C8';
const base = { network: 'eip155:31337', asset: '0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512', payTo: '0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC', maxTimeoutSeconds: 60 };
const requirements = a.scheme === 'exact'
  ? { scheme: 'exact', ...base, amount: '10000', extra: { name: 'USDC', version: '2' } }
  : { scheme: 'upto', ...base, amount: '50000', extra: { name: 'USDC', version: '2', facilitatorAddress: '0x90F79bf6EB2c4f870365E785982E1f101E93b906' } };

const server = http.createServer((req, res) => {
  if (req.headers['payment-signature']) {
    res.writeHead(200, { 'content-type': 'application/json' });
    return res.end('{"ok":true}');
  }
  const pr = { x402Version: 2, error: 'PAYMENT-SIGNATURE header is required', resource: { url: `http://${req.headers.host}${req.url}` }, accepts: [requirements] };
  res.writeHead(402, { 'PAYMENT-REQUIRED': Buffer.from(JSON.stringify(pr)).toString('base64'), 'content-type': 'application/json', 'cache-control': 'no-store' });
  res.end('{"error":"payment required"}');
});
await new Promise((r) => server.listen(0, '127.0.0.1', r));
const url = `http://127.0.0.1:${server.address().port}/x402/vector`;

const [cmd, script] = a.client === 'node' ? [process.execPath, 'pay.mjs'] : [path.join(bed, '.venv/bin/python'), 'pay.py'];
const signedAt = Math.floor(Date.now() / 1000);
const out = await new Promise((resolve, reject) => {
  execFile(cmd, [script, '--url', url, '--body', '{"model":"gpt-4o-mini"}', '--scheme', a.scheme, '--key', key, '--approve', 'none'],
    { cwd: bed, timeout: 60000 }, (err, stdout, stderr) => (err ? reject(new Error(`${err.message}\n${stderr}`)) : resolve(stdout)));
});
server.close();
const line = JSON.parse(out.trim().split('\n').pop());
if (line.status !== 200 || !line.payment_signature) throw new Error(`the client did not pay: ${out}`);
process.stdout.write(JSON.stringify({ client: a.client, scheme: a.scheme, requirements, payment_signature: line.payment_signature, payer, signed_at: signedAt }, null, 2) + '\n');
