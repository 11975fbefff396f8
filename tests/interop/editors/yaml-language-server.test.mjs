// carte's catalog schema in yaml-language-server (what VS Code's YAML
// extension runs), spoken to over LSP stdio as an editor would. The schema
// is bound both ways a person binds it: `yaml.schemas` in the settings and
// the `# yaml-language-server: $schema=…` modeline. Completion must offer the
// keys a person types next, hovers must explain them, and a typo must be
// flagged. Each test runs against the 2.x line and the last 1.x.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, relative, resolve } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';

import { LspClient } from './lsp.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(process.env.CARTE_REPO ?? join(here, '../../..'));
// CARTE_SCHEMA tries another schema file (e.g. an older one, to see it fail).
const schemaPath = resolve(process.env.CARTE_SCHEMA ?? join(repo, 'catalogs/catalog.schema.json'));
// The installed packages live outside the source tree (run.sh puts them under target/).
const require = createRequire(join(process.env.EDITORS_MODULES ?? join(here, 'node_modules'), 'index.js'));
const servers = ['yaml-language-server', 'yaml-language-server-1'];

// As a VS Code user writes them in settings.json: the schema relative to the
// workspace root, and the files it applies to.
const schemaSetting = schemaPath.startsWith(repo) ? `./${relative(repo, schemaPath)}` : schemaPath;
const settings = {
  yaml: {
    schemas: { [schemaSetting]: ['editor-settings/*.yaml'] },
    validate: true,
    completion: true,
    hover: true,
    schemaStore: { enable: false },
  },
  http: {},
  '[yaml]': {},
  editor: { tabSize: 2, insertSpaces: true },
};

// Documents under editor-modeline/ name the schema themselves.
const modeline = `# yaml-language-server: $schema=${pathToFileURL(schemaPath).href}\n`;

// The position of the `|` in `marked`, and the text without it.
function cursor(marked) {
  const at = marked.indexOf('|');
  assert.ok(at >= 0, 'mark the cursor with |');
  const lines = marked.slice(0, at).split('\n');
  return {
    text: marked.slice(0, at) + marked.slice(at + 1),
    position: { line: lines.length - 1, character: lines.at(-1).length },
  };
}

function assertOffers(items, expected, where) {
  const labels = items.map((item) => item.label);
  const missing = expected.filter((label) => !labels.includes(label));
  assert.deepEqual(missing, [], `${where}: completion lacks ${missing.join(', ')}; it offered [${labels.join(', ')}]`);
}

