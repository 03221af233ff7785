// Tollway console: the pages behind /console/. Plain JS, no build step, nothing from a CDN.
// Everything is read and written through the admin API the CLI uses; the CSP forbids inline
// scripts and style attributes, so markup is built with DOM calls and styled through classes.
// Money stays the server's exact decimal strings: the console never adds amounts in floats.
'use strict';
(function () {
  const main = document.getElementById('main');
  const flashBox = document.getElementById('flash');
  const session = { tokenRequired: false, csrf: '' };

  // ---------- DOM helpers ----------

  // h builds an element: attrs are properties/attributes (on* are listeners), children are
  // nodes or strings (always text, never parsed as HTML).
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else if (k === 'class') el.className = v;
      else if (k === 'dataset') Object.assign(el.dataset, v);
      else if (k in el && typeof v !== 'string') el[k] = v;
      else el.setAttribute(k, v === true ? '' : v);
    }
    append(el, children);
    return el;
  }
  function append(el, children) {
    for (const c of children.flat(Infinity)) {
      if (c === undefined || c === null || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }
  const SVG = 'http://www.w3.org/2000/svg';
  function s(tag, attrs, ...children) {
    const el = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, v);
    for (const c of children) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return el;
  }
  let uid = 0;
  const nextId = (p) => p + '-' + (++uid);

  function field(label, input, hint) {
    if (!input.id) input.id = nextId('f');
    const hintEl = hint ? h('p', { class: 'hint', id: input.id + '-hint' }, hint) : null;
    if (hintEl) input.setAttribute('aria-describedby', hintEl.id);
    return h('div', { class: 'field' }, h('label', { for: input.id }, label), input, hintEl);
  }

  function table(caption, head, rows, foot) {
    const t = h('table', {},
      caption ? h('caption', {}, caption) : null,
      h('thead', {}, h('tr', {}, head.map((c) => h('th', { scope: 'col', class: c.num ? 'num' : '' }, c.label || c)))),
      h('tbody', {}, rows.length ? rows : h('tr', {}, h('td', { colSpan: head.length, class: 'muted' }, 'Nothing yet.'))),
      foot ? h('tfoot', {}, foot) : null);
    return h('div', { class: 'table-wrap', tabIndex: 0, role: 'region', 'aria-label': caption || 'table' }, t);
  }
  const td = (v, cls) => h('td', { class: cls || '' }, v);
  const num = (v) => td(v === undefined || v === null ? '—' : Number(v).toLocaleString('en-US'), 'num');
  const money = (v) => td(usd(v), 'num');
  function usd(v) {
    if (v === undefined || v === null || v === '') return '—';
    return (String(v).startsWith('-') ? '-$' + String(v).slice(1) : '$' + v);
  }
  // when shows a time as its UTC date and time of day, each unbroken, so that a narrow column
  // wraps it to two lines at most ("2026-11-28" over "07:41 UTC").
  function when(iso) {
    if (!iso) return '—';
    const d = new Date(iso);
    if (isNaN(d)) return iso;
    const t = d.toISOString();
    return h('span', { class: 'when' }, h('span', {}, t.slice(0, 10)), ' ', h('span', {}, t.slice(11, 16) + ' UTC'));
  }
  function badge(text, kind) { return h('span', { class: 'badge ' + kind }, text); }
  const healthBadge = (v) => badge(v, v === 'healthy' ? 'ok' : v === 'down' || v === 'unhealthy' ? 'bad' : v === 'degraded' ? 'warn' : 'neutral');
  const statusBadge = (v) => badge(v === 'paused' ? 'Paused' : 'Active', v === 'paused' ? 'warn' : 'ok');

  // ---------- flash messages ----------

  function flash(message, kind) {
    flashBox.replaceChildren(h('div', { class: 'flash ' + (kind || 'ok'), role: kind === 'error' ? 'alert' : 'status' },
      message, ' ', h('button', { type: 'button', class: 'small secondary', onclick: () => flashBox.replaceChildren() }, 'Dismiss')));
  }
  const flashError = (e) => flash(e.message || String(e), 'error');

  // ---------- the admin API ----------

  class APIError extends Error {
    constructor(status, code, message) { super(message); this.status = status; this.code = code; }
  }

  // api calls the admin API with the session cookie; writes carry the CSRF token and the JSON
  // content type the guard requires. Errors carry the API's own message.
  async function api(method, path, body) {
    const headers = { Accept: 'application/json' };
    const write = method !== 'GET';
    if (write) {
      headers['Content-Type'] = 'application/json';
      if (session.csrf) headers['X-Tollway-Csrf'] = session.csrf;
    }
    let r;
    try {
      r = await fetch(path, { method, headers, credentials: 'same-origin', cache: 'no-store',
        body: write ? JSON.stringify(body === undefined ? {} : body) : undefined });
    } catch (e) {
      throw new APIError(0, 'unreachable', 'The gateway did not answer (' + e.message + '). Is it running?');
    }
    let data = null;
    try { data = await r.json(); } catch (e) { /* not JSON */ }
    if (r.ok) return data;
    const err = data && data.error;
    if (r.status === 401 && session.tokenRequired && err && err.code === 'invalid_admin_token') {
      location.replace('/console/signin'); // the session ended (idle, expired, gateway restarted)
    }
    throw new APIError(r.status, err ? err.code : 'http_' + r.status,
      err && err.message ? err.message : method + ' ' + path + ' failed with HTTP ' + r.status);
  }
  const enc = encodeURIComponent;
  function query(params) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, v);
    const str = q.toString();
    return str ? '?' + str : '';
  }
  const monthStart = () => new Date().toISOString().slice(0, 8) + '01';

  // ---------- the dialog ----------

  const dialog = document.getElementById('dialog');
  const dialogForm = document.getElementById('dialog-form');
  const dialogTitle = document.getElementById('dialog-title');
  const dialogBody = document.getElementById('dialog-body');
  const dialogOK = document.getElementById('dialog-ok');
  let dialogAction = null;
  let dialogDone = null;
  let dialogReturnFocus = null;

  // openDialog shows a modal (the browser keeps focus inside it); action runs on OK and may
  // throw: its message shows in the dialog, which stays open for a correction.
  function openDialog(title, body, okLabel, action, danger) {
    dialogReturnFocus = document.activeElement;
    dialogTitle.textContent = title;
    const err = h('p', { class: 'error', role: 'alert' });
    dialogBody.replaceChildren(...[].concat(body), err);
    dialogOK.textContent = okLabel;
    dialogOK.className = danger ? 'danger' : '';
    dialogOK.disabled = false;
    dialogAction = async () => {
      err.textContent = '';
      try { await action(); return true; } catch (e) { err.textContent = e.message; return false; }
    };
    return new Promise((resolve) => {
      dialogDone = resolve;
      dialog.showModal();
      const first = dialogBody.querySelector('input, select');
      (first || dialogOK).focus();
    });
  }
  dialogForm.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    if (ev.submitter && ev.submitter.value === 'cancel') { closeDialog(false); return; }
    dialogOK.disabled = true;
    const ok = await dialogAction();
    dialogOK.disabled = false;
    if (ok) closeDialog(true);
  });
  dialog.addEventListener('cancel', (ev) => { ev.preventDefault(); closeDialog(false); });
  function closeDialog(result) {
    if (dialog.open) dialog.close();
    const done = dialogDone;
    dialogDone = null;
    if (dialogReturnFocus && document.contains(dialogReturnFocus)) dialogReturnFocus.focus();
    if (done) done(result);
  }

  // ---------- choosing models ----------

  // catalogIDs lists what a key or route can name: the public catalog's models (else the
  // store's, when the public listener cannot be read) and, for keys, the routes.
  async function catalogIDs() {
    try {
      const c = await api('GET', '/admin/v1/catalog');
      return (c.data || []).map((m) => m.id);
    } catch (e) {
      const hl = await api('GET', '/admin/v1/health');
      return (hl.models || []).map((m) => m.id);
    }
  }

  // modelChecks: a fieldset of checkboxes, one per id; value() returns the checked ones.
  function modelChecks(legend, ids, checked, hint) {
    const set = new Set(checked || []);
    const all = [...ids, ...[...set].filter((x) => !ids.includes(x))];
    const boxes = all.map((id) => h('input', { type: 'checkbox', value: id, checked: set.has(id), id: nextId('m') }));
    const fs = h('fieldset', { class: 'span-all' }, h('legend', {}, legend),
      h('div', { class: 'checks' }, boxes.map((b) => h('label', { for: b.id }, b, b.value))),
      all.length ? null : h('p', { class: 'muted' }, 'The catalog has no models.'),
      hint ? h('p', { class: 'hint' }, hint) : null);
    fs.value = () => boxes.filter((b) => b.checked).map((b) => b.value);
    return fs;
  }

  // ---------- pages ----------

  const pages = {};

  // The secret of a key just created or rotated: held only until it is dismissed or the page
  // changes, never stored.
  let revealed = null;

  pages.keys = async function () {
    const [keys, activity, accounts, ids, routes] = await Promise.all([
      api('GET', '/admin/v1/keys'), api('GET', '/admin/v1/usage/keys'), api('GET', '/admin/v1/accounts'),
      catalogIDs().catch(() => []), api('GET', '/admin/v1/routes').catch(() => ({ data: [] }))]);
    const act = new Map((activity.data || []).map((a) => [a.key_id, a]));
    const choices = [...ids, ...(routes.data || []).map((r) => r.id)];
    const out = [h('div', { class: 'header-row' }, h('h1', {}, 'Keys'))];

    if (revealed) {
      const k = revealed;
      const input = h('input', { type: 'text', readOnly: true, value: k.key, id: 'new-key', 'aria-label': 'The new key', spellcheck: false });
      out.push(h('section', { class: 'panel reveal', 'aria-labelledby': 'reveal-title' },
        h('h2', { id: 'reveal-title' }, 'Key ' + (k.name || k.id) + (k.rotated ? ' rotated' : ' created')),
        h('p', {}, 'Copy it now: this is the only time the console shows it. The gateway keeps only its hash.'),
        h('div', { class: 'keyline' }, input,
          h('button', { type: 'button', id: 'copy-key', onclick: () => copy(input) }, 'Copy'),
          h('button', { type: 'button', class: 'secondary', onclick: () => { revealed = null; render(); } }, 'Done, hide it'))));
    }

    // Create.
    const accSelect = h('select', { id: 'key-account', required: true },
      (accounts.data || []).map((a) => h('option', { value: a.id }, a.id)));
    const name = h('input', { id: 'key-name', type: 'text', maxLength: 128, autocomplete: 'off' });
    const limit = h('input', { id: 'key-limit', type: 'text', inputMode: 'decimal', autocomplete: 'off', placeholder: 'none' });
    const rpm = rateInput('key-rpm', null);
    const tpm = rateInput('key-tpm', null);
    const allow = modelChecks('Allowed models and routes', choices, [], 'None checked: every model.');
    const createForm = h('form', { class: 'grid', id: 'key-create', onsubmit: async (ev) => {
      ev.preventDefault();
      const body = { account: accSelect.value, name: name.value.trim() };
      if (limit.value.trim()) body.monthly_limit = limit.value.trim();
      const rates = rateLimits(rpm, tpm);
      if (rates.requests_per_minute !== null || rates.tokens_per_minute !== null) body.rate_limits = rates;
      const models = allow.value();
      if (models.length) body.models = models;
      await busy(ev.submitter, async () => {
        const k = await api('POST', '/admin/v1/keys', body);
        revealed = { key: k.key, name: k.name, id: k.id };
        flash('Key ' + (k.name || k.id) + ' created.');
        await render();
        const el = document.getElementById('new-key');
        if (el) { el.focus(); el.select(); }
      });
    } },
    field('Account', accSelect, accounts.data && accounts.data.length ? null : 'Create an account first (Accounts).'),
    field('Name', name, 'A label for lists, optional.'),
    field('Monthly limit (USD)', limit, 'Empty for no limit; e.g. 5 or 12.50.'),
    field('Requests per minute', rpm, "Empty: the gateway's default (keys.rate_limits), if any."),
    field('Tokens per minute', tpm, "Prompt and completion tokens. Empty: the gateway's default, if any."),
    allow,
    h('div', { class: 'span-all actions' }, h('button', { type: 'submit' }, 'Create key')));
    out.push(h('section', { class: 'panel', 'aria-labelledby': 'create-key' }, h('h2', { id: 'create-key' }, 'Create a key'), createForm));

    // List.
    const rows = (keys.data || []).map((k) => {
      const a = act.get(k.id) || {};
      const revokedKey = !!k.revoked_at;
      return h('tr', { dataset: { key: k.id } },
        td(k.name || '—', 'text'), td(k.account, 'id'), td(h('code', {}, k.prefix), 'nowrap'),
        money(k.monthly_limit === undefined ? null : k.monthly_limit), money(a.spent || '0'),
        td(k.models && k.models.length ? k.models.join(', ') : h('span', { class: 'muted' }, 'all'), 'list'),
        td(ratesText(k.rate_limits), 'nowrap'),
        td(when(k.created_at)),
        td(a.last_used_at ? (a.last_used_exact ? when(a.last_used_at) : a.last_used_at.slice(0, 10)) : 'never'),
        td(revokedKey ? badge('Revoked', 'bad') : badge('Active', 'ok')),
        td(revokedKey ? '' : h('div', { class: 'actions' },
          h('button', { type: 'button', class: 'small secondary', onclick: () => editLimits(k, choices) }, 'Limits'),
          h('button', { type: 'button', class: 'small secondary', onclick: () => rotateKey(k) }, 'Rotate'),
          h('button', { type: 'button', class: 'small danger', onclick: () => revokeKey(k) }, 'Revoke'))));
    });
    out.push(h('h2', {}, 'All keys'),
      table('Spent is this month (UTC), what the monthly limit counts.',
        ['Name', 'Account', 'Prefix', { label: 'Monthly limit', num: true }, { label: 'Spent this month', num: true },
          'Allowed models', 'Rates (rpm / tpm)', 'Created', 'Last used', 'Status', 'Actions'], rows));
    return out;
  };

  // ratesText is a key's own rates, "default" for one it leaves to the gateway's configuration.
  function ratesText(r, unset) {
    const one = (v) => (v == null ? (unset || 'default') : String(v));
    return one((r || {}).requests_per_minute) + ' / ' + one((r || {}).tokens_per_minute);
  }

  async function copy(input) {
    try {
      await navigator.clipboard.writeText(input.value);
      flash('Key copied to the clipboard.');
    } catch (e) {
      input.focus();
      input.select();
      flash('Copying was refused by the browser: the key is selected, press Ctrl+C (or ⌘C).', 'error');
    }
  }

  // rateInput is a requests or tokens per minute field; value null: empty (shown as unset,
  // 'default' unless said).
  function rateInput(id, value, unset) {
    const attrs = { type: 'text', inputMode: 'numeric', value: value == null ? '' : String(value), autocomplete: 'off', placeholder: unset || 'default' };
    if (id) attrs.id = id;
    return h('input', attrs);
  }

  // rateLimits is the rate_limits of two rate fields: a whole number, or null when empty; any
  // other text is sent as it is, for the gateway to name the field and the fix.
  function rateLimits(rpm, tpm) {
    const one = (el) => {
      const v = el.value.trim();
      if (!v) return null;
      return /^[0-9]+$/.test(v) ? Number(v) : v;
    };
    return { requests_per_minute: one(rpm), tokens_per_minute: one(tpm) };
  }

  function editLimits(k, choices) {
    const limit = h('input', { type: 'text', inputMode: 'decimal', value: k.monthly_limit || '', autocomplete: 'off', placeholder: 'none' });
    const own = k.rate_limits || {};
    const rpm = rateInput('edit-rpm', own.requests_per_minute);
    const tpm = rateInput('edit-tpm', own.tokens_per_minute);
    const allow = modelChecks('Allowed models and routes', choices, k.models, 'None checked: every model.');
    return openDialog('Limits of ' + (k.name || k.id), [
      field('Monthly limit (USD)', limit, 'Empty for no limit. Counts from the first of the month, UTC.'),
      field('Requests per minute', rpm, "Empty: the gateway's default (keys.rate_limits), if any."),
      field('Tokens per minute', tpm, "Prompt and completion tokens. Empty: the gateway's default, if any."), allow,
    ], 'Save limits', async () => {
      const body = { monthly_limit: limit.value.trim() || null, models: allow.value(), rate_limits: rateLimits(rpm, tpm) };
      await api('PUT', '/admin/v1/keys/' + enc(k.id) + '/limits', body);
      flash('Limits of ' + (k.name || k.id) + ' saved.');
      await render();
    });
  }

  function rotateKey(k) {
    return openDialog('Rotate ' + (k.name || k.id) + '?',
      h('p', {}, 'A new secret replaces the current one, which stops working at once. Clients need the new key.'),
      'Rotate', async () => {
        const r = await api('POST', '/admin/v1/keys/' + enc(k.id) + '/rotate');
        revealed = { key: r.key, name: r.name, id: r.id, rotated: true };
        flash('Key ' + (k.name || k.id) + ' rotated.');
        await render();
      }, true);
  }

  function revokeKey(k) {
    return openDialog('Revoke ' + (k.name || k.id) + '?',
      h('p', {}, 'Requests with this key are refused from now on. This cannot be undone.'),
      'Revoke', async () => {
        await api('POST', '/admin/v1/keys/' + enc(k.id) + '/revoke');
        flash('Key ' + (k.name || k.id) + ' revoked.');
        await render();
      }, true);
  }

  // busy disables a button while work runs and shows the work's error in the flash area.
  async function busy(button, work) {
    if (button) button.disabled = true;
    try { await work(); } catch (e) { flashError(e); } finally { if (button && document.contains(button)) button.disabled = false; }
  }

  // ---------- routes ----------

  // slug mirrors xds/ir Slug: lowercase, runs of anything but a-z and 0-9 become one '-',
  // trimmed. The id the gateway answers with is the one that counts.
  // Go lowercases rune by rune (İ becomes i); JS's toLowerCase may give two characters for one
  // (İ becomes i + U+0307), so each character keeps the first of its lowercase.
  const slug = (name) => Array.from(name, (c) => Array.from(c.toLowerCase())[0]).join('')
    .replace(/[^a-z0-9]+/g, '-').replace(/^-+|-+$/g, '');
  // routeHash is a route's page: #/routes/route:<slug> (an id needs no other escaping).
  const routeHash = (id) => '#/routes/' + enc(id).replace(/%3A/gi, ':');
  const routeModels = (r) => r.rule === 'mode_mapping'
    ? ['fast', 'balanced', 'deep'].filter((m) => r.modes && r.modes[m]).map((m) => m + ': ' + r.modes[m]).join(', ')
    : (r.models || []).join(' → ');

  async function setRouteStatus(r, status) {
    await api('PUT', '/admin/v1/routes/' + enc(r.id) + '/status', { status });
    flash('Route ' + r.id + (status === 'paused' ? ' paused: requests to it are refused (409 route_paused).' : ' resumed.'));
  }
  function statusButton(r) {
    const paused = r.status === 'paused';
    return h('button', { type: 'button', class: 'small secondary', dataset: { route: r.id },
      onclick: (ev) => busy(ev.currentTarget, async () => { await setRouteStatus(r, paused ? 'active' : 'paused'); await render(); }) },
    paused ? 'Resume' : 'Pause');
  }

  pages.routes = async function () {
    const [routes, month] = await Promise.all([api('GET', '/admin/v1/routes'),
      api('GET', '/admin/v1/usage/grouped' + query({ by: 'route', since: monthStart() }))]);
    const used = new Map((month.rows || []).map((r) => [r.group.route, r]));
    const rows = (routes.data || []).map((r) => {
      const u = used.get(r.id) || { requests: 0, cost: '0' };
      return h('tr', { dataset: { route: r.id } },
        td(h('a', { href: routeHash(r.id) }, r.id), 'id'), td(r.name, 'text'),
        td(r.rule === 'mode_mapping' ? 'mode mapping' : 'priority fallback'), td(routeModels(r), 'list'),
        td(statusBadge(r.status)), td(ratesText(r.rate_limits, 'none'), 'nowrap'), td(healthBadge(r.health)), num(u.requests), money(u.cost),
        td(r.source === 'config' ? 'config file' : 'admin API'), td(statusButton(r)));
    });
    return [
      h('div', { class: 'header-row' }, h('h1', {}, 'Routes'), h('a', { class: 'button', href: '#/routes/new', id: 'new-route' }, 'Create route')),
      h('p', { class: 'muted' }, 'Clients send model "route:<name>"; the gateway picks the model. Routes from the config file change there (then tollway reload).'),
      table('Requests and cost are this month (UTC), from the usage records.',
        ['Id', 'Name', 'Rule', 'Models or modes', 'Status', 'Rates (rpm / tpm)', 'Health', { label: 'Requests', num: true }, { label: 'Cost', num: true }, 'Defined in', 'Actions'], rows),
    ];
  };

  pages['routes/new'] = async function () {
    const ids = await catalogIDs();
    const name = h('input', { type: 'text', id: 'route-name', required: true, maxLength: 200, autocomplete: 'off' });
    const preview = h('code', { id: 'route-id' }, 'route:…');
    const showID = () => { const sl = slug(name.value); preview.textContent = sl ? 'route:' + sl : 'route:… (type a name with letters or digits)'; };
    name.addEventListener('input', showID);

    const ruleFallback = h('input', { type: 'radio', name: 'rule', value: 'priority_fallback', id: 'rule-fallback', checked: true });
    const ruleModes = h('input', { type: 'radio', name: 'rule', value: 'mode_mapping', id: 'rule-modes' });

    // Priority fallback: an ordered list the user builds from the catalog.
    const chosen = [];
    const order = h('ol', { class: 'order', id: 'route-order', 'aria-live': 'polite' });
    const pick = h('select', { id: 'route-pick' }, ids.map((id) => h('option', { value: id }, id)));
    function drawOrder() {
      order.replaceChildren(...chosen.map((id, i) => h('li', {}, h('span', {}, id), ' ',
        h('button', { type: 'button', class: 'small secondary', disabled: i === 0, 'aria-label': 'Move ' + id + ' up',
          onclick: () => { chosen.splice(i - 1, 0, chosen.splice(i, 1)[0]); drawOrder(); } }, '↑'), ' ',
        h('button', { type: 'button', class: 'small secondary', disabled: i === chosen.length - 1, 'aria-label': 'Move ' + id + ' down',
          onclick: () => { chosen.splice(i + 1, 0, chosen.splice(i, 1)[0]); drawOrder(); } }, '↓'), ' ',
        h('button', { type: 'button', class: 'small secondary', 'aria-label': 'Remove ' + id,
          onclick: () => { chosen.splice(i, 1); drawOrder(); } }, 'Remove'))));
      if (!chosen.length) order.append(h('li', { class: 'muted' }, 'No model yet: add one.'));
    }
    drawOrder();
    const fallbackBox = h('fieldset', { class: 'span-all', id: 'fallback-box' }, h('legend', {}, 'Models, first choice first'),
      h('p', { class: 'hint' }, 'Each request tries the first model; when it cannot answer, the next, in this order.'),
      order,
      h('div', { class: 'keyline' }, h('label', { for: 'route-pick', class: 'sr' }, 'Model to add'), pick,
        h('button', { type: 'button', id: 'route-add', class: 'secondary', onclick: () => {
          if (pick.value && !chosen.includes(pick.value)) { chosen.push(pick.value); drawOrder(); }
        } }, 'Add model')));

    // Mode mapping: one model per mode.
    const modeSelects = {};
    const modesBox = h('fieldset', { class: 'span-all', id: 'modes-box', hidden: true }, h('legend', {}, 'A model per mode'),
      h('p', { class: 'hint' }, 'Clients pick with route_mode (balanced when they send none).'),
      h('div', { class: 'grid' }, ['fast', 'balanced', 'deep'].map((m) => {
        modeSelects[m] = h('select', { id: 'mode-' + m }, h('option', { value: '' }, '—'), ids.map((id) => h('option', { value: id }, id)));
        return field(m, modeSelects[m]);
      })));
    const onRule = () => { fallbackBox.hidden = !ruleFallback.checked; modesBox.hidden = !ruleModes.checked; };
    ruleFallback.addEventListener('change', onRule);
    ruleModes.addEventListener('change', onRule);

    const status = h('select', { id: 'route-status' }, h('option', { value: 'active' }, 'Active'), h('option', { value: 'paused' }, 'Paused'));
    const rpm = rateInput('route-rpm', null, 'none');
    const tpm = rateInput('route-tpm', null, 'none');

    const form = h('form', { class: 'grid', id: 'route-create', onsubmit: async (ev) => {
      ev.preventDefault();
      const body = { name: name.value, rule: ruleModes.checked ? 'mode_mapping' : 'priority_fallback', status: status.value };
      if (ruleModes.checked) {
        body.modes = {};
        for (const m of Object.keys(modeSelects)) if (modeSelects[m].value) body.modes[m] = modeSelects[m].value;
      } else {
        body.models = chosen.slice();
      }
      const rates = rateLimits(rpm, tpm);
      if (rates.requests_per_minute !== null || rates.tokens_per_minute !== null) body.rate_limits = rates;
      await busy(ev.submitter, async () => {
        await api('POST', '/admin/v1/routes', body);
        flash('Route route:' + slug(name.value) + ' created. Clients send model "route:' + slug(name.value) + '".');
        navigate('#/routes');
      });
    } },
    h('div', { class: 'span-all' }, field('Name', name), h('p', { class: 'hint' }, 'Its id will be ', preview, '. The id comes from the name and cannot change later.')),
    h('fieldset', { class: 'span-all' }, h('legend', {}, 'Rule'), h('div', { class: 'radios' },
      h('label', { for: 'rule-fallback' }, ruleFallback, 'Priority fallback'),
      h('label', { for: 'rule-modes' }, ruleModes, 'Mode mapping (fast, balanced, deep)'))),
    fallbackBox, modesBox,
    field('Status', status, 'Active takes traffic at once.'),
    field('Requests per minute', rpm, 'Every request through the route, all keys together, on top of each key\'s own rates. Empty: no limit.'),
    field('Tokens per minute', tpm, 'Prompt and completion tokens through the route, all keys together. Empty: no limit.'),
    h('div', { class: 'span-all actions' }, h('button', { type: 'submit' }, 'Save route'), h('a', { class: 'button secondary', href: '#/routes' }, 'Cancel')));
    return [h('h1', {}, 'Create route'), h('section', { class: 'panel' }, form)];
  };

  pages.route = async function (id) {
    const params = new URLSearchParams(location.hash.split('?')[1] || '');
    const since = params.get('since') || daysAgo(29);
    const metric = params.get('metric') || 'requests';
    const [routes, byDayModel, byDay] = await Promise.all([api('GET', '/admin/v1/routes'),
      api('GET', '/admin/v1/usage/grouped' + query({ route: id, by: 'day,model', since })),
      api('GET', '/admin/v1/usage/grouped' + query({ route: id, by: 'day', since }))]);
    const r = (routes.data || []).find((x) => x.id === id);
    if (!r) {
      return [h('p', {}, h('a', { href: '#/routes' }, '← Routes')), h('h1', {}, 'Route not found'),
        h('p', { role: 'alert' }, 'There is no route ', h('code', {}, id), '. Its link may be mistyped, or the route was removed from the config file; Routes lists every route.')];
    }

    const sinceInput = h('input', { type: 'date', id: 'route-since', value: since });
    const metricSel = h('select', { id: 'route-metric' }, [['requests', 'Requests'], ['tokens', 'Tokens'], ['cost', 'Cost (USD)']]
      .map(([v, l]) => h('option', { value: v, selected: v === metric }, l)));
    const go = () => { location.hash = routeHash(id) + '?' + new URLSearchParams({ since: sinceInput.value, metric: metricSel.value }); };
    metricSel.addEventListener('change', go);

    const rows = byDayModel.rows.map((u) => h('tr', {}, td(u.group.day, 'nowrap'), td(u.group.model, 'id'), num(u.requests),
      num(u.prompt_tokens), num(u.completion_tokens), money(u.cost)));
    const t = byDayModel.totals;
    const foot = h('tr', {}, td('Total'), td(''), num(t.requests), num(t.prompt_tokens), num(t.completion_tokens), money(t.cost));
    const allTime = (r.usage || []).map((u) => h('tr', {}, td(u.model, 'id'), num(u.requests), num(u.prompt_tokens), num(u.completion_tokens), money(u.cost)));

    return [
      h('p', {}, h('a', { href: '#/routes' }, '← Routes')),
      h('div', { class: 'header-row' }, h('h1', {}, r.name + ' ', h('code', {}, r.id)), statusButton(r)),
      h('section', { class: 'panel' }, h('dl', { class: 'facts' },
        h('dt', {}, 'Rule'), h('dd', {}, r.rule === 'mode_mapping' ? 'mode mapping' : 'priority fallback'),
        h('dt', {}, 'Models'), h('dd', {}, routeModels(r)),
        h('dt', {}, 'Status'), h('dd', { id: 'route-status-value' }, statusBadge(r.status)),
        h('dt', {}, 'Rates (rpm / tpm)'), h('dd', { id: 'route-rates-value' }, ratesText(r.rate_limits, 'none'),
          r.source === 'config' ? '' : [' ', h('button', { type: 'button', class: 'small secondary', id: 'route-rates-edit', onclick: () => editRouteRates(r) }, 'Change rates')]),
        h('dt', {}, 'Health'), h('dd', {}, healthBadge(r.health)),
        h('dt', {}, 'Defined in'), h('dd', {}, r.source === 'config' ? 'the config file (change it there, then tollway reload)' : 'the admin API'),
        h('dt', {}, 'Created'), h('dd', {}, when(r.created_at)))),
      h('h2', {}, 'Usage over time'),
      h('form', { class: 'grid', onsubmit: (ev) => { ev.preventDefault(); go(); } },
        field('Since', sinceInput), field('Show', metricSel),
        h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'secondary' }, 'Update'))),
      h('section', { class: 'panel' }, chart(byDayModel.rows, byDay.rows, metric, since)),
      table('By day and model, from the usage records (kept ' + (byDayModel.records_kept_days ? byDayModel.records_kept_days + ' days' : 'for good') + ').',
        ['Day', 'Model', { label: 'Requests', num: true }, { label: 'Prompt tokens', num: true }, { label: 'Completion tokens', num: true }, { label: 'Cost', num: true }],
        rows, foot),
      h('h2', {}, 'Since the route was first used'),
      table('By model, kept for good.', ['Model', { label: 'Requests', num: true }, { label: 'Prompt tokens', num: true }, { label: 'Completion tokens', num: true }, { label: 'Cost', num: true }], allTime),
    ];
  };

  // editRouteRates changes a route's rates (PATCH /admin/v1/routes/{id}); empty: no limit.
  function editRouteRates(r) {
    const own = r.rate_limits || {};
    const rpm = rateInput('edit-route-rpm', own.requests_per_minute, 'none');
    const tpm = rateInput('edit-route-tpm', own.tokens_per_minute, 'none');
    return openDialog('Rates of ' + r.id, [
      field('Requests per minute', rpm, 'Every request through the route, all keys together. Empty: no limit.'),
      field('Tokens per minute', tpm, 'Prompt and completion tokens through the route. Empty: no limit.'),
    ], 'Save rates', async () => {
      await api('PATCH', '/admin/v1/routes/' + enc(r.id), { rate_limits: rateLimits(rpm, tpm) });
      flash('Rates of ' + r.id + ' saved.');
      await render();
    });
  }

  function daysAgo(n) {
    const d = new Date();
    d.setUTCDate(d.getUTCDate() - n);
    return d.toISOString().slice(0, 10);
  }

  // chart draws stacked bars per day (one colour per model) as SVG. Heights are drawn from
  // each group's own value; the totals shown come from the server (byDay), never summed here.
  // It is drawn at its box's width (again when that changes), so its text keeps its size from
  // a phone to a wide screen rather than being scaled with the picture.
  function chart(rows, dayRows, metric, since) {
    const box = h('div', { class: 'chart-box' });
    let drawnAt = 0;
    const draw = (width) => {
      const w = Math.max(Math.round(width), 300);
      if (Math.abs(w - drawnAt) < 2) return;
      drawnAt = w;
      box.replaceChildren(chartSVG(rows, dayRows, metric, since, w));
    };
    draw(main.clientWidth - 74); // main's and the panel's padding: the observer corrects it
    new ResizeObserver((entries) => { if (entries[0].contentRect.width > 0) draw(entries[0].contentRect.width); }).observe(box);
    const models = [...new Set(rows.map((u) => u.group.model))].sort();
    const legend = h('ul', { class: 'legend' }, models.map((m, i) => h('li', {}, h('span', { class: 'swatch c' + (i % 8), 'aria-hidden': 'true' }), m)));
    return [box, models.length ? legend : h('p', { class: 'muted' }, 'No requests through this route since ' + since + '.')];
  }

  function chartSVG(rows, dayRows, metric, since, W) {
    const value = (u) => metric === 'cost' ? Number(u.cost) : metric === 'tokens' ? u.prompt_tokens + u.completion_tokens : u.requests;
    const label = (u) => metric === 'cost' ? usd(u.cost) : metric === 'tokens' ? (u.prompt_tokens + u.completion_tokens).toLocaleString('en-US') : u.requests.toLocaleString('en-US');
    const days = [];
    const end = new Date().toISOString().slice(0, 10);
    for (let d = new Date(since + 'T00:00:00Z'); d.toISOString().slice(0, 10) <= end && days.length < 400; d.setUTCDate(d.getUTCDate() + 1)) {
      days.push(d.toISOString().slice(0, 10));
    }
    const models = [...new Set(rows.map((u) => u.group.model))].sort();
    const dayTotal = new Map(dayRows.map((u) => [u.group.day, u]));
    const max = Math.max(0, ...dayRows.map(value));
    const ticks = 4;
    const tickLabels = [];
    for (let i = 0; i <= ticks; i++) {
      const v = (max * i) / ticks;
      tickLabels.push(max === 0 ? (i === 0 ? '0' : '') : metric === 'cost' ? '$' + trimNum(v) : trimNum(v));
    }
    // The axis is as wide as its longest label (small costs have many digits).
    const L = 14 + 6.6 * Math.max(...tickLabels.map((x) => x.length)), H = 260, B = 28, T = 14, R = 10;
    const plotW = W - L - R, plotH = H - T - B;
    const bw = plotW / Math.max(days.length, 1);
    const svg = s('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'img', id: 'route-chart',
      'aria-label': metric + ' per day by model since ' + since + (max === 0 ? ': none yet' : '') });
    tickLabels.forEach((text, i) => {
      const y = T + plotH - (plotH * i) / ticks;
      svg.append(s('line', { x1: L, x2: W - R, y1: y, y2: y, class: 'gridline' }));
      svg.append(s('text', { x: L - 6, y: y + 4, 'text-anchor': 'end' }, text));
    });
    const idx = new Map(days.map((d, i) => [d, i]));
    const stackTop = new Map();
    for (const u of rows) {
      const i = idx.get(u.group.day);
      if (i === undefined || max === 0) continue;
      const hgt = (value(u) / max) * plotH;
      const base = stackTop.get(u.group.day) || 0;
      stackTop.set(u.group.day, base + hgt);
      const rect = s('rect', { x: L + i * bw + bw * 0.12, y: T + plotH - base - hgt, width: Math.max(bw * 0.76, 1), height: Math.max(hgt, 0.5),
        class: 'bar c' + (models.indexOf(u.group.model) % 8) });
      rect.append(s('title', {}, u.group.day + ' · ' + u.group.model + ': ' + label(u)));
      svg.append(rect);
    }
    // Day totals, left to right; one that would run into the last one shown is left out (the
    // table below has every number).
    let shownTo = -Infinity;
    for (const [i, u] of [...dayTotal].map(([d, u]) => [idx.get(d), u]).filter(([i]) => i !== undefined).sort((a, b) => a[0] - b[0])) {
      const text = label(u), wide = text.length * 6.2;
      // Totals near the edges end (or start) at their bar rather than run off the plot.
      const anchor = i > days.length * 0.85 ? 'end' : L + i * bw + bw / 2 - wide / 2 < L ? 'start' : 'middle';
      const x = anchor === 'end' ? L + (i + 1) * bw : anchor === 'start' ? L + i * bw : L + i * bw + bw / 2;
      const from = anchor === 'end' ? x - wide : anchor === 'start' ? x : x - wide / 2;
      if (from < shownTo + 4) continue;
      shownTo = from + wide;
      svg.append(s('text', { x, y: Math.max(T + plotH - (stackTop.get(u.group.day) || 0) - 3, T - 2),
        'text-anchor': anchor, class: 'total' }, text));
    }
    const step = Math.ceil(days.length / Math.max(1, Math.min(8, Math.floor(plotW / 50)))); // a day label ("11-28") every 50 px at least
    days.forEach((d, i) => { if (i % step === 0) svg.append(s('text', { x: L + i * bw + bw / 2, y: H - 8, 'text-anchor': 'middle' }, d.slice(5))); });
    return svg;
  }
  function trimNum(v) { return v >= 100 ? Math.round(v).toLocaleString('en-US') : String(Number(v.toPrecision(3))); }

  // ---------- usage ----------

  const DIMS = ['day', 'account', 'key', 'model', 'route'];

  pages.usage = async function () {
    const params = new URLSearchParams(location.hash.split('?')[1] || '');
    const f = { since: params.get('since') || monthStart(), until: params.get('until') || '', account: params.get('account') || '',
      key: params.get('key') || '', model: params.get('model') || '', route: params.get('route') || '',
      by: params.get('by') || 'day,account,key,model' };
    const [u, keys] = await Promise.all([api('GET', '/admin/v1/usage/grouped' + query(f)), api('GET', '/admin/v1/keys').catch(() => ({ data: [] }))]);
    const keyName = new Map((keys.data || []).map((k) => [k.id, k.name || k.prefix]));
    const inputs = {};
    for (const [k, type] of [['since', 'date'], ['until', 'date'], ['account', 'text'], ['key', 'text'], ['model', 'text'], ['route', 'text']]) {
      inputs[k] = h('input', { type, id: 'usage-' + k, value: f[k], autocomplete: 'off' });
    }
    const by = f.by.split(',');
    const dimBoxes = DIMS.map((d) => h('input', { type: 'checkbox', id: 'by-' + d, value: d, checked: by.includes(d) }));
    const form = h('form', { class: 'grid', id: 'usage-form', onsubmit: (ev) => {
      ev.preventDefault();
      const next = {};
      for (const k of Object.keys(inputs)) if (inputs[k].value.trim()) next[k] = inputs[k].value.trim();
      const dims = dimBoxes.filter((b) => b.checked).map((b) => b.value);
      next.by = dims.length ? dims.join(',') : 'day';
      location.hash = '#/usage?' + new URLSearchParams(next);
    } },
    field('Since', inputs.since, 'UTC, inclusive'), field('Until', inputs.until, 'UTC, inclusive; empty for today'),
    field('Account', inputs.account), field('Key id', inputs.key), field('Model', inputs.model), field('Route', inputs.route, 'e.g. route:support-bot'),
    h('fieldset', { class: 'span-all' }, h('legend', {}, 'Group by'), h('div', { class: 'checks' }, dimBoxes.map((b) => h('label', { for: b.id }, b, b.value)))),
    h('div', { class: 'span-all actions' }, h('button', { type: 'submit' }, 'Show'),
      h('a', { class: 'button secondary', id: 'usage-csv', href: '/admin/v1/usage/grouped' + query({ ...f, format: 'csv' }), download: '' }, 'Export CSV')));

    const dims = u.by;
    const cell = (d, v) => d === 'key' && v ? td([h('code', {}, v), keyName.has(v) ? h('span', { class: 'muted label' }, keyName.get(v)) : null], 'id')
      : td(v || (d === 'route' ? h('span', { class: 'muted' }, 'none') : ''), d === 'day' ? 'nowrap' : 'id');
    const t = u.totals;
    // x402: what payments settled, what is pending (still being settled) and unpaid (never
    // settled, served unpaid), each only when there is any (a gateway without x402 has none).
    const pay = [['paid', 'Paid (x402)'], ['pending', 'Pending (x402)'], ['unpaid', 'Unpaid (x402)']].filter(([k]) => t[k]);
    const payCells = (r, foot) => pay.map(([k]) => h('td', { class: 'num', id: foot ? 'usage-total-' + k : null }, r[k] ? usd(r[k]) : ''));
    const rows = u.rows.map((r) => h('tr', {}, dims.map((d) => cell(d, r.group[d])), num(r.requests), num(r.prompt_tokens),
      num(r.completion_tokens), num(r.cached_tokens), money(r.cost), payCells(r, false)));
    const foot = h('tr', { id: 'usage-total' }, dims.map((d, i) => td(i === 0 ? 'Total' : '')), num(t.requests), num(t.prompt_tokens),
      num(t.completion_tokens), num(t.cached_tokens), h('td', { class: 'num', id: 'usage-total-cost' }, usd(t.cost)), payCells(t, true));
    const source = u.source === 'aggregates'
      ? 'From the daily totals, kept for good: the same numbers as `tollway usage`.'
      : 'From the usage records (they alone know the route), kept ' + (u.records_kept_days ? u.records_kept_days + ' days' : 'for good') + '.';
    return [
      h('h1', {}, 'Usage'),
      h('section', { class: 'panel' }, form),
      table(source, [...dims.map((d) => d === 'key' ? 'Key' : d[0].toUpperCase() + d.slice(1)),
        { label: 'Requests', num: true }, { label: 'Prompt tokens', num: true }, { label: 'Completion tokens', num: true },
        { label: 'Cached tokens', num: true }, { label: 'Cost', num: true }, ...pay.map(([, label]) => ({ label, num: true }))], rows, foot),
    ];
  };

  // ---------- catalog ----------

  // The unit each price is per (docs/money.md#prices), in the order the catalog shows them.
  const PRICE_UNITS = [['prompt', 'token'], ['completion', 'token'], ['input_cache_read', 'token'], ['request', 'request'],
    ['image', 'image'], ['duration', 'second']];
  const priceLabel = (k) => k === 'input_cache_read' ? 'cache read' : k;
  const charged = (o) => PRICE_UNITS.filter(([k]) => o[k] && o[k] !== '0');
  const tiersOf = (p) => (Array.isArray(p) ? p : p ? [p] : []);

  function prices(p) {
    // Each price is one unbreakable "name $amount"; a narrow column wraps between prices.
    const show = (o) => {
      const list = charged(o).map(([k]) => h('span', { class: 'price' }, priceLabel(k) + ' $' + o[k]));
      return list.length ? list.flatMap((x, i) => (i ? [', ', x] : [x])) : ['free'];
    };
    if (Array.isArray(p)) {
      const n = (x) => Number(x).toLocaleString('en-US');
      return p.map((t) => h('div', {}, (t.range_end === null ? '≥ ' + n(t.range_start) : n(t.range_start) + '–' + n(t.range_end)) + ' prompt tokens: ', show(t)));
    }
    return p ? show(p) : '—';
  }

  // unitNote names the unit of every price the models shown charge: "per token (prompt,
  // completion), per request, per image and per second of video (duration)".
  function unitNote(models) {
    const fields = new Map(); // unit -> the price names charged per it
    for (const m of models) {
      for (const t of tiersOf(m.pricing)) {
        for (const [k, unit] of charged(t)) fields.set(unit, new Set([...(fields.get(unit) || []), k]));
      }
    }
    const named = { token: 'per token', request: 'per request', image: 'per image', second: 'per second of video' };
    const parts = Object.keys(named).filter((u) => fields.has(u)).map((u) => {
      const names = PRICE_UNITS.filter(([k, x]) => x === u && fields.get(u).has(k)).map(([k]) => priceLabel(k));
      return named[u] + (names.length === 1 && names[0] === u ? '' : ' (' + names.join(', ') + ')'); // "per request (request)" says nothing more
    });
    if (!parts.length) return 'Every model shown is free.';
    return 'Prices are USD ' + (parts.length > 1 ? parts.slice(0, -1).join(', ') + ' and ' + parts[parts.length - 1] : parts[0]) + '.';
  }

  pages.catalog = async function () {
    const [health, cat] = await Promise.all([api('GET', '/admin/v1/health'),
      api('GET', '/admin/v1/catalog').catch((e) => ({ error: e }))]);
    const out = [h('h1', {}, 'Catalog')];
    out.push(h('h2', {}, 'Models'));
    if (cat.error) {
      out.push(h('p', { class: 'error' }, cat.error.message));
    } else {
      const rows = (cat.data || []).map((m) => h('tr', { dataset: { model: m.id } },
        td(h('code', {}, m.id), 'id'), td(m.name || '', 'text'), td(m.is_ready ? badge('ready', 'ok') : badge('not ready', 'bad')),
        td(prices(m.pricing)), td(m.is_free ? 'yes' : 'no'), num(m.context_length), num(m.max_output_length),
        td((m.input_modalities || []).join(', ') + ' → ' + (m.output_modalities || []).join(', '))));
      out.push(table('As GET /v1/models shows them to clients. ' + unitNote(cat.data || []),
        ['Id', 'Name', 'Ready', 'Prices', 'Free', { label: 'Context', num: true }, { label: 'Max output', num: true }, 'Modalities'], rows));
    }
    out.push(h('h2', {}, 'Providers'));
    out.push(table('Health is Envoy\'s check of each provider (every 5 s).',
      ['Name', 'Type', 'Credential', 'Health', 'Models', 'Defined in'],
      (health.providers || []).map((p) => h('tr', { dataset: { provider: p.name } }, td(p.name, 'id'), td(p.type),
        td(p.credential ? badge('set', 'ok') : badge('missing', 'bad')), td(healthBadge(p.health)),
        td(p.models.join(', '), 'list'), td(p.source === 'config' ? 'config file' : 'admin API')))));
    return out;
  };

  // ---------- accounts ----------

  pages.accounts = async function () {
    const accounts = await api('GET', '/admin/v1/accounts');
    const id = h('input', { type: 'text', id: 'account-id', autocomplete: 'off', maxLength: 128 });
    const credits = h('input', { type: 'text', id: 'account-credits', inputMode: 'decimal', autocomplete: 'off', value: '0' });
    const form = h('form', { class: 'grid', id: 'account-create', onsubmit: async (ev) => {
      ev.preventDefault();
      await busy(ev.submitter, async () => {
        const a = await api('POST', '/admin/v1/accounts', { id: id.value.trim(), credits: credits.value.trim() || '0' });
        flash('Account ' + a.id + ' created with $' + a.balance + '.');
        await render();
      });
    } },
    field('Id', id, 'Letters, digits and _ . @ -'), field('Credits (USD)', credits, 'e.g. 25'),
    h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Create account')));
    const rows = (accounts.data || []).map((a) => h('tr', { dataset: { account: a.id } }, td(a.id, 'id'), money(a.balance), money(a.available),
      td(when(a.created_at)),
      td(h('button', { type: 'button', class: 'small', onclick: () => topUp(a) }, 'Add credits'))));
    return [
      h('h1', {}, 'Accounts'),
      table('Available is the balance less what requests in flight hold.', ['Account', { label: 'Balance', num: true }, { label: 'Available', num: true }, 'Created', 'Actions'], rows),
      h('section', { class: 'panel', 'aria-labelledby': 'create-account' }, h('h2', { id: 'create-account' }, 'Create an account'), form),
    ];
  };

  function topUp(a) {
    const amount = h('input', { type: 'text', inputMode: 'decimal', autocomplete: 'off', id: 'credit-amount' });
    return openDialog('Add credits to ' + a.id, [field('Amount (USD)', amount, 'More than 0, e.g. 10 or 2.50. Balance now: $' + a.balance + '.')],
      'Add credits', async () => {
        const r = await api('POST', '/admin/v1/accounts/' + enc(a.id) + '/credit', { amount: amount.value.trim() });
        flash('Added $' + amount.value.trim() + ' to ' + a.id + ': balance $' + r.balance + '.');
        await render();
      });
  }

  // ---------- router ----------

  pages.notFound = async function (path) {
    return [h('h1', {}, 'Page not found'),
      h('p', { role: 'alert' }, 'The console has no page ', h('code', {}, '#/' + path), '. Its pages:'),
      h('ul', {}, [...document.querySelectorAll('nav a[data-page]')].map((a) => h('li', {}, h('a', { href: a.getAttribute('href') }, a.textContent))))];
  };

  // The pages a hash names by itself (#/keys); #/routes/<route id> is a route's page (and
  // #/route/<route id>, its older address); anything else is not found.
  const NAMED = ['keys', 'routes', 'routes/new', 'usage', 'catalog', 'accounts'];
  function pageOf(hash) {
    const path = hash.replace(/^#\/?/, '').split('?')[0];
    if (path === '') return { page: 'keys' };
    if (NAMED.includes(path)) return { page: path };
    const m = /^routes?\/([^/]+)$/.exec(path);
    if (m) {
      try { return { page: 'route', arg: decodeURIComponent(m[1]) }; } catch (e) { /* a malformed %-escape: not found */ }
    }
    return { page: 'notFound', arg: path };
  }

  let renderSeq = 0;
  // render draws the page the hash names; a later navigation wins over a slower earlier one.
  async function render(focus) {
    const seq = ++renderSeq;
    const { page, arg } = pageOf(location.hash);
    const fn = pages[page];
    const navPage = page === 'route' || page === 'routes/new' ? 'routes' : page;
    for (const a of document.querySelectorAll('nav a[data-page]')) {
      if (a.dataset.page === navPage) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
    }
    if (page !== 'keys') revealed = null; // the secret goes when the page changes
    let nodes;
    try {
      nodes = await fn(arg);
    } catch (e) {
      nodes = [h('h1', {}, 'Could not load this page'), h('p', { class: 'error', role: 'alert' }, e.message),
        h('button', { type: 'button', onclick: () => render() }, 'Try again')];
    }
    if (seq !== renderSeq) return;
    main.replaceChildren(...[].concat(nodes).flat(Infinity));
    main.dataset.page = page;
    document.title = (main.querySelector('h1') ? main.querySelector('h1').textContent + ' · ' : '') + 'Tollway console';
    if (focus) main.focus();
  }

  // A page the user opens starts without the last page's message; one the console opens after
  // a change (navigate) keeps the message that says what changed.
  let keepFlash = false;
  function navigate(hash) { keepFlash = true; location.hash = hash; }
  window.addEventListener('hashchange', () => {
    if (!keepFlash) flashBox.replaceChildren();
    keepFlash = false;
    render(true);
  });

  document.getElementById('signout').addEventListener('click', async () => {
    try {
      await api('DELETE', '/console/api/session');
    } catch (e) { /* signed out anyway below */ }
    location.replace('/console/signin');
  });

  // Start: find out whether a sign-in is needed and get the session's CSRF token.
  (async function start() {
    let st;
    try {
      const r = await fetch('/console/api/session', { credentials: 'same-origin', cache: 'no-store', headers: { Accept: 'application/json' } });
      st = await r.json();
    } catch (e) {
      main.replaceChildren(h('p', { class: 'error' }, 'The gateway did not answer: ' + e.message));
      return;
    }
    session.tokenRequired = !!st.token_required;
    if (st.token_required && !st.signed_in) { location.replace('/console/signin'); return; }
    session.csrf = st.csrf_token || '';
    document.getElementById('signout').hidden = !st.token_required;
    document.getElementById('mode').textContent = st.token_required
      ? 'Signed in with the admin token; the session ends after an hour unused.'
      : 'This gateway has no admin token: anyone who can reach its admin listener can use this console.';
    await render(false);
  })();
})();
