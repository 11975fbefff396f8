// carte's catalog schema in a strict validator: ajv 8 (draft 2020-12) with
// `strict: true` (unknown keywords and formats, union types, tuples and
// `required` without `properties` are all errors) compiles it, and the
// shipped catalogs are valid against it.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(process.env.CARTE_REPO ?? join(here, '../../..'));
const schemaPath = process.env.CARTE_SCHEMA ?? join(repo, 'catalogs/catalog.schema.json');
const require = createRequire(join(process.env.EDITORS_MODULES ?? join(here, 'node_modules'), 'index.js'));
const Ajv2020 = require('ajv/dist/2020').default;
const YAML = require('yaml');

// The one keyword outside the 2020-12 vocabulary that the schema carries:
// editors (VS Code, yaml-language-server) render it as Markdown. Strict mode
// rejects unknown keywords, so it is declared, as an annotation.
const EDITOR_KEYWORDS = ['markdownDescription'];

function compile() {
  const schema = JSON.parse(readFileSync(schemaPath, 'utf8'));
  // strict: true turns every strict option into an error: strictSchema
  // (unknown keywords and formats), strictNumbers, strictTypes (union types
  // other than nullable), strictTuples, strictRequired.
  const ajv = new Ajv2020({ strict: true, allErrors: true });
  for (const keyword of EDITOR_KEYWORDS) ajv.addKeyword({ keyword, schemaType: 'string' });
  return ajv.compile(schema);
}

// The catalogs in the repository, as YAML 1.2 reads them (what carte reads).
const catalogs = ['catalogs/reservo.yaml', 'examples/conformance/catalog.yaml'];

function load(relative) {
  const text = readFileSync(join(repo, relative), 'utf8');
  return YAML.parse(text, { version: '1.2', merge: false });
}

test('ajv compiles the schema in strict mode', () => {
  assert.equal(typeof compile(), 'function');
});

test('the shipped catalogs are valid', () => {
  const validate = compile();
  for (const relative of catalogs) {
    const valid = validate(load(relative));
    assert.ok(valid, `${relative}: ${JSON.stringify(validate.errors, null, 2)}`);
  }
});

test('a typo is invalid, with the key named', () => {
  const validate = compile();
  const catalog = { tools: [{ name: 'quote', descripton: 'x', run: { text: 'hi' } }] };
  assert.equal(validate(catalog), false);
  assert.ok(
    validate.errors.some((e) => e.keyword === 'additionalProperties' && e.params.additionalProperty === 'descripton'),
    JSON.stringify(validate.errors),
  );
});
