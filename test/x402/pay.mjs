#!/usr/bin/env node
// The official Node x402 v2 reference client (@x402/fetch wrapFetchWithPayment + @x402/evm exact
// and upto client schemes + a viem private-key account) as a one-shot CLI.
//
//   node pay.mjs --url URL [--method POST] [--body '{...}'] [--header 'k: v']... \
//       [--scheme exact|upto] [--key 0x..] [--rpc-url URL] [--asset 0x..] [--max-amount N] \
//       [--approve exact|max|none] [--timeout 60]
// env: X402_PAYER_KEY (for --key), X402_RPC_URL (for --rpc-url)
//
// Prints ONE JSON line: {status, headers, payment_response, body, payment_signature,
//   payment_payload, approve_tx, elapsed_ms}; on a client-side failure {error, ...} and exit 1.
// Exit 0 whenever an HTTP answer was received, whatever its status.
import { parseArgs } from 'node:util';
import { createPublicClient, createWalletClient, defineChain, getAddress, http, maxUint256, parseAbi } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { wrapFetchWithPayment, x402Client, decodePaymentResponseHeader } from '@x402/fetch';
import { toClientEvmSigner, PERMIT2_ADDRESS } from '@x402/evm';
import { ExactEvmScheme } from '@x402/evm/exact/client';
import { UptoEvmScheme } from '@x402/evm/upto/client';

const started = performance.now();
const out = {
  status: null,
  headers: {},
  payment_response: null,
  body: null,
  payment_signature: null,
  payment_payload: null,
  approve_tx: null,
  elapsed_ms: null,
};
function finish(code, extra = {}) {
  out.elapsed_ms = Math.round(performance.now() - started);
  process.stdout.write(JSON.stringify({ ...out, ...extra }) + '\n', () => process.exit(code));
}

const { values: a } = parseArgs({
  options: {
    url: { type: 'string' },
    method: { type: 'string' },
    body: { type: 'string' },
    header: { type: 'string', multiple: true, default: [] },
    scheme: { type: 'string' },
    key: { type: 'string', default: process.env.X402_PAYER_KEY },
    'rpc-url': { type: 'string', default: process.env.X402_RPC_URL },
    asset: { type: 'string' },
    'max-amount': { type: 'string' },
    approve: { type: 'string', default: 'exact' },
    timeout: { type: 'string', default: '60' },
  },
  strict: true,
});

const erc20 = parseAbi([
  'function allowance(address owner, address spender) view returns (uint256)',
  'function approve(address spender, uint256 amount) returns (bool)',
]);

