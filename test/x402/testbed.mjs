#!/usr/bin/env node
// Offline x402 v2 test bed: anvil + FiatTokenV2_2 (EIP-3009) + Permit2 + upto proxy + funded
// wallets + a real @x402 facilitator over HTTP. Prints ONE JSON line on stdout when ready, then
// runs until stdin closes (when stdin is a pipe/tty; see --stdin), SIGTERM or SIGINT. Logs go to
// stderr.
//
//   node testbed.mjs [--anvil-port N] [--facilitator-port N] [--payer-key 0x..] [--pay-to 0x..]
//                    [--token-name USDC] [--payer-usdc 100] [--stdin auto|watch|ignore]
//                    [--preapprove] [--startup-timeout 60] [--verbose]
// env equivalents: X402_ANVIL_PORT, X402_FACILITATOR_PORT, X402_PAYER_KEY, X402_PAY_TO,
//                  X402_TOKEN_NAME, X402_PAYER_USDC, X402_STDIN, X402_PREAPPROVE=1,
//                  X402_STARTUP_TIMEOUT, X402_VERBOSE=1
// Port 0 (the default) picks a free port; the chosen ports are in the JSON line.
import fs from 'node:fs';
import tty from 'node:tty';
import { parseArgs } from 'node:util';
import { getAddress, maxUint256, parseEther, parseUnits } from 'viem';
import { generatePrivateKey, mnemonicToAccount, privateKeyToAccount } from 'viem/accounts';
import { PERMIT2_ADDRESS, x402UptoPermit2ProxyAddress } from '@x402/evm';
import { startAnvil } from './lib/anvil.mjs';
import {
  clientsFor,
  deployFiatToken,
  erc20Abi,
  installPermit2,
  installUptoProxy,
  makeChain,
  walletFor,
} from './lib/chain.mjs';
import { startFacilitator } from './lib/facilitator.mjs';

const CHAIN_ID = 31337;
const NETWORK = `eip155:${CHAIN_ID}`;
const DECIMALS = 6;
// anvil's public, well-known development mnemonic: the deployer (owner, master minter, minter)
// and therefore the token address are the same on every run.
const DEV_MNEMONIC = 'test test test test test test test test test test test junk';

const t0 = performance.now();
const log = (msg) => process.stderr.write(`[testbed +${((performance.now() - t0) / 1000).toFixed(2)}s] ${msg}\n`);

const { values: args } = parseArgs({
  options: {
    'anvil-port': { type: 'string', default: process.env.X402_ANVIL_PORT ?? '0' },
    'facilitator-port': { type: 'string', default: process.env.X402_FACILITATOR_PORT ?? '0' },
    'payer-key': { type: 'string', default: process.env.X402_PAYER_KEY },
    'pay-to': { type: 'string', default: process.env.X402_PAY_TO },
    'token-name': { type: 'string', default: process.env.X402_TOKEN_NAME ?? 'USDC' },
    'payer-usdc': { type: 'string', default: process.env.X402_PAYER_USDC ?? '100' },
    stdin: { type: 'string', default: process.env.X402_STDIN ?? 'auto' },
    'startup-timeout': { type: 'string', default: process.env.X402_STARTUP_TIMEOUT ?? '60' },
    preapprove: { type: 'boolean', default: process.env.X402_PREAPPROVE === '1' },
    verbose: { type: 'boolean', default: process.env.X402_VERBOSE === '1' },
  },
  strict: true,
});

let anvil = null;
let fac = null;
let stopping = false;

async function shutdown(code, why) {
  if (stopping) return;
  stopping = true;
  log(`stopping (${why})`);
  const hard = setTimeout(() => {
    try { anvil?.proc.kill('SIGKILL'); } catch { /* gone */ }
    process.exit(code);
  }, 5000);
  hard.unref();
  try { await fac?.close(); } catch { /* ignore */ }
  try { await anvil?.stop(); } catch { /* ignore */ }
  clearTimeout(hard);
  process.exit(code);
}

process.on('SIGTERM', () => shutdown(0, 'SIGTERM'));
process.on('SIGINT', () => shutdown(0, 'SIGINT'));
process.on('SIGHUP', () => shutdown(0, 'SIGHUP'));
process.on('uncaughtException', (e) => { log(`uncaught: ${e.stack ?? e}`); shutdown(1, 'uncaught exception'); });
process.on('unhandledRejection', (e) => { log(`unhandled rejection: ${e?.stack ?? e}`); shutdown(1, 'unhandled rejection'); });
// stdout closed by the reader (e.g. EPIPE): nobody is listening any more.
process.stdout.on('error', () => shutdown(0, 'stdout closed'));

// --stdin auto (default): watch stdin when it is a pipe, socket or terminal; ignore it when it is
// /dev/null or a file (an EOF there would stop the bed at once).
function stdinIsLive() {
  try {
    const st = fs.fstatSync(0);
    return st.isFIFO() || st.isSocket() || tty.isatty(0);
  } catch {
    return false;
  }
}
if (!['auto', 'watch', 'ignore'].includes(args.stdin)) {
  log('--stdin must be auto, watch or ignore');
  process.exit(2);
}
const watchStdin = args.stdin === 'watch' || (args.stdin === 'auto' && stdinIsLive());
if (watchStdin) {
  process.stdin.on('data', () => {});
  process.stdin.on('end', () => shutdown(0, 'stdin closed'));
  process.stdin.on('error', () => shutdown(0, 'stdin error'));
  process.stdin.resume();
}

function port(v, name) {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw new Error(`${name} must be a port number, got ${v}`);
  return n;
}