for (const name of servers) {
  describe(name, () => {
    let client;
    let version = 0;

    before(async () => {
      const main = require.resolve(`${name}/bin/yaml-language-server`);
      client = new LspClient(process.execPath, [main, '--stdio'], { settings });
      await client.request('initialize', {
        processId: process.pid,
        rootUri: pathToFileURL(repo).href,
        workspaceFolders: [{ uri: pathToFileURL(repo).href, name: 'carte' }],
        capabilities: {
          workspace: { configuration: true, didChangeConfiguration: { dynamicRegistration: false } },
          textDocument: {
            completion: { completionItem: { snippetSupport: true, documentationFormat: ['markdown', 'plaintext'] } },
            hover: { contentFormat: ['markdown', 'plaintext'] },
            publishDiagnostics: {},
          },
        },
      });
      client.notify('initialized', {});
      client.notify('workspace/didChangeConfiguration', { settings });
    });

    after(async () => {
      await client?.close();
    });

    // Opens a document and waits for its first diagnostics: the server has
    // then read the schema the document is bound to.
    async function open(path, text) {
      const uri = pathToFileURL(join(repo, path)).href;
      const published = client.nextDiagnostics(uri);
      client.notify('textDocument/didOpen', { textDocument: { uri, languageId: 'yaml', version: ++version, text } });
      return { uri, diagnostics: await published };
    }

    async function complete(path, marked) {
      const { text, position } = cursor(marked);
      const { uri } = await open(path, text);
      const seen = client.telemetry.length;
      const result = await client.request('textDocument/completion', { textDocument: { uri }, position });
      // A completion that throws inside the server still answers, with the
      // items it had so far; the error only shows as telemetry.
      const errors = client.telemetry.slice(seen).filter((event) => /error/i.test(event?.name ?? ''));
      const first = String(errors[0]?.properties?.error ?? '').split('\n')[0];
      assert.equal(errors.length, 0, `completing ${path}, the server failed: ${first}`);
      return Array.isArray(result) ? result : (result?.items ?? []);
    }

    async function hover(path, marked) {
      const { text, position } = cursor(marked);
      const { uri } = await open(path, text);
      const result = await client.request('textDocument/hover', { textDocument: { uri }, position });
      return result?.contents?.value ?? JSON.stringify(result);
    }

    test('top-level keys are offered (schema from the settings)', async () => {
      const items = await complete('editor-settings/top.yaml', 'server:\n  name: bakery\n|\n');
      assertOffers(items, ['tools', 'prompts', 'resources', 'resourceTemplates', 'databases', 'data', 'include'], 'top level');
      const tools = items.find((item) => item.label === 'tools');
      assert.match(JSON.stringify(tools.documentation), /The tools, in the order `tools\/list` returns them/);
      // Choosing it writes a first tool with the keys it needs.
      assert.match(tools.insertText, /^tools:\n +- name: .*\n +run:/, tools.insertText);
    });

    test('top-level keys are offered in an empty file (schema from the modeline)', async () => {
      const items = await complete('editor-modeline/empty.yaml', `${modeline}|\n`);
      assertOffers(items, ['server', 'tools', 'prompts', 'resources', 'resourceTemplates', 'databases', 'data', 'include'], 'empty file');
    });

    test("a tool's keys are offered inside a tool item", async () => {
      const items = await complete('editor-settings/tool.yaml', 'tools:\n  - name: quote\n    |\n');
      assertOffers(items, ['title', 'description', 'inputSchema', 'outputSchema', 'annotations', 'run'], 'tool item');
    });

    test('a new tool item offers its keys after `- `', async () => {
      const items = await complete('editor-settings/new-tool.yaml', 'tools:\n  - |\n');
      assertOffers(items, ['name', 'description', 'inputSchema', 'run', 'tool'], 'new tool item');
    });

    test('the runners are offered inside `run`', async () => {
      const items = await complete('editor-settings/run.yaml', 'tools:\n  - name: quote\n    run:\n      |\n');
      assertOffers(items, ['sql', 'text', 'template', 'content', 'json', 'steps'], 'run');
    });

    test('the step kinds are offered inside `run.steps`', async () => {
      const items = await complete('editor-settings/steps.yaml', 'tools:\n  - name: quote\n    run:\n      steps:\n        - |\n');
      assertOffers(items, ['log', 'progress', 'sleep', 'elicit', 'sample'], 'steps');
    });

    test("a prompt's and a resource's keys are offered", async () => {
      const prompt = await complete('editor-settings/prompt.yaml', 'prompts:\n  - name: p\n    |\n');
      assertOffers(prompt, ['title', 'description', 'arguments', 'messages'], 'prompt');
      const resource = await complete('editor-settings/resource.yaml', 'resources:\n  - uri: bakery://menu\n    |\n');
      assertOffers(resource, ['name', 'mimeType', 'text', 'template', 'file'], 'resource');
    });

    test('enum values are offered: a message role and a log level', async () => {
      const roles = await complete('editor-settings/role.yaml', 'prompts:\n  - name: p\n    messages:\n      - role: |\n');
      assertOffers(roles, ['user', 'assistant'], 'role');
      const levels = await complete(
        'editor-settings/level.yaml',
        'tools:\n  - name: t\n    run:\n      steps:\n        - log:\n            level: |\n',
      );
      assertOffers(levels, ['debug', 'info', 'notice', 'warning', 'error', 'critical', 'alert', 'emergency'], 'log level');
    });

    test('hovering a key shows its own description, as Markdown', async () => {
      const text = await hover('editor-settings/hover-text.yaml', 'tools:\n  - name: quote\n    run:\n      te|xt: hi\n');
      assert.match(text, /^#### run\n/, 'the heading names the block the key is in');
      assert.match(text, /Inline minijinja template of the result text/);
      // An optional block: the key's description, not its type's ("The `sql` effect.").
      const sql = await hover(
        'editor-settings/hover-sql.yaml',
        'tools:\n  - name: quote\n    run:\n      s|ql: { database: shop, statement: SELECT 1 }\n',
      );
      assert.match(sql, /Runs one SQL statement on a `databases` entry/, 'code in backticks is Markdown, not escaped');
      const server = await hover('editor-settings/hover-server.yaml', 'se|rver:\n  name: bakery\n');
      assert.match(server, /Who the server is/);
    });

    test('an unknown key is flagged where it is', async () => {
      const { diagnostics } = await open(
        'editor-settings/typo.yaml',
        'tools:\n  - name: quote\n    descripton: x\n    run:\n      text: hi\n',
      );
      assert.equal(diagnostics.length, 1, JSON.stringify(diagnostics));
      assert.match(diagnostics[0].message, /descripton/);
      assert.equal(diagnostics[0].range.start.line, 2, JSON.stringify(diagnostics[0]));
    });

    test('a wrong type names what was expected in a person\'s words', async () => {
      const { diagnostics } = await open('editor-settings/type.yaml', 'server: bakery\ntools:\n  - name: quote\n    run:\n      sql: SELECT 1\n');
      const messages = diagnostics.map((d) => `${d.range.start.line}: ${d.message}`);
      assert.equal(messages.length, 2, JSON.stringify(messages));
      assert.match(messages[0], /^0: .*"server/, JSON.stringify(messages));
      assert.match(messages[1], /^4: .*"sql effect/, JSON.stringify(messages));
      assert.doesNotMatch(messages.join('\n'), /Spec/, 'a Rust type name reached the editor');
    });

    test('the shipped catalogs are clean (they bind the schema with a relative modeline)', async () => {
      for (const path of ['catalogs/reservo.yaml', 'examples/conformance/catalog.yaml']) {
        const { diagnostics } = await open(path, readFileSync(join(repo, path), 'utf8'));
        assert.deepEqual(diagnostics, [], `${path}: ${JSON.stringify(diagnostics)}`);
      }
    });
  });
}