async function main() {
  if (!a.url) throw new Error('--url is required');
  if (!a.key) throw new Error('--key (or X402_PAYER_KEY) is required');
  if (a.scheme && !['exact', 'upto'].includes(a.scheme)) throw new Error('--scheme must be exact or upto');
  if (!['exact', 'max', 'none'].includes(a.approve)) throw new Error('--approve must be exact, max or none');
  const timeoutMs = Number(a.timeout) * 1000;
  const account = privateKeyToAccount(a.key);
  const rpcUrl = a['rpc-url'];
  const publicClient = rpcUrl ? createPublicClient({ transport: http(rpcUrl, { timeout: 30000 }), pollingInterval: 100 }) : undefined;
  const signer = toClientEvmSigner(account, publicClient);
  const schemeOptions = rpcUrl ? { rpcUrl } : undefined;

  const client = new x402Client();
  client.register('eip155:*', new ExactEvmScheme(signer, schemeOptions));
  client.register('eip155:*', new UptoEvmScheme(signer, schemeOptions));
  if (a.scheme) client.registerPolicy((_v, reqs) => reqs.filter((r) => r.scheme === a.scheme));
  // Default spend controls allow only the library's known mainnet/testnet assets, capped at $1.
  // The local token is unknown to it: allow exactly --asset (optionally capped), else any asset.
  if (a.asset) {
    const entry = { network: 'eip155:*', asset: getAddress(a.asset) };
    if (a['max-amount']) entry.maxAmountPerPayment = a['max-amount'];
    client.setSpendControls({ allowedAssets: [entry] });
  } else {
    client.setSpendControls({ allowedAssets: true });
    if (a['max-amount']) {
      const cap = BigInt(a['max-amount']);
      client.registerPolicy((_v, reqs) => reqs.filter((r) => BigInt(r.amount) <= cap));
    }
  }

  // upto procedure (spec 4.6): without a gas-sponsoring extension, make sure the payer's ERC-20
  // allowance to Permit2 covers the amount; otherwise approve from the payer wallet and wait.
  client.onBeforePaymentCreation(async ({ paymentRequired, selectedRequirements: r }) => {
    if (r.scheme !== 'upto' || a.approve === 'none' || BigInt(r.amount) === 0n) return;
    const ext = paymentRequired.extensions ?? {};
    if (ext.eip2612GasSponsoring || ext.erc20ApprovalGasSponsoring) return;
    if (!publicClient) throw new Error('upto needs --rpc-url (or X402_RPC_URL) to check/approve the Permit2 allowance');
    const token = getAddress(r.asset);
    const allowance = await publicClient.readContract({ address: token, abi: erc20, functionName: 'allowance', args: [account.address, PERMIT2_ADDRESS] });
    if (allowance >= BigInt(r.amount)) return;
    const chainId = Number(r.network.split(':')[1]);
    const chain = defineChain({ id: chainId, name: r.network, nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 }, rpcUrls: { default: { http: [rpcUrl] } } });
    const wallet = createWalletClient({ account, chain, transport: http(rpcUrl, { timeout: 30000 }), pollingInterval: 100 });
    const amount = a.approve === 'max' ? maxUint256 : BigInt(r.amount);
    const hash = await wallet.writeContract({ address: token, abi: erc20, functionName: 'approve', args: [PERMIT2_ADDRESS, amount] });
    const rcpt = await publicClient.waitForTransactionReceipt({ hash, timeout: 60000 });
    if (rcpt.status !== 'success') throw new Error(`approve(Permit2) reverted: ${hash}`);
    out.approve_tx = hash;
  });

  // Record the credential exactly as sent, so a test can replay it.
  const recordingFetch = async (input, init) => {
    const req = input instanceof Request ? input : new Request(input, init);
    const sig = req.headers.get('payment-signature');
    if (sig) {
      out.payment_signature = sig;
      try { out.payment_payload = JSON.parse(Buffer.from(sig, 'base64').toString('utf8')); } catch { /* keep raw */ }
    }
    return fetch(req);
  };
  const payFetch = wrapFetchWithPayment(recordingFetch, client);

  const headers = new Headers();
  for (const h of a.header) {
    const i = h.indexOf(':');
    if (i <= 0) throw new Error(`bad --header ${JSON.stringify(h)} (want "name: value")`);
    headers.append(h.slice(0, i).trim(), h.slice(i + 1).trim());
  }
  if (a.body != null && !headers.has('content-type')) headers.set('content-type', 'application/json');
  const method = (a.method ?? (a.body != null ? 'POST' : 'GET')).toUpperCase();
  const res = await payFetch(a.url, {
    method,
    headers,
    body: a.body ?? undefined,
    signal: AbortSignal.timeout(timeoutMs),
  });
  out.status = res.status;
  out.headers = Object.fromEntries(res.headers.entries());
  out.body = await res.text(); // reads streamed (SSE) bodies to the end
  const pr = res.headers.get('payment-response');
  if (pr) {
    try { out.payment_response = decodePaymentResponseHeader(pr); } catch (e) { out.payment_response = { undecodable: pr, error: e.message }; }
  }
  finish(0);
}

main().catch((e) => finish(1, { error: String(e?.message ?? e) }));
