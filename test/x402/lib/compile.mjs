// Compiles contracts/UptoSettlementProxy.sol with the npm solc package (pinned in
// package.json) and caches the result under node_modules/.cache so later starts skip solc.
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '..');
const require = createRequire(import.meta.url);

export const PROXY_SOURCE = path.join(root, 'contracts', 'UptoSettlementProxy.sol');
const CONTRACT = 'UptoSettlementProxy';
const SETTINGS = {
  optimizer: { enabled: true, runs: 200 },
  evmVersion: 'cancun',
  outputSelection: { '*': { '*': ['abi', 'evm.bytecode.object', 'evm.deployedBytecode.object'] } },
};

export function compileUptoProxy(log = () => {}) {
  const source = fs.readFileSync(PROXY_SOURCE, 'utf8');
  const solcVersion = require('solc/package.json').version;
  const key = createHash('sha256')
    .update(JSON.stringify({ source, solcVersion, SETTINGS }))
    .digest('hex')
    .slice(0, 24);
  const cacheDir = path.join(root, 'node_modules', '.cache', 'tollway-x402');
  const cacheFile = path.join(cacheDir, `${CONTRACT}-${key}.json`);
  try {
    const cached = JSON.parse(fs.readFileSync(cacheFile, 'utf8'));
    if (cached.deployedBytecode && cached.abi) return { ...cached, cached: true };
  } catch {
    // not cached yet
  }
  const t0 = Date.now();
  const solc = require('solc');
  const input = {
    language: 'Solidity',
    sources: { 'UptoSettlementProxy.sol': { content: source } },
    settings: SETTINGS,
  };
  const output = JSON.parse(solc.compile(JSON.stringify(input)));
  const errors = (output.errors || []).filter((e) => e.severity === 'error');
  if (errors.length) {
    throw new Error('solc failed: ' + errors.map((e) => e.formattedMessage).join('\n'));
  }
  const c = output.contracts['UptoSettlementProxy.sol'][CONTRACT];
  const result = {
    solcVersion: solc.version(),
    abi: c.abi,
    bytecode: '0x' + c.evm.bytecode.object,
    deployedBytecode: '0x' + c.evm.deployedBytecode.object,
  };
  log(`compiled ${CONTRACT} with solc ${result.solcVersion} in ${Date.now() - t0} ms`);
  try {
    fs.mkdirSync(cacheDir, { recursive: true });
    fs.writeFileSync(cacheFile, JSON.stringify(result));
  } catch {
    // cache is best effort
  }
  return { ...result, cached: false };
}
