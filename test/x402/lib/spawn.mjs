// Small process helpers for selftest.mjs: start testbed.mjs and read its JSON line, run a client CLI.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/** Starts testbed.mjs as a child; resolves with {info, proc, stop, startupMs} once it printed its line. */
export function startBed({ args = [], timeoutMs = 60000, log = () => {} } = {}) {
  const t0 = performance.now();
  const proc = spawn(process.execPath, [path.join(root, 'testbed.mjs'), ...args], {
    stdio: ['pipe', 'pipe', 'pipe'],
    cwd: root,
  });
  let stderrTail = [];
  proc.stderr.setEncoding('utf8');
  proc.stderr.on('data', (d) => {
    for (const line of d.split('\n').filter(Boolean)) {
      log(line);
      stderrTail.push(line);
      if (stderrTail.length > 40) stderrTail = stderrTail.slice(-40);
    }
  });
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  const stop = async (how = 'stdin', waitMs = 10000) => {
    if (proc.exitCode !== null || proc.signalCode !== null) return exited;
    if (how === 'stdin') proc.stdin.end();
    else proc.kill(how);
    const t = setTimeout(() => proc.kill('SIGKILL'), waitMs);
    const r = await exited;
    clearTimeout(t);
    return r;
  };
  return new Promise((resolve, reject) => {
    let buf = '';
    const timer = setTimeout(() => {
      proc.kill('SIGKILL');
      reject(new Error(`testbed not ready within ${timeoutMs} ms; stderr tail:\n${stderrTail.join('\n')}`));
    }, timeoutMs);
    proc.stdout.setEncoding('utf8');
    proc.stdout.on('data', (d) => {
      buf += d;
      const i = buf.indexOf('\n');
      if (i >= 0) {
        clearTimeout(timer);
        try {
          const info = JSON.parse(buf.slice(0, i));
          resolve({ info, proc, stop, exited, startupMs: performance.now() - t0 });
        } catch (e) {
          reject(new Error(`testbed printed a non-JSON line: ${buf.slice(0, i)}`));
        }
      }
    });
    exited.then((r) => {
      clearTimeout(timer);
      reject(new Error(`testbed exited before ready (${JSON.stringify(r)}); stderr tail:\n${stderrTail.join('\n')}`));
    });
  });
}

/** Runs a CLI that prints one JSON line; resolves {json, code, ms, stderr}. */
export function runJSON(cmd, args, { timeoutMs = 90000, env = {} } = {}) {
  const t0 = performance.now();
  return new Promise((resolve) => {
    const p = spawn(cmd, args, { cwd: root, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    p.stdout.setEncoding('utf8');
    p.stderr.setEncoding('utf8');
    p.stdout.on('data', (d) => { out += d; });
    p.stderr.on('data', (d) => { err += d; });
    const timer = setTimeout(() => p.kill('SIGKILL'), timeoutMs);
    p.on('exit', (code, signal) => {
      clearTimeout(timer);
      let json = null;
      try { json = JSON.parse(out.trim().split('\n').pop()); } catch { /* not JSON */ }
      resolve({ json, code, signal, ms: Math.round(performance.now() - t0), stdout: out, stderr: err });
    });
  });
}

export function pidAlive(pid) {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  // A zombie (exited, not yet reaped by its new parent) counts as gone.
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
}

export async function waitGone(pid, ms = 5000) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (!pidAlive(pid)) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return !pidAlive(pid);
}
