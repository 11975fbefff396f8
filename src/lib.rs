//! carte: one generic MCP server whose whole menu (tools, prompts,
//! resources) is declared in a YAML catalog.
//!
//! # Layout
//! - [`catalog`]: YAML files → validated, immutable [`catalog::Catalog`] (no tokio, no rmcp);
//! - [`diag`]: diagnostics and how they are printed;
//! - [`sync`]: locks that outlive a panic (every lock is taken through it);
//! - [`secret`]: text leaving carte, with the environment's secrets hidden
//!   (redacted before it is cut);
//! - [`effect`]: what tools do before their result renders (`sql`, `http`,
//!   `command`): each effect's keys, load-time checks and run, in its own module;
//! - [`render`]: the minijinja environment (`fail()`, fuel);
//! - [`metrics`]: the Prometheus registry `/metrics` serves;
//! - [`run`], [`prompt`], [`resource`], [`content`]: what tools, prompts and
//!   resources produce from a catalog snapshot, in carte's own types;
//! - [`live`]: reading subscribed resources again after a write, and comparing;
//! - [`audit`]: the audit log, a JSON line per request (`--audit-log`), written off the request's thread;
//! - [`rate_limit`]: counting each caller's tool calls against the catalog's `rateLimit`s;
//! - [`task_store`]: where tasks are kept (in this process; [`replicas`] adds the
//!   PostgreSQL store replicas share), bounded per owner and in total;
//! - [`replicas`]: several replicas on one PostgreSQL database (`serve --state`):
//!   the shared tasks, and the events they tell each other;
//! - [`server`]: the only module that speaks MCP (rmcp): the handler, lists,
//!   the stdio transport, and the hub of connected sessions that
//!   notifications fan out to; what the CLI and reload get from it is JSON or
//!   carte's own types ([`server::Answer`], [`server::RequestError`]);
//! - [`telemetry`]: OpenTelemetry traces, exported only when an OTLP endpoint is set;
//! - [`examples`]: running a catalog's `examples:` through the server's own
//!   code, on scratch databases (`carte test`);
//! - [`preview`]: the author's page (`carte preview`, `serve --preview`):
//!   the menu, the last check's diagnostics, forms to try it, examples;
//! - [`import`]: `carte import openapi`, a catalog written from an OpenAPI description;
//! - [`reload`]: watching the catalog's files, loading the next snapshot,
//!   swapping it in and announcing what changed.
//!
//! Data flows one way: files → catalog → server; reload → hub → clients.
//! Modules depend one way too: `secret` and `uri_template` use nothing;
//! `diag` uses `secret`; `render` uses `diag`; `catalog` uses those; `resource`, `content`,
//! `prompt` and `run` use `catalog` and `render` (`content` uses `resource`,
//! `prompt` and `run` use `content`); `task_store` uses `run`; `live` uses `resource`; `replicas` uses `task_store`; `server` uses all of them; `examples`
//! uses `server`; `reload` uses `examples` and `server`;
//! `preview` uses `reload` and those below it. `tests/it/architecture.rs` checks this, and that only
//! `server` names rmcp.
#![deny(missing_docs)]

pub mod audit;
pub mod catalog;
pub mod content;
pub mod diag;
pub mod duration;
pub mod effect;
pub mod examples;
pub mod import;
pub mod live;
pub mod metrics;
pub mod preview;
pub mod prompt;
pub mod rate_limit;
pub mod reload;
pub mod render;
pub mod replicas;
pub mod resource;
pub mod run;
pub mod secret;
pub mod server;
pub mod sync;
pub mod task_store;
pub mod telemetry;
pub mod uri_template;
