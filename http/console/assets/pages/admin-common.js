// What the webhooks, API keys, gateways and operators pages share: modal dialogs
// (a secret shown once, a confirmation, a small form), the rendering of
// an API refusal in a form, and tables that stack into cards on a phone.
// Each dialog is a native <dialog> opened with showModal(), so focus stays
// inside it, Escape closes it and focus returns to the control that
// opened it; each removes itself from the document when it closes.
import { h } from '/console/app.js';

let dialogs = 0;

function openDialog(dialog) {
  const opener = document.activeElement;
  document.body.append(dialog);
  dialog.showModal();
  return new Promise((resolve) => {
    dialog.addEventListener('close', () => {
      dialog.remove();
      if (opener && opener.isConnected && typeof opener.focus === 'function') opener.focus();
      resolve(dialog.returnValue);
    }, { once: true });
  });
}

// secretDialog shows a secret (an API key's token, a webhook's signing
// secret) with a copy button. The secret exists only in this dialog: when
// it closes, the text is cleared and the element removed, and nothing
// else on the page keeps it, so it is never shown again.
export function secretDialog({ title, intro, label, secret }) {
  const id = 'dlg' + (++dialogs);
  const field = h('textarea', { id: id + '-secret', class: 'secret-value mono', readonly: true, rows: 3,
    spellcheck: 'false', autocomplete: 'off', 'aria-describedby': id + '-intro' });
  field.value = secret;
  const status = h('span', { class: 'copy-status', role: 'status' });
  const copy = h('button', { type: 'button', class: 'copy', on: { click: async () => {
    try {
      if (navigator.clipboard && window.isSecureContext) {
        await navigator.clipboard.writeText(field.value);
      } else {
        field.select();
        if (!document.execCommand('copy')) throw new Error('copy refused');
      }
      status.textContent = 'Copied.';
    } catch (e) {
      field.focus();
      field.select();
      status.textContent = 'Could not copy: the text is selected, copy it with your keyboard.';
    }
  } } }, 'Copy');
  const done = h('button', { type: 'button', class: 'primary', on: { click: () => dialog.close('done') } }, 'Done');
  const dialog = h('dialog', { class: 'secret-dialog', 'aria-labelledby': id + '-title' },
    h('h2', { id: id + '-title' }, title),
    h('p', { id: id + '-intro' }, intro),
    h('p', { class: 'once' }, 'It is shown this once: it cannot be shown again after you close this dialog.'),
    h('label', { for: id + '-secret' }, label),
    field,
    h('div', { class: 'dialog-actions' }, copy, status, done));
  dialog.addEventListener('close', () => { field.value = ''; }, { once: true });
  const closed = openDialog(dialog);
  copy.focus();
  return closed;
}

// confirmDialog asks before an action that cannot be undone; it resolves
// true when the person confirms.
export async function confirmDialog({ title, message, confirm, danger }) {
  const id = 'dlg' + (++dialogs);
  const dialog = h('dialog', { class: 'confirm-dialog', 'aria-labelledby': id + '-title', 'aria-describedby': id + '-msg' },
    h('h2', { id: id + '-title' }, title),
    h('p', { id: id + '-msg' }, message),
    h('form', { method: 'dialog', class: 'dialog-actions' },
      h('button', { value: 'cancel', type: 'submit' }, 'Cancel'),
      h('button', { value: 'confirm', type: 'submit', class: danger ? 'danger' : 'primary' }, confirm)));
  return (await openDialog(dialog)) === 'confirm';
}

// formDialog shows fields in a form; submit(form) runs on submission and
// may throw (an ApiError): its message is shown in the dialog, which stays
// open. It resolves with what submit returned, or null when cancelled.
export function formDialog({ title, intro, fields, submitLabel, submit }) {
  const id = 'dlg' + (++dialogs);
  const problem = h('div', { class: 'dialog-problem' });
  let result = null;
  const form = h('form', { class: 'dialog-form', on: { submit: async (ev) => {
    ev.preventDefault();
    problem.replaceChildren();
    const button = form.querySelector('button.primary');
    button.disabled = true;
    try {
      result = await submit(form);
      dialog.close('done');
    } catch (e) {
      problem.replaceChildren(h('div', { class: 'error', role: 'alert' },
        h('strong', {}, e.code || 'error'), ': ', e.message || String(e)));
    } finally {
      button.disabled = false;
    }
  } } },
  fields,
  problem,
  h('div', { class: 'dialog-actions' },
    h('button', { type: 'button', on: { click: () => dialog.close('cancel') } }, 'Cancel'),
    h('button', { type: 'submit', class: 'primary' }, submitLabel)));
  const dialog = h('dialog', { class: 'form-dialog', 'aria-labelledby': id + '-title' },
    h('h2', { id: id + '-title' }, title),
    intro ? h('p', {}, intro) : null,
    form);
  return openDialog(dialog).then(() => result);
}

// apiProblem renders an API refusal in a form: its code, message and the
// rule it names (reason, field), for a role="alert" box.
export function apiProblem(e) {
  const body = (e.body && e.body.error) || {};
  const extra = [body.reason && 'reason: ' + body.reason, body.field && 'field: ' + body.field].filter(Boolean);
  return h('div', { class: 'error', role: 'alert' },
    h('strong', {}, e.code || 'error'), ': ', e.message || String(e),
    extra.length ? ' (' + extra.join(', ') + ')' : '');
}

// stacked marks a table whose rows become cards on a narrow window: each
// cell is labelled (data-label, shown by the style sheet) with its
// column's header. It returns the table.
export function stacked(table) {
  table.classList.add('stack');
  const heads = [...table.querySelectorAll('thead th')].map((th) => th.textContent);
  for (const tr of table.querySelectorAll('tbody tr')) {
    [...tr.children].forEach((cell, i) => { if (heads[i]) cell.setAttribute('data-label', heads[i]); });
  }
  return table;
}
