// Drives the Tollway web console in Debian's chromium (headless, through playwright-core) like
// a user: sign in, create a key and read it once, create a route through the form, send a chat
// request through it with the OpenAI Node SDK, see it counted, pause the route, rotate and
// revoke keys; then open every page at 1280x800 and 390x844 and check it fits (no sideways
// scrolling of the page; at 1280 no table cell past its table's edge; dates on at most two
// lines), that a route's hash opens it and an unknown hash says so. Started by
// test/e2e/console_test.go, which runs the gateway on a seeded store; exits non-zero on the
// first failed check, or at the end with every layout problem found.
//
// Environment: TOLLWAY_CONSOLE_URL (http://<admin>/console/), TOLLWAY_ADMIN_TOKEN,
// TOLLWAY_BASE_URL (http://<public>/v1), TOLLWAY_CONSOLE_ACCOUNT (an account with credits),
// TOLLWAY_CONSOLE_OUT (screenshots), CHROMIUM (default /usr/bin/chromium). Without
// TOLLWAY_ADMIN_TOKEN it makes the short run for a gateway that has no admin token.
import { mkdirSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import OpenAI from 'openai';
import { frame, misfits, slack } from './layout.mjs';

const env = (name, def) => {
  const v = process.env[name] || def;
  if (!v) throw new Error(name + ' is not set');
  return v;
};
const consoleURL = env('TOLLWAY_CONSOLE_URL');
const token = process.env.TOLLWAY_ADMIN_TOKEN || ''; // empty: a gateway without admin.token
const baseURL = env('TOLLWAY_BASE_URL');
const account = env('TOLLWAY_CONSOLE_ACCOUNT');
const outDir = env('TOLLWAY_CONSOLE_OUT');
const chromiumPath = env('CHROMIUM', '/usr/bin/chromium');
const adminOrigin = new URL(consoleURL).origin;
mkdirSync(outDir, { recursive: true });

const log = (...a) => console.log('console.mjs:', ...a);
function check(cond, what) {
  if (!cond) throw new Error('check failed: ' + what);
  log('ok:', what);
}
const T = 15_000; // every wait is bounded

const browser = await chromium.launch({ executablePath: chromiumPath, headless: true, args: ['--no-sandbox'] });
let exitCode = 0;
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: adminOrigin });
  const page = await context.newPage();
  page.setDefaultTimeout(T);

  // Every response body the browser receives, to prove where the key secret travelled.
  const bodies = [];
  const pending = [];
  page.on('response', (resp) => {
    pending.push(resp.body().then((b) => bodies.push({ url: resp.url(), body: b.toString('utf8') }), () => {}));
  });
  const errors = [];
  page.on('pageerror', (e) => errors.push('page error: ' + e.message));
  // Refusals the test provokes (400, 401, 409) are logged by chromium as failed loads; anything
  // else at error level (a script error, a CSP violation) fails the test.
  page.on('console', (m) => {
    if (m.type() === 'error' && !m.text().startsWith('Failed to load resource: the server responded with a status of')) errors.push('console error: ' + m.text());
  });

  const shot = async (name, fullPage = true) => {
    await page.screenshot({ path: join(outDir, name + '.png'), fullPage });
    log('screenshot', name + '.png');
  };

  // What does not fit a width, a hash that opens the wrong page, a unit note that misses a
  // unit: collected (want) and reported at the end, all of it at once.
  const WIDE = { width: 1280, height: 800 };
  const PHONE = { width: 390, height: 844 };
  const problems = [];
  const want = (cond, what) => { if (cond) log('ok:', what); else { problems.push(what); log('PROBLEM:', what); } };
  // fits checks the page as it is at 1280 and at 390 px, with a screenshot of each, and
  // leaves the window at 1280.
  async function fits(name) {
    for (const vp of [WIDE, PHONE]) {
      await page.setViewportSize(vp);
      await frame(page);
      const found = await misfits(page);
      const room = vp === WIDE ? await slack(page) : [];
      if (room.length) log('room to spare in the tables of', name, 'at', vp.width, 'px:', room.join(', '), 'px');
      await shot(name + '-' + vp.width);
      want(found.length === 0, name + ' fits ' + vp.width + ' px' + (found.length ? ': ' + found.join('; ') : ''));
    }
    await page.setViewportSize(WIDE);
    await frame(page);
  }
  // open shows the page a hash names (rendering it again when it is already shown) and
  // returns its heading.
  async function open(hash) {
    await page.evaluate((h) => {
      document.getElementById('main').replaceChildren();
      if (location.hash === h) window.dispatchEvent(new HashChangeEvent('hashchange'));
      else location.hash = h;
    }, hash);
    const h1 = page.locator('main h1').first();
    await h1.waitFor();
    return ((await h1.textContent()) || '').trim();
  }
  const UNITS = ['token', 'request', 'image', 'second'];
  const unitNote = async () => ((await page.locator('table caption', { hasText: 'Prices are' }).first().textContent()) || '').trim();
  const flashText = async () => (await page.locator('#flash').textContent()) || '';
  const expectFlash = async (text) => {
    await page.locator('#flash').getByText(text, { exact: false }).first().waitFor();
  };
  const nav = async (label) => {
    await page.getByRole('navigation').getByRole('link', { name: label, exact: true }).click();
    await page.getByRole('heading', { level: 1, name: label }).waitFor();
  };
  const sdk = (apiKey) => new OpenAI({ apiKey, baseURL, maxRetries: 0, timeout: 20_000 });
  const ask = (apiKey, model) => sdk(apiKey).chat.completions.create({ model, messages: [{ role: 'user', content: 'hello from the console test' }] });
  async function refusedWith(p, status) {
    try {
      await p;
    } catch (e) {
      return e.status === status ? e : (() => { throw new Error('want HTTP ' + status + ', got ' + e.status + ': ' + e.message); })();
    }
    throw new Error('want HTTP ' + status + ', the request succeeded');
  }

  if (!token) {
    // No admin token: the console opens without a sign-in and works (a top-up), no sign-out.
    await page.goto(consoleURL);
    await page.getByRole('heading', { level: 1, name: 'Keys' }).waitFor();
    check(page.url().startsWith(consoleURL), 'without an admin token the console opens with no sign-in');
    check(!(await page.getByRole('button', { name: 'Sign out' }).isVisible()), 'and offers no sign-out');
    check(((await page.locator('#mode').textContent()) || '').includes('no admin token'), 'the footer says the gateway has no admin token');
    await nav('Accounts');
    const dialog = page.locator('dialog#dialog');
    await page.locator(`tr[data-account="${account}"]`).getByRole('button', { name: 'Add credits' }).click();
    await dialog.getByLabel('Amount (USD)').fill('abc');
    await dialog.getByRole('button', { name: 'Add credits' }).click();
    await dialog.locator('.error').getByText('amount', { exact: false }).waitFor();
    check(true, 'a bad amount keeps the dialog open with the API message');
    await dialog.getByLabel('Amount (USD)').fill('1');
    await dialog.getByRole('button', { name: 'Add credits' }).click();
    await expectFlash('Added $1');
    check(true, 'a top-up works without a session');
    await shot('accounts-no-token');
    // The unit note names the units of the prices shown: this catalog prices tokens only.
    await nav('Catalog');
    const note = await unitNote();
    want(note.includes('per token') && !['request', 'image', 'second'].some((u) => note.includes('per ' + u)),
      'a catalog priced per token only says so: ' + note);
    check(problems.length === 0, 'no problems' + (problems.length ? ': ' + problems.join('; ') : ''));
    check(errors.length === 0, 'no script errors or CSP violations in the page' + (errors.length ? ': ' + errors.join('; ') : ''));
    log('PASS');
  } else {
    // Sign in.
    await page.goto(consoleURL);
    await page.waitForURL(/\/console\/signin$/);
    await fits('signin');
    await page.getByLabel('Admin token').fill('not-the-token-at-all');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.locator('#error').getByText('not this gateway', { exact: false }).waitFor();
    check(true, 'a wrong token is refused with the API message');
    await page.getByLabel('Admin token').fill(token);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL(/\/console\/(#.*)?$/);
    await page.getByRole('heading', { level: 1, name: 'Keys' }).waitFor();
    check(true, 'signed in, on the Keys page');

    // Bad input: the API's own message in the flash area.
    await page.locator('#key-account').selectOption(account);
    await page.locator('#key-limit').fill('abc');
    await page.getByRole('button', { name: 'Create key' }).click();
    await page.locator('#flash .flash.error').waitFor();
    check((await flashText()).includes('monthly_limit'), 'a bad monthly limit shows the API error naming the field: ' + (await flashText()).trim());

    await page.locator('#key-limit').fill('');
    await page.locator('#key-rpm').fill('0');
    await page.getByRole('button', { name: 'Create key' }).click();
    await page.locator('#flash .flash.error').getByText('requests_per_minute', { exact: false }).waitFor();
    check(true, 'a requests per minute of 0 shows the API error naming the field: ' + (await flashText()).trim());

    // Create a key and read it once.
    await page.locator('#key-rpm').fill('60');
    await page.locator('#key-tpm').fill('100000');
    await page.locator('#key-name').fill('console e2e');
    await page.getByRole('button', { name: 'Create key' }).click();
    const keyInput = page.locator('#new-key');
    await keyInput.waitFor();
    const key = await keyInput.inputValue();
    check(/^ale-\S{20,}$/.test(key), 'the new key is shown in full (' + key.slice(0, 8) + '...)');
    await page.getByRole('button', { name: 'Copy' }).click();
    await expectFlash('copied');
    check((await page.evaluate(() => navigator.clipboard.readText())) === key, 'Copy puts the key on the clipboard');
    await fits('keys-created');
    await page.getByRole('button', { name: 'Done, hide it' }).click();
    await keyInput.waitFor({ state: 'detached' });
    check(!(await page.content()).includes(key), 'the key is gone from the page once hidden');

    // Limits through the dialog.
    const keyRow = page.locator('tr', { hasText: 'console e2e' });
    await keyRow.getByRole('button', { name: 'Limits' }).click();
    const dialog = page.locator('dialog#dialog');
    await dialog.getByLabel('Monthly limit (USD)').fill('-1');
    await dialog.getByRole('button', { name: 'Save limits' }).click();
    await dialog.getByText('negative', { exact: false }).waitFor();
    check(await dialog.isVisible(), 'a negative limit keeps the dialog open with the API message');
    await dialog.getByLabel('Monthly limit (USD)').fill('7.5');
    await dialog.getByRole('button', { name: 'Save limits' }).click();
    await dialog.waitFor({ state: 'hidden' });
    await keyRow.getByText('$7.5').waitFor();
    check(true, 'the monthly limit is set to $7.5');
    await keyRow.getByText('60 / 100000').waitFor();
    check(true, 'the key was created with 60 requests and 100000 tokens per minute');
    await keyRow.getByRole('button', { name: 'Limits' }).click();
    check((await dialog.getByLabel('Requests per minute').inputValue()) === '60', 'the dialog shows the key\'s requests per minute');
    await dialog.getByLabel('Requests per minute').fill('2');
    await dialog.getByLabel('Tokens per minute').fill('');
    await dialog.getByRole('button', { name: 'Save limits' }).click();
    await dialog.waitFor({ state: 'hidden' });
    await keyRow.getByText('2 / default').waitFor();
    check(true, 'the dialog sets 2 requests per minute and leaves tokens to the default');

    // Create a route through the form.
    await nav('Routes');
    await page.getByRole('link', { name: 'Create route' }).click();
    await page.getByRole('heading', { level: 1, name: 'Create route' }).waitFor();
    await page.getByLabel('Name').fill('Console Route #1');
    check((await page.locator('#route-id').textContent()) === 'route:console-route-1', 'the id preview follows the slug rule: route:console-route-1');
    await page.getByRole('button', { name: 'Save route' }).click();
    await page.locator('#flash .flash.error').waitFor();
    check((await flashText()).includes('model'), 'a route without models is refused with the API message: ' + (await flashText()).trim());
    await page.locator('#route-pick').selectOption('gpt-4o-mini');
    await page.getByRole('button', { name: 'Add model' }).click();
    await page.locator('#route-order').getByText('gpt-4o-mini').waitFor();
    await page.locator('#route-rpm').fill('100');
    await shot('route-new');
    await page.getByRole('button', { name: 'Save route' }).click();
    await page.getByRole('heading', { level: 1, name: 'Routes' }).waitFor();
    await expectFlash('route:console-route-1 created');
    const routeRow = page.locator('tr[data-route="route:console-route-1"]');
    await routeRow.getByText('Active').waitFor();
    check(true, 'the route is listed, Active');
    await routeRow.getByText('100 / none').waitFor();
    check(true, 'the route was created with 100 requests per minute, tokens not limited');

    // A mode-mapping route through the same form.
    await page.getByRole('link', { name: 'Create route' }).click();
    await page.getByLabel('Name').fill('Tiers');
    await page.getByLabel('Mode mapping (fast, balanced, deep)').check();
    for (const m of ['fast', 'balanced', 'deep']) await page.locator('#mode-' + m).selectOption('gpt-4o-mini');
    await page.getByRole('button', { name: 'Save route' }).click();
    await page.locator('tr[data-route="route:tiers"]').getByText('fast: gpt-4o-mini').waitFor();
    check(true, 'a mode-mapping route is created through the form');

    // A config-file route cannot be paused from the console: the API says why.
    await page.locator('tr[data-route="route:file-route"]').getByRole('button', { name: 'Pause' }).click();
    await page.locator('#flash .flash.error').waitFor();
    check((await flashText()).includes('config file'), 'pausing a config route shows the refusal: ' + (await flashText()).trim());

    // A chat request through the route, then the route page counts it.
    const answer = await ask(key, 'route:console-route-1');
    check(answer.choices[0].message.content.length > 0, 'a chat request through the route answers');
    await routeRow.getByRole('link', { name: 'route:console-route-1' }).click();
    await page.getByRole('heading', { level: 1, name: /Console Route #1/ }).waitFor();
    let counted = false;
    for (let i = 0; i < 20 && !counted; i++) { // the record is written within ~10 ms; reload a few times
      const total = page.locator('tfoot tr').first().locator('td').nth(2);
      counted = ((await total.textContent()) || '').trim() === '1';
      if (!counted) {
        await new Promise((r) => setTimeout(r, 250));
        await page.reload();
        await page.getByRole('heading', { level: 1, name: /Console Route #1/ }).waitFor();
      }
    }
    check(counted, 'the route page counts the request');
    check(await page.locator('#route-chart rect.bar').count() >= 1, 'the chart has a bar for it');
    await page.locator('#route-metric').selectOption('cost');
    await page.locator('#route-chart').waitFor();
    await shot('route');

    // The route's rates: shown on its page, changed in its dialog (PATCH), no limit when empty.
    await page.locator('#route-rates-value').getByText('100 / none').waitFor();
    await page.getByRole('button', { name: 'Change rates' }).click();
    check((await dialog.getByLabel('Requests per minute').inputValue()) === '100', 'the rates dialog shows the route\'s requests per minute');
    await dialog.getByLabel('Requests per minute').fill('0');
    await dialog.getByRole('button', { name: 'Save rates' }).click();
    await dialog.getByText('out of range', { exact: false }).waitFor();
    check(await dialog.isVisible(), 'a rate of 0 keeps the dialog open with the API message');
    await dialog.getByLabel('Requests per minute').fill('');
    await dialog.getByLabel('Tokens per minute').fill('1000000');
    await dialog.getByRole('button', { name: 'Save rates' }).click();
    await dialog.waitFor({ state: 'hidden' });
    await page.locator('#route-rates-value').getByText('none / 1000000').waitFor();
    check(true, 'the dialog sets 1000000 tokens per minute and no requests limit on the route');

    // Pause: the next request is refused with 409 route_paused.
    await page.getByRole('button', { name: 'Pause' }).click();
    await page.locator('#route-status-value').getByText('Paused').waitFor();
    const paused = await refusedWith(ask(key, 'route:console-route-1'), 409);
    check(paused.code === 'route_paused', 'a request to the paused route is refused: 409 route_paused');
    await page.getByRole('button', { name: 'Resume' }).click();
    await page.locator('#route-status-value').getByText('Active').waitFor();
    check(true, 'the route resumes');

    // Usage: the server's totals, and its CSV.
    await nav('Usage');
    const totalCost = ((await page.locator('#usage-total-cost').textContent()) || '').trim();
    const since = await page.locator('#usage-since').inputValue();
    const usage = await (await fetch(adminOrigin + '/admin/v1/usage?since=' + since, { headers: { Authorization: 'Bearer ' + token } })).json();
    check(totalCost === '$' + usage.cost && usage.requests >= 1, 'the usage total ' + totalCost + ' is the admin API\'s to the digit');
    log('CONSOLE_USAGE_TOTAL_COST=' + usage.cost + ' since=' + since);
    const [download] = await Promise.all([page.waitForEvent('download'), page.getByRole('link', { name: 'Export CSV' }).click()]);
    const csv = await readFile(await download.path(), 'utf8');
    const totalLine = csv.trim().split('\n').pop();
    check(totalLine.startsWith('TOTAL,') && totalLine.includes(',' + usage.cost + ','), 'the CSV ends with the same TOTAL: ' + totalLine);
    await page.locator('#by-route').check();
    await page.getByRole('button', { name: 'Show', exact: true }).click();
    await page.locator('th', { hasText: 'Route' }).waitFor();
    await page.locator('td', { hasText: 'route:console-route-1' }).first().waitFor();
    check(true, 'usage grouped by route shows the route');
    await shot('usage');

    // Catalog: models and providers with health.
    await nav('Catalog');
    await page.locator('tr[data-model="gpt-4o-mini"]').waitFor();
    await page.locator('tr[data-provider="fake"]').waitFor();
    check(true, 'the catalog lists the model and the provider');
    const note = await unitNote();
    want(UNITS.every((u) => note.includes('per ' + u)), 'the unit note names every unit the catalog prices (per ' + UNITS.join(', per ') + '): ' + note);
    await shot('catalog');

    // Accounts: a top-up.
    await nav('Accounts');
    const accRow = page.locator(`tr[data-account="${account}"]`);
    const before = ((await accRow.locator('td').nth(1).textContent()) || '').trim();
    await accRow.getByRole('button', { name: 'Add credits' }).click();
    await dialog.getByLabel('Amount (USD)').fill('2.25');
    await dialog.getByRole('button', { name: 'Add credits' }).click();
    await dialog.waitFor({ state: 'hidden' });
    await expectFlash('Added $2.25');
    const after = ((await accRow.locator('td').nth(1).textContent()) || '').trim();
    check(after !== before, 'the balance changes with a top-up: ' + before + ' -> ' + after);
    await shot('accounts');

    // Rotate, then revoke: each old key is refused (401).
    await nav('Keys');
    await keyRow.getByRole('button', { name: 'Rotate' }).click();
    await dialog.getByRole('button', { name: 'Rotate' }).click();
    await page.locator('#new-key').waitFor();
    const rotated = await page.locator('#new-key').inputValue();
    check(rotated.startsWith('ale-') && rotated !== key, 'rotating shows a new key');
    await refusedWith(ask(key, 'gpt-4o-mini'), 401);
    check(true, 'the key before rotation is refused: 401');
    await page.getByRole('button', { name: 'Done, hide it' }).click();
    await keyRow.getByRole('button', { name: 'Revoke' }).click();
    await dialog.getByRole('button', { name: 'Cancel' }).click();
    await dialog.waitFor({ state: 'hidden' });
    check(await keyRow.getByText('Active').isVisible(), 'cancelling the confirmation keeps the key');
    await keyRow.getByRole('button', { name: 'Revoke' }).click();
    await dialog.getByRole('button', { name: 'Revoke' }).click();
    await keyRow.getByText('Revoked').waitFor();
    await refusedWith(ask(rotated, 'gpt-4o-mini'), 401);
    check(true, 'the revoked key is refused: 401');
    await shot('keys');

    // Keyboard: the nav is reachable with Tab, and focus is visible.
    await page.keyboard.press('Tab');
    check(await page.evaluate(() => document.activeElement && document.activeElement.matches(':focus-visible')), 'Tab focuses a control, visibly');

    // Every page at a laptop's and a phone's width, with the seeded data (long labels and
    // ids, many models, 50 usage rows, x402 columns).
    const longRoute = 'route:customer-support-escalations-eu-west-premium-tier';
    const from = new Date(Date.now() - 20 * 86400_000).toISOString().slice(0, 10);
    for (const [name, hash, heading] of [
      ['keys', '#/keys', 'Keys'],
      ['routes', '#/routes', 'Routes'],
      ['route-new', '#/routes/new', 'Create route'],
      ['route', '#/routes/' + longRoute, 'Customer support escalations (EU west, premium tier)'],
      ['usage', '#/usage?' + new URLSearchParams({ since: from, by: 'day,account,key,model,route' }), 'Usage'],
      ['usage-by-key', '#/usage?' + new URLSearchParams({ since: from, by: 'day,account,key,model' }), 'Usage'],
      ['catalog', '#/catalog', 'Catalog'],
      ['accounts', '#/accounts', 'Accounts'],
      ['not-found', '#/no-such-page', 'Page not found'],
    ]) {
      const h1 = await open(hash);
      want(h1.startsWith(heading), hash + ' opens ' + heading + ' (it shows "' + h1 + '")');
      await fits(name);
    }
    // The usage page has the x402 columns and more than 20 rows.
    await open('#/usage?' + new URLSearchParams({ since: from, by: 'day,account,key,model,route' }));
    const heads = await page.locator('thead th').allTextContents();
    check(['Paid (x402)', 'Pending (x402)', 'Unpaid (x402)'].every((c) => heads.some((x) => x.replace(/\s+/g, ' ').includes(c))) &&
      (await page.locator('tbody tr').count()) > 20, 'the usage page shows 20+ rows and the x402 columns');
    // The limits dialog with every model, on a phone.
    await open('#/keys');
    await page.setViewportSize(PHONE);
    await page.locator('tr', { hasText: 'Customer support bot' }).getByRole('button', { name: 'Limits' }).click();
    await dialog.waitFor();
    const box = await dialog.boundingBox();
    want(box.x >= 0 && box.x + box.width <= PHONE.width && (await misfits(page)).length === 0, 'the limits dialog fits 390 px: ' + JSON.stringify(box));
    await shot('keys-limits-390', false); // the window as it is: the dialog over the page
    await dialog.getByRole('button', { name: 'Cancel' }).click();
    await page.setViewportSize(WIDE);

    // Hash routing: a route's page by its id (as typed or URL-encoded); an unknown page or
    // route says so rather than showing Keys.
    for (const [hash, heading] of [
      ['#/routes/route:console-route-1', 'Console Route #1'],
      ['#/routes/route%3Aconsole-route-1?metric=cost', 'Console Route #1'],
      ['#/route/route:console-route-1', 'Console Route #1'],
      ['#/routes/route:no-such-route', 'Route not found'],
      ['#/keys/whatever', 'Page not found'],
    ]) {
      const h1 = await open(hash);
      want(h1.startsWith(heading), hash + ' opens ' + heading + ' (it shows "' + h1 + '")');
    }
    await open('#/routes');

    // Sign out: back to the sign-in page, and the API refuses the old session.
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.waitForURL(/\/console\/signin$/);
    const after401 = await page.evaluate(async () => (await fetch('/admin/v1/keys')).status);
    check(after401 === 401, 'after sign-out the admin API refuses the browser: ' + after401);

    await Promise.all(pending);
    const holding = bodies.filter((b) => b.body.includes(key));
    check(holding.length === 1 && holding[0].url.endsWith('/admin/v1/keys'),
      'the created key appears in exactly one response body the browser received (' + holding.map((b) => b.url).join(', ') + ') of ' + bodies.length);
    check(errors.length === 0, 'no script errors or CSP violations in the page' + (errors.length ? ': ' + errors.join('; ') : ''));
    check(problems.length === 0, 'no layout, routing or catalog problems' + (problems.length ? ':\n  ' + problems.join('\n  ') : ''));
    log('PASS');
  }
} catch (e) {
  console.error('console.mjs: FAIL:', e && e.stack ? e.stack : e);
  exitCode = 1;
} finally {
  await browser.close();
}
process.exit(exitCode);
