#!/usr/bin/env node
// An independent verifier of a phonefleet receipts export and its signed
// checkpoints, written from the published format alone (the OpenAPI
// document's ReceiptChainEntry, ReceiptCheckpoint, ReceiptExportEnd and
// ReceiptSigningKey) with Node's standard library only. It shares no code
// with the service or `phonefleet receipts verify`.
//
//   node scripts/verify-receipts.mjs EXPORT.ndjson KEYS.json [HELD.json ...]
//
// EXPORT is the answer of GET /v1/receipts/export, KEYS the answer of GET
// /v1/receipts/signing-keys, each HELD a checkpoint kept apart (a webhook
// delivery body of receipt.checkpoint_signed, one checkpoint, or a page of
// GET /v1/receipts/checkpoints). It prints a JSON summary and exits 0, or
// prints what is wrong and exits 1.
import { createHash, createPublicKey, verify } from 'node:crypto';
import { readFileSync } from 'node:fs';

// RFC 8785: members sorted by UTF-16 code units (JavaScript's default
// sort), no white space, ECMAScript number and string forms (JSON.stringify).
function canonical(v) {
  if (v === null || typeof v !== 'object') return JSON.stringify(v);
  if (Array.isArray(v)) return '[' + v.map(canonical).join(',') + ']';
  return '{' + Object.keys(v).sort().map((k) => JSON.stringify(k) + ':' + canonical(v[k])).join(',') + '}';
}

function fail(msg) {
  console.log(JSON.stringify({ ok: false, error: msg }));
  process.exit(1);
}

const [exportFile, keysFile, ...heldFiles] = process.argv.slice(2);
if (!exportFile || !keysFile) fail('usage: verify-receipts.mjs EXPORT KEYS [HELD ...]');

const keys = new Map();
for (const k of JSON.parse(readFileSync(keysFile, 'utf8')).keys) {
  if (k.algorithm !== 'Ed25519') fail(`key ${k.keyId}: algorithm ${k.algorithm}`);
  keys.set(k.keyId, { ...k, key: createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: k.publicKey }, format: 'jwk' }) });
}

// Times are RFC 3339 in UTC with microseconds, one layout: compared as text.
function checkSignature(cp) {
  const k = keys.get(cp.keyId);
  if (!k) fail(`checkpoint of entry ${cp.entries}: unknown key ${cp.keyId}`);
  if (cp.signedAt < k.validFrom || (k.validUntil !== null && cp.signedAt > k.validUntil)) {
    fail(`checkpoint of entry ${cp.entries}: signed at ${cp.signedAt}, outside key ${cp.keyId}'s validity`);
  }
  const { signature, ...body } = cp;
  if (!verify(null, Buffer.from(canonical(body), 'utf8'), k.key, Buffer.from(signature, 'base64url'))) {
    fail(`checkpoint of entry ${cp.entries}: bad signature`);
  }
}

const hashes = []; // hashes[n-1] is entry n's hash
let org = null;
let prevHash = '0'.repeat(64);
let ended = null;
let signed = 0;
const lines = readFileSync(exportFile, 'utf8').split('\n').filter((l) => l !== '');
for (const [i, line] of lines.entries()) {
  const v = JSON.parse(line);
  if (ended) fail(`line ${i + 1}: after the end line`);
  if (canonical(v) !== line) fail(`line ${i + 1}: not canonical JSON`);
  if (v.end) {
    ended = v.end;
    continue;
  }
  if (v.checkpoint) {
    const cp = v.checkpoint;
    checkSignature(cp);
    if (cp.orgId !== org || cp.entries !== hashes.length || cp.headHash !== hashes[hashes.length - 1]) {
      fail(`line ${i + 1}: the checkpoint does not sign the entry before it`);
    }
    signed++;
    continue;
  }
  const { hash, ...body } = v;
  org ??= v.orgId;
  if (v.orgId !== org) fail(`line ${i + 1}: another organisation`);
  if (v.seq !== hashes.length + 1 || v.prevHash !== prevHash) fail(`line ${i + 1}: does not follow entry ${hashes.length}`);
  if (createHash('sha256').update(canonical(body), 'utf8').digest('hex') !== hash) fail(`line ${i + 1}: hash mismatch`);
  hashes.push(hash);
  prevHash = hash;
}
if (!ended) fail('no end line: the export was cut short');
if (ended.entries !== hashes.length || ended.headHash !== prevHash) fail('the end line does not match the chain');

let held = 0;
for (const f of heldFiles) {
  const doc = JSON.parse(readFileSync(f, 'utf8'));
  for (const cp of doc.checkpoints ?? [doc.data ?? doc]) {
    checkSignature(cp);
    if (org !== null && cp.orgId !== org) fail(`held checkpoint: organisation ${cp.orgId}`);
    if (cp.entries > hashes.length) fail(`cut: a held checkpoint counts ${cp.entries} entries, the export ${hashes.length}`);
    if (hashes[cp.entries - 1] !== cp.headHash) fail(`held checkpoint of entry ${cp.entries}: the export's entry hashes otherwise`);
    held++;
  }
}
console.log(JSON.stringify({ ok: true, orgId: org, entries: hashes.length, checkpoints: signed, held }));
