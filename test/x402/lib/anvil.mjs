// Starts the anvil binary shipped in the npm package @foundry-rs/anvil-linux-amd64 on loopback.
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);

export function anvilBinary() {
  const platformPkg = `@foundry-rs/anvil-${process.platform}-${process.arch === 'x64' ? 'amd64' : process.arch}`;
  let dir;
  try {
    dir = path.dirname(require.resolve(`${platformPkg}/package.json`));
  } catch {
    throw new Error(`anvil binary package ${platformPkg} is not installed (run npm ci in test/x402)`);
  }
  const bin = path.join(dir, 'bin', 'anvil');
  if (!fs.existsSync(bin)) throw new Error(`anvil binary missing at ${bin}`);
  return bin;
}

// setpriv (util-linux) lets the anvil child be killed by the kernel if this process dies
// without running its handlers (SIGKILL, crash): PR_SET_PDEATHSIG.
let setprivOk;
function haveSetpriv() {
  if (setprivOk === undefined) {
    const r = spawnSync('setpriv', ['--pdeathsig', 'SIGKILL', '--', 'true'], { stdio: 'ignore' });
    setprivOk = r.status === 0;
  }
  return setprivOk;
}

async function rpcChainId(url, timeoutMs) {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'eth_chainId', params: [] }),
    signal: AbortSignal.timeout(timeoutMs),
  });
  const j = await res.json();
  return Number(BigInt(j.result));
}

/**
 * @param {{host?: string, port?: number, chainId?: number, timeoutMs?: number,
 *          log?: (s: string) => void, verbose?: boolean}} opts
 */
export async function startAnvil(opts = {}) {
  const host = opts.host ?? '127.0.0.1';
  const port = opts.port ?? 0;
  const chainId = opts.chainId ?? 31337;
  const timeoutMs = opts.timeoutMs ?? 60000;
  const log = opts.log ?? (() => {});
  const bin = anvilBinary();
  const args = [
    '--host', host,
    '--port', String(port),
    '--chain-id', String(chainId),
    '--accounts', '1',
    '--balance', '1000000',
    '--hardfork', 'prague',
  ];
  const useSetpriv = haveSetpriv();
  const cmd = useSetpriv ? 'setpriv' : bin;
  const argv = useSetpriv ? ['--pdeathsig', 'SIGKILL', '--', bin, ...args] : args;
  const proc = spawn(cmd, argv, { stdio: ['ignore', 'pipe', 'pipe'] });

  let exited = null;
  const exitPromise = new Promise((resolve) => {
    proc.on('exit', (code, signal) => {
      exited = { code, signal };
      resolve(exited);
    });
  });
  const tail = [];
  let listening = null;
  let onListen;
  const listenPromise = new Promise((resolve) => { onListen = resolve; });
  const onLine = (line) => {
    if (tail.length > 50) tail.shift();
    tail.push(line);
    const m = line.match(/Listening on ([0-9.]+):(\d+)/);
    if (m && !listening) {
      listening = { host: m[1], port: Number(m[2]) };
      onListen(listening);
    }
    if (opts.verbose) log(`[anvil] ${line}`);
  };
  for (const stream of [proc.stdout, proc.stderr]) {
    let buf = '';
    stream.setEncoding('utf8');
    stream.on('data', (d) => {
      buf += d;
      let i;
      while ((i = buf.indexOf('\n')) >= 0) {
        onLine(buf.slice(0, i));
        buf = buf.slice(i + 1);
      }
    });
  }

  const stop = async () => {
    if (exited) return exited;
    proc.kill('SIGTERM');
    const t = setTimeout(() => { if (!exited) proc.kill('SIGKILL'); }, 2000);
    const r = await exitPromise;
    clearTimeout(t);
    return r;
  };
  // Last resort if the process exits without awaiting stop().
  const onExit = () => { if (!exited) try { proc.kill('SIGKILL'); } catch { /* gone */ } };
  process.on('exit', onExit);

  const deadline = Date.now() + timeoutMs;
  const fail = async (msg) => {
    await stop();
    throw new Error(`${msg}; anvil output tail:\n${tail.join('\n')}`);
  };
  const first = await Promise.race([
    listenPromise,
    exitPromise.then(() => 'exited'),
    new Promise((r) => setTimeout(() => r('timeout'), timeoutMs)),
  ]);
  if (first === 'exited') await fail(`anvil exited early (${JSON.stringify(exited)})`);
  if (first === 'timeout') await fail(`anvil did not report a listening port within ${timeoutMs} ms`);
  const url = `http://${host}:${listening.port}`;
  for (;;) {
    if (exited) await fail('anvil exited before answering RPC');
    try {
      const id = await rpcChainId(url, 2000);
      if (id !== chainId) await fail(`anvil answered chain id ${id}, expected ${chainId}`);
      break;
    } catch (e) {
      if (Date.now() > deadline) await fail(`anvil RPC at ${url} not ready within ${timeoutMs} ms: ${e.message}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  return { url, port: listening.port, pid: proc.pid, proc, stop, exitPromise, usesPdeathsig: useSetpriv };
}
