// What the console's browser tests check of a page's layout, measured in the page (console.mjs
// and usage-x402.mjs share it).

// misfits lists what does not fit the window the page is shown in: the page wider than the
// window (it must never scroll sideways), a table not in a box of its own that scrolls
// sideways, at 1000 px and wider a table cell past its box's right edge, a cell narrower than
// its content, a date ("2026-11-28" or "2026-11-28 07:41 UTC") on more than two lines. Each
// kind is one line: a count and the first three examples.
export const misfits = (page) => page.evaluate(() => {
  const out = [];
  const text = (el) => (el.textContent || '').trim().replace(/\s+/g, ' ');
  const short = (el) => '"' + text(el).slice(0, 40) + '"';
  const some = (list, what) => { if (list.length) out.push(list.length + ' ' + what + ': ' + list.slice(0, 3).join(', ') + (list.length > 3 ? ', …' : '')); };
  const wide = innerWidth >= 1000;
  const doc = document.scrollingElement;
  if (doc.scrollWidth > innerWidth) out.push('the page is ' + doc.scrollWidth + ' px wide in a ' + innerWidth + ' px window');
  for (const t of document.querySelectorAll('table')) {
    const name = 'table ' + short(t.querySelector('caption') || t.querySelector('th') || t);
    const wrap = t.parentElement;
    if (!wrap.classList.contains('table-wrap') || !['auto', 'scroll'].includes(getComputedStyle(wrap).overflowX)) {
      out.push(name + ' is not in a box of its own that scrolls sideways');
      continue;
    }
    const edge = wrap.getBoundingClientRect().right;
    const past = [], spill = [];
    for (const c of t.querySelectorAll('th, td')) {
      const r = c.getBoundingClientRect();
      if (wide && r.right > edge + 0.5) past.push(short(c) + ' ends at ' + Math.round(r.right));
      if (c.scrollWidth > c.clientWidth + 1) spill.push(short(c) + ' holds ' + c.scrollWidth + ' px in ' + c.clientWidth);
    }
    some(past, 'cells of ' + name + ' end past its edge at ' + Math.round(edge) + ' px');
    some(spill, 'cells of ' + name + ' are narrower than their content');
  }
  const tall = [];
  for (const c of document.querySelectorAll('td')) {
    if (!/^\d{4}-\d{2}-\d{2}( \d{2}:\d{2} UTC)?$/.test(text(c))) continue;
    const range = document.createRange();
    range.selectNodeContents(c);
    const tops = [...range.getClientRects()].filter((r) => r.width > 0).map((r) => r.top).sort((a, b) => a - b);
    const lines = tops.filter((top, i) => i === 0 || top > tops[i - 1] + 4).length;
    if (lines > 2) tall.push(short(c) + ' on ' + lines + ' lines');
  }
  some(tall, 'dates take more than two lines');
  return out;
});

// slack is, for each table, how much narrower than its box it could be (the box's width less
// the table's min-content width): what is left before a longer label or amount pushes it over.
export const slack = (page) => page.evaluate(() => [...document.querySelectorAll('.table-wrap > table')].map((t) => {
  const box = t.parentElement.clientWidth;
  const was = t.style.width;
  t.style.width = 'min-content';
  const min = t.getBoundingClientRect().width;
  t.style.width = was;
  return Math.round(box - min);
}));

// frame waits until the page has been laid out and painted (after a change of window size).
export const frame = (page) => page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