async function main() {
  const timeoutS = Number(args['startup-timeout']);
  const deadline = setTimeout(() => {
    log(`startup did not finish within ${timeoutS} s`);
    shutdown(1, 'startup timeout');
  }, timeoutS * 1000);

  anvil = await startAnvil({
    port: port(args['anvil-port'], '--anvil-port'),
    chainId: CHAIN_ID,
    timeoutMs: timeoutS * 1000,
    log,
    verbose: args.verbose,
  });
  log(`anvil pid ${anvil.pid} at ${anvil.url}${anvil.usesPdeathsig ? ' (dies with this process: pdeathsig)' : ''}`);

  const chain = makeChain(CHAIN_ID, anvil.url);
  const { publicClient, testClient, transport } = clientsFor(chain, anvil.url);
  const deployer = mnemonicToAccount(DEV_MNEMONIC);
  const deployerWallet = walletFor(chain, transport, deployer);

  const payerKey = args['payer-key'] ?? generatePrivateKey();
  const payer = privateKeyToAccount(payerKey);
  const facilitatorKey = generatePrivateKey();
  const facilitatorAccount = privateKeyToAccount(facilitatorKey);
  const payTo = getAddress(args['pay-to'] ?? privateKeyToAccount(generatePrivateKey()).address);

  const token = await deployFiatToken({
    publicClient,
    wallet: deployerWallet,
    name: args['token-name'],
    symbol: 'USDC',
    decimals: DECIMALS,
    log,
  });
  const permit2 = await installPermit2({ publicClient, testClient, log });
  const upto = await installUptoProxy({ publicClient, testClient, log });

  const payerUsdc = parseUnits(args['payer-usdc'], DECIMALS);
  await testClient.setBalance({ address: payer.address, value: parseEther('1') });
  await testClient.setBalance({ address: facilitatorAccount.address, value: parseEther('100') });
  const mintHash = await deployerWallet.writeContract({
    address: token.token, abi: erc20Abi, functionName: 'mint', args: [payer.address, payerUsdc],
  });
  const mint = await publicClient.waitForTransactionReceipt({ hash: mintHash, timeout: 30000 });
  if (mint.status !== 'success') throw new Error('mint to payer reverted');
  const bal = await publicClient.readContract({ address: token.token, abi: erc20Abi, functionName: 'balanceOf', args: [payer.address] });
  log(`payer ${payer.address}: ${bal} atomic units + 1 ETH; facilitator ${facilitatorAccount.address}: 100 ETH; pay_to ${payTo}`);
  if (args.preapprove) {
    // Unlimited Permit2 allowance from the payer, so upto clients never need their own approve
    // (useful for concurrent upto payments from one payer).
    const payerWallet = walletFor(chain, transport, payer);
    const h = await payerWallet.writeContract({ address: token.token, abi: erc20Abi, functionName: 'approve', args: [PERMIT2_ADDRESS, maxUint256] });
    const r = await publicClient.waitForTransactionReceipt({ hash: h, timeout: 30000 });
    if (r.status !== 'success') throw new Error('payer approve(Permit2) reverted');
    log('payer approved Permit2 for an unlimited amount (--preapprove)');
  }
  const allowance = await publicClient.readContract({ address: token.token, abi: erc20Abi, functionName: 'allowance', args: [payer.address, PERMIT2_ADDRESS] });

  fac = await startFacilitator({
    chain,
    transport,
    publicClient,
    testClient,
    minterWallet: deployerWallet,
    facilitatorKey,
    asset: token.token,
    network: NETWORK,
    port: port(args['facilitator-port'], '--facilitator-port'),
    log,
  });
  // Prove the HTTP side answers before announcing readiness.
  const sup = await fetch(`${fac.url}/__health`, { signal: AbortSignal.timeout(5000) });
  if (!sup.ok) throw new Error(`facilitator health check answered ${sup.status}`);
  clearTimeout(deadline);

  const startupMs = Math.round(performance.now() - t0);
  const ready = {
    rpc_url: anvil.url,
    chain_id: CHAIN_ID,
    network: NETWORK,
    asset: token.token,
    asset_name: args['token-name'],
    asset_symbol: 'USDC',
    asset_version: token.version,
    asset_decimals: DECIMALS,
    permit2: PERMIT2_ADDRESS,
    permit2_domain_separator: permit2.domainSeparator,
    upto_proxy: x402UptoPermit2ProxyAddress,
    payer_key: payerKey,
    payer_address: payer.address,
    payer_token_balance: bal.toString(),
    payer_permit2_allowance: allowance.toString(),
    pay_to: payTo,
    facilitator_url: fac.url,
    facilitator_address: fac.address,
    minter_key: deployer.getHdKey().privateKey ? `0x${Buffer.from(deployer.getHdKey().privateKey).toString('hex')}` : null,
    minter_address: deployer.address,
    anvil_pid: anvil.pid,
    pid: process.pid,
    startup_ms: startupMs,
  };
  process.stdout.write(JSON.stringify(ready) + '\n');
  log(`ready in ${(startupMs / 1000).toFixed(2)} s; facilitator ${fac.url}; stops on ${watchStdin ? 'stdin EOF, ' : ''}SIGTERM/SIGINT`);

  // If anvil dies on its own, the bed is useless: exit non-zero.
  anvil.exitPromise.then((r) => { if (!stopping) { log(`anvil exited unexpectedly ${JSON.stringify(r)}`); shutdown(1, 'anvil died'); } });
}

main().catch((e) => {
  log(`startup failed: ${e.stack ?? e}`);
  shutdown(1, 'startup failed');
});
