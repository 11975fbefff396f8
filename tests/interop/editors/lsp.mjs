// A minimal LSP client over stdio: Content-Length framing, requests with
// ids, and the server's own requests answered the way an editor would.
// Every wait is bounded; a server that dies or stalls fails the test.

import { spawn } from 'node:child_process';

export class LspClient {
  constructor(command, args, { settings, timeoutMs = 20000 } = {}) {
    this.settings = settings ?? {};
    this.timeoutMs = timeoutMs;
    this.nextId = 1;
    this.pending = new Map();
    this.diagnostics = new Map();
    this.diagnosticWaiters = [];
    // The server reports errors it swallowed (a completion that threw) as telemetry.
    this.telemetry = [];
    this.stderr = '';
    this.buffer = Buffer.alloc(0);
    this.child = spawn(command, args, { stdio: ['pipe', 'pipe', 'pipe'] });
    this.child.stdout.on('data', (chunk) => this.#receive(chunk));
    this.child.stderr.on('data', (chunk) => {
      this.stderr = (this.stderr + chunk).slice(-20000);
    });
    this.child.on('exit', (code, signal) => {
      const error = new Error(`language server exited (code ${code}, signal ${signal})\n${this.stderr}`);
      for (const { reject } of this.pending.values()) reject(error);
      this.pending.clear();
      for (const waiter of this.diagnosticWaiters) waiter.reject(error);
      this.diagnosticWaiters = [];
      this.exited = error;
    });
  }

  #send(message) {
    const body = Buffer.from(JSON.stringify({ jsonrpc: '2.0', ...message }), 'utf8');
    this.child.stdin.write(`Content-Length: ${body.length}\r\n\r\n`);
    this.child.stdin.write(body);
  }

  #receive(chunk) {
    this.buffer = Buffer.concat([this.buffer, chunk]);
    for (;;) {
      const end = this.buffer.indexOf('\r\n\r\n');
      if (end < 0) return;
      const header = this.buffer.subarray(0, end).toString('ascii');
      const match = /Content-Length: *(\d+)/i.exec(header);
      if (!match) throw new Error(`bad LSP header: ${header}`);
      const length = Number(match[1]);
      if (this.buffer.length < end + 4 + length) return;
      const body = this.buffer.subarray(end + 4, end + 4 + length).toString('utf8');
      this.buffer = this.buffer.subarray(end + 4 + length);
      this.#dispatch(JSON.parse(body));
    }
  }

  #dispatch(message) {
    if (message.id !== undefined && message.method === undefined) {
      const waiter = this.pending.get(message.id);
      if (!waiter) return;
      this.pending.delete(message.id);
      if (message.error) waiter.reject(new Error(`${waiter.method}: ${JSON.stringify(message.error)}`));
      else waiter.resolve(message.result);
      return;
    }
    if (message.id !== undefined) {
      this.#send({ id: message.id, result: this.#answer(message) });
      return;
    }
    if (message.method === 'telemetry/event') {
      this.telemetry.push(message.params);
      return;
    }
    if (message.method === 'textDocument/publishDiagnostics') {
      const { uri, diagnostics } = message.params;
      this.diagnostics.set(uri, diagnostics);
      for (const waiter of this.diagnosticWaiters.filter((w) => w.uri === uri)) waiter.resolve(diagnostics);
      this.diagnosticWaiters = this.diagnosticWaiters.filter((w) => w.uri !== uri);
    }
  }

  // What an editor answers to the server's requests.
  #answer(request) {
    if (request.method === 'workspace/configuration') {
      return request.params.items.map((item) => (item.section ? this.settings[item.section] ?? null : this.settings));
    }
    return null;
  }

  #bounded(promise, what) {
    let timer;
    const timeout = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no answer to ${what} within ${this.timeoutMs} ms\n${this.stderr}`)), this.timeoutMs);
    });
    return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
  }

  request(method, params) {
    if (this.exited) return Promise.reject(this.exited);
    const id = this.nextId++;
    const answer = new Promise((resolve, reject) => this.pending.set(id, { resolve, reject, method }));
    this.#send({ id, method, params });
    return this.#bounded(answer, method);
  }

  notify(method, params) {
    this.#send({ method, params });
  }

  // The next diagnostics published for `uri` (call before the change that causes them).
  nextDiagnostics(uri) {
    if (this.exited) return Promise.reject(this.exited);
    const published = new Promise((resolve, reject) => this.diagnosticWaiters.push({ uri, resolve, reject }));
    return this.#bounded(published, `diagnostics of ${uri}`);
  }

  async close() {
    if (!this.exited) {
      try {
        await this.request('shutdown', null);
        this.notify('exit', null);
      } catch {
        // the process is killed below anyway
      }
    }
    const exited = new Promise((resolve) => {
      if (this.exited) resolve();
      else this.child.on('exit', resolve);
    });
    const timer = setTimeout(() => this.child.kill('SIGKILL'), 5000);
    await exited;
    clearTimeout(timer);
  }
}
