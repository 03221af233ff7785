// Sign-in: the admin token goes once to POST /console/api/session, which answers with an
// HttpOnly session cookie; the token is not kept anywhere in the page.
'use strict';
(function () {
  const form = document.getElementById('signin');
  const input = document.getElementById('token');
  const error = document.getElementById('error');

  async function call(method, body) {
    const r = await fetch('/console/api/session', {
      method, credentials: 'same-origin', cache: 'no-store',
      headers: body === undefined ? { Accept: 'application/json' } : { Accept: 'application/json', 'Content-Type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    let data = null;
    try { data = await r.json(); } catch (e) { /* not JSON */ }
    return { status: r.status, data };
  }

  call('GET').then(({ data }) => {
    if (data && data.signed_in) location.replace('/console/');
  }).catch(() => {});

  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    error.textContent = '';
    const token = input.value.trim();
    if (!token) {
      error.textContent = 'Enter the admin token.';
      input.focus();
      return;
    }
    const button = form.querySelector('button');
    button.disabled = true;
    try {
      const { status, data } = await call('POST', { token });
      input.value = '';
      if (status === 200 && data && data.signed_in) {
        location.replace('/console/');
        return;
      }
      error.textContent = (data && data.error && data.error.message) || ('Sign-in failed (HTTP ' + status + ').');
      input.focus();
    } catch (e) {
      error.textContent = 'The gateway did not answer: ' + e.message;
    } finally {
      button.disabled = false;
    }
  });
})();
