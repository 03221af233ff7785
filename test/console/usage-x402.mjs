// Opens the console's usage page for one account in Debian's chromium (headless, through
// playwright-core) and prints the x402 totals its footer shows, one JSON line:
// {"columns": [...], "paid": "$..", "pending": "..", "unpaid": "..", "misfits": {"1280": [...],
// "390": [...]}} ("" for a column not shown; misfits: what does not fit that width, see
// layout.mjs). Started by test/e2e/x402_settle_test.go against a gateway without an admin token.
//
// Environment: TOLLWAY_CONSOLE_URL (http://<admin>/console/), TOLLWAY_CONSOLE_ACCOUNT,
// TOLLWAY_CONSOLE_OUT (optional: screenshots at each width go there), CHROMIUM (default
// /usr/bin/chromium).
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import { frame, misfits } from './layout.mjs';

const consoleURL = process.env.TOLLWAY_CONSOLE_URL;
const account = process.env.TOLLWAY_CONSOLE_ACCOUNT;
if (!consoleURL || !account) throw new Error('TOLLWAY_CONSOLE_URL and TOLLWAY_CONSOLE_ACCOUNT are required');
const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium', headless: true, args: ['--no-sandbox'] });
try {
  const page = await browser.newPage();
  page.setDefaultTimeout(15_000);
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  const since = new Date(Date.now() - 86400_000).toISOString().slice(0, 10);
  await page.goto(consoleURL + '#/usage?' + new URLSearchParams({ account, since, by: 'day,account' }));
  await page.locator('#usage-total').waitFor();
  const text = async (sel) => ((await page.locator(sel).count()) ? ((await page.locator(sel).textContent()) || '').trim() : '');
  const out = {
    columns: await page.locator('thead th').allTextContents(),
    paid: await text('#usage-total-paid'),
    pending: await text('#usage-total-pending'),
    unpaid: await text('#usage-total-unpaid'),
    errors,
    misfits: {},
  };
  const outDir = process.env.TOLLWAY_CONSOLE_OUT;
  if (outDir) mkdirSync(outDir, { recursive: true });
  for (const [width, height] of [[1280, 800], [390, 844]]) {
    await page.setViewportSize({ width, height });
    await frame(page);
    out.misfits[width] = await misfits(page);
    if (outDir) await page.screenshot({ path: join(outDir, 'usage-x402-' + width + '.png'), fullPage: true });
  }
  console.log(JSON.stringify(out));
} finally {
  await browser.close();
}
