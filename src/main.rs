//! The `carte` command line: serve a catalog, check it, or try its tools,
//! prompts and resources from a terminal the way a client would.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use carte::catalog::{self, Catalog};
use carte::diag::{self, Diagnostic};
use carte::reload;
use carte::server::http::HttpOptions;
use carte::server::http::oauth::OAuthOptions;
use carte::server::request_state::StateKeys;
use carte::server::{Answer, ListKind, Shared, Snapshot, View};
use clap::{Parser, Subcommand, ValueEnum};
use serde_json::{Map, Value};

/// One MCP server whose tools, prompts and resources are declared in a YAML catalog.
#[derive(Parser)]
#[command(name = "carte", version, about, long_about = None)]
#[command(after_help = "Start with `carte check CATALOG`, then `carte serve CATALOG`.\n\
Logs go to stderr; set CARTE_LOG=debug for more (stdout is the protocol on stdio).")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// How logs on stderr look: `text` for people, `json` (one object per line) for log shippers.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
// Parsed once per process: `Serve`'s many flags cost nothing worth a box.
#[allow(clippy::large_enum_variant)]
enum Command {
    /// Serve the catalog over MCP: on stdin/stdout (what desktop clients
    /// launch), or over Streamable HTTP with `--http`.
    ///
    /// Edits to the catalog, its includes, templates and `file:` resources
    /// take effect while serving: clients are told what changed. An invalid
    /// edit keeps the last good catalog and is reported. SIGHUP reloads too.
    Serve {
        /// The catalog file (YAML).
        catalog: PathBuf,
        /// Milliseconds of quiet after a change before reloading.
        #[arg(long, value_name = "MS", default_value_t = 50)]
        debounce: u64,
        /// Do not watch the files (reload only on SIGHUP).
        #[arg(long, conflicts_with = "poll")]
        no_watch: bool,
        /// Look for changes every MS milliseconds instead of using file system
        /// events (for network mounts).
        #[arg(long, value_name = "MS")]
        poll: Option<u64>,
        /// Serve MCP's Streamable HTTP at http://ADDR/mcp instead of stdio, with
        /// /healthz and /readyz. ADDR is HOST:PORT (127.0.0.1:8080, [::1]:8080,
        /// localhost:8080); a host name is resolved and carte listens on every
        /// address it resolves to (localhost: 127.0.0.1, and ::1 where it has one).
        #[arg(long, value_name = "ADDR")]
        http: Option<String>,
        /// HTTP: also accept this Origin (e.g. https://app.example.com:443); repeatable.
        #[arg(long, value_name = "ORIGIN", requires = "http")]
        allow_origin: Vec<String>,
        /// HTTP: also accept this Host header (e.g. mcp.example.com); repeatable.
        #[arg(long, value_name = "HOST", requires = "http")]
        allow_host: Vec<String>,
        /// HTTP: require `Authorization: Bearer <token>`, the token read from this
        /// environment variable.
        #[arg(long, value_name = "NAME", requires = "http")]
        auth_token_env: Option<String>,
        /// HTTP: accept OAuth 2.1 access tokens (JWTs) from this authorization
        /// server: signature by its JWKS, `iss`, `aud`, `exp`/`nbf`; tools'
        /// `scopes:` apply. Needs --public-url. With --auth-token-env too, that
        /// token is also accepted (the operator's: every tool, no `auth`).
        #[arg(long, value_name = "URL", requires_all = ["http", "public_url"])]
        oauth_issuer: Option<String>,
        /// HTTP with --oauth-issuer: the audience tokens must name (`aud`).
        /// Default: the resource, PUBLIC_URL/mcp.
        #[arg(long, value_name = "AUD", requires = "oauth_issuer")]
        oauth_audience: Option<String>,
        /// HTTP with --oauth-issuer: where the issuer's keys are. Default: the
        /// `jwks_uri` of its metadata (RFC 8414, then OpenID Connect discovery).
        #[arg(long, value_name = "URL", requires = "oauth_issuer")]
        oauth_jwks_url: Option<String>,
        /// HTTP with --oauth-issuer: the address clients reach carte at (e.g.
        /// https://mcp.example.com, behind a proxy): the resource is
        /// PUBLIC_URL/mcp, its metadata PUBLIC_URL/.well-known/oauth-protected-resource/mcp.
        #[arg(long, value_name = "URL", requires = "oauth_issuer")]
        public_url: Option<String>,
        /// HTTP: close a session after SECS without a request from its client
        /// (an open GET stream keeps it).
        #[arg(long, value_name = "SECS", default_value_t = 30 * 60, value_parser = clap::value_parser!(u64).range(1..))]
        session_idle_timeout: u64,
        /// HTTP: live sessions at most; a new one beyond is refused (503).
        #[arg(long, value_name = "N", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
        max_sessions: u64,
        /// HTTP: connections at once; one more is answered 503 and closed.
        #[arg(long, value_name = "N", default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..))]
        max_connections: u64,
        /// HTTP: close a connection whose client takes longer than SECS to send a
        /// request's headers, or sends nothing for SECS between requests.
        #[arg(long, value_name = "SECS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
        header_timeout: u64,
        /// HTTP: largest request body in bytes.
        #[arg(long, value_name = "BYTES", default_value_t = 4 * 1024 * 1024)]
        max_body_bytes: usize,
        /// Sign the `requestState` of input-required results (protocol
        /// 2026-07-28: a tool, prompt or resource whose steps ask the client)
        /// with the key in this environment variable: at least 32 bytes, e.g.
        /// from `openssl rand -hex 32`. Give every replica the same value, so
        /// that a client's retry may reach any of them. To rotate, set
        /// `NEW,OLD` (the first key signs, every key verifies) and drop OLD
        /// 10 minutes later, when the states it signed have expired. Without
        /// it, each process signs with a random key: a retry after a restart,
        /// or on another replica, is refused.
        #[arg(long, value_name = "NAME")]
        state_key_env: Option<String>,
        /// HTTP: share sessions, tasks and change events with the other
        /// replicas of this service through this PostgreSQL database
        /// (postgres://USER@HOST:PORT/DATABASE; carte creates its tables
        /// there). Give every replica the same --state-key-env too. Read from
        /// the environment variable CARTE_STATE when not given, so that a
        /// password stays out of the command line (its value is never shown).
        #[arg(long, value_name = "URL", requires = "http", env = "CARTE_STATE", hide_env_values = true)]
        state: Option<String>,
        /// stdio: serve only the tools of this toolset (the catalog's
        /// `toolsets:`); over HTTP each toolset is at /mcp/NAME.
        #[arg(long, value_name = "NAME", conflicts_with = "http")]
        toolset: Option<String>,
    },
    /// Validate catalogs and print every problem found (exit 0 valid, 1 invalid, 2 unreadable).
    Check {
        /// One or more catalog files.
        #[arg(required = true)]
        catalogs: Vec<PathBuf>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Human)]
        format: Format,
        /// Check again on every save, until interrupted (Ctrl-C).
        #[arg(long)]
        watch: bool,
    },
    /// Print the JSON a client receives from the list methods.
    List {
        /// The catalog file.
        catalog: PathBuf,
        /// Which list (all four if omitted).
        #[arg(value_enum)]
        kind: Option<Kind>,
        /// List the tools of this toolset only, as its clients see them.
        #[arg(long, value_name = "NAME")]
        toolset: Option<String>,
    },
    /// Call a tool as a client would and print the result.
    ///
    /// A key=value whose key is not a property of the tool's `inputSchema` is a
    /// usage error (exit 2), with the tool's arguments; `--json` is sent as written.
    /// The tool's own answer is printed as a client receives it (exit 1 if `isError`).
    Call {
        /// The catalog file.
        catalog: PathBuf,
        /// The tool's name.
        tool: String,
        /// Arguments as key=value (values are read as JSON where the schema wants a non-string).
        args: Vec<String>,
        /// All arguments as one JSON object (key=value pairs are added to it).
        #[arg(long)]
        json: Option<String>,
    },
    /// Render a prompt as a client would receive it.
    ///
    /// An argument the prompt does not declare, or a required one left out, is a
    /// usage error (exit 2) that lists the prompt's arguments.
    Prompt {
        /// The catalog file.
        catalog: PathBuf,
        /// The prompt's name.
        name: String,
        /// Arguments as key=value.
        args: Vec<String>,
    },
    /// Ask for completions as a client would (`completion/complete`) and print the answer.
    ///
    /// REF is a prompt (`prompt:NAME`) or a resource template (`resource:URI-TEMPLATE`,
    /// the template exactly as declared); without a prefix, a prompt of that name,
    /// else a resource template. The values are the `complete:` list of ARG that
    /// start with PREFIX (ignoring case), at most 100, as a client receives them.
    #[command(after_help = "Examples:\n  \
carte complete catalog.yaml prompt:plan_day room Fo\n  \
carte complete catalog.yaml 'resource:myapp://rooms/{room}' room\n  \
carte complete catalog.yaml plan_day room")]
    Complete {
        /// The catalog file.
        catalog: PathBuf,
        /// `prompt:NAME` or `resource:URI-TEMPLATE`.
        #[arg(value_name = "REF")]
        reference: String,
        /// The argument (prompt) or variable (resource template) being completed.
        #[arg(value_name = "ARG")]
        argument: String,
        /// What the user typed so far (default: nothing, i.e. every value).
        #[arg(default_value = "")]
        prefix: String,
    },
    /// Read a resource by URI.
    Read {
        /// The catalog file.
        catalog: PathBuf,
        /// The resource's URI.
        uri: String,
    },
    /// Print the JSON Schema of the catalog format (for editors: yaml-language-server).
    Schema,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Human,
    Json,
}

#[derive(Clone, Copy, ValueEnum)]
enum Kind {
    Tools,
    Prompts,
    Resources,
    Templates,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let traces = init_logging(cli.log_format);
    let code = match run(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("carte: {err:#}");
            ExitCode::from(2)
        }
    };
    if let Some(traces) = traces {
        traces.shutdown();
    }
    code
}

/// Logs to stderr, and traces to an OTLP collector when the environment
/// names one (see `carte::telemetry`): the exporter, to flush at exit.
fn init_logging(format: LogFormat) -> Option<carte::telemetry::Tracing> {
    use carte::telemetry::TARGET;
    use std::io::IsTerminal as _;
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let (traces, trace_problem) = match carte::telemetry::Tracing::from_env() {
        Ok(traces) => (traces, None),
        Err(problem) => (None, Some(problem)),
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("CARTE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,rmcp=error"));
    let filter = carte::telemetry::gate(filter, traces.is_some());
    let logs = tracing_subscriber::fmt::layer().with_writer(|| RedactedStderr(std::io::stderr())).with_target(false);
    let logs = match format {
        LogFormat::Json => logs.json().boxed(),
        LogFormat::Text => logs.with_ansi(std::io::stderr().is_terminal()).boxed(),
    };
    // The spans for export are never log lines (off, the global filter disabled them already).
    let logs = match traces {
        Some(_) => logs
            .with_filter(Targets::new().with_default(LevelFilter::TRACE).with_target(TARGET, LevelFilter::OFF))
            .boxed(),
        None => logs,
    };
    // A client that leaves is not an error (see `server::logs`).
    tracing_subscriber::registry()
        .with(filter)
        .with(carte::server::logs::ClientGone)
        .with(traces.as_ref().map(|traces| traces.layer()))
        .with(logs)
        .init();
    if let Some(problem) = trace_problem {
        tracing::warn!("traces are off: {problem}");
    }
    traces
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    // One thread: requests are short, and the epoll-driven stdio pipes need
    // no hand-offs between threads. SQL runs on the blocking pool.
    tokio::runtime::Builder::new_current_thread().enable_all().build().context("cannot start the async runtime")
}

/// HTTP serves many clients at once: one worker per core.
fn http_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().context("cannot start the async runtime")
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Serve {
            catalog,
            debounce,
            no_watch,
            poll,
            http,
            allow_origin,
            allow_host,
            auth_token_env,
            oauth_issuer,
            oauth_audience,
            oauth_jwks_url,
            public_url,
            session_idle_timeout,
            max_sessions,
            max_connections,
            header_timeout,
            max_body_bytes,
            state_key_env,
            state,
            toolset,
        } => {
            let state_keys = match state_key_env {
                None => None,
                Some(name) => match std::env::var(&name) {
                    Ok(value) if !value.trim().is_empty() => match StateKeys::from_value(value.trim()) {
                        Ok(keys) => Some(keys),
                        Err(reason) => anyhow::bail!("--state-key-env {name}: {reason}"),
                    },
                    _ => anyhow::bail!(
                        "--state-key-env {name}: the environment variable `{name}` is not set or empty; \
                         set it to a key of at least 32 bytes (e.g. `openssl rand -hex 32`)"
                    ),
                },
            };
            let watch = match (no_watch, poll) {
                (true, _) => None,
                (false, Some(ms)) => Some(reload::Mode::Poll(Duration::from_millis(ms.max(1)))),
                (false, None) => Some(reload::Mode::Events),
            };
            let reloading = reload::Options { debounce: Duration::from_millis(debounce), watch };
            let http = match http {
                None => None,
                Some(addr) => {
                    let auth_token = match auth_token_env {
                        None => None,
                        Some(name) => match std::env::var(&name) {
                            Ok(token) if !token.trim().is_empty() => Some(token.trim().to_owned()),
                            _ => anyhow::bail!(
                                "--auth-token-env {name}: the environment variable `{name}` is not set or empty; \
                                 set it to the token clients must send"
                            ),
                        },
                    };
                    let oauth = match (oauth_issuer, public_url) {
                        (Some(issuer), Some(public_url)) => Some(OAuthOptions {
                            issuer,
                            audience: oauth_audience,
                            jwks_url: oauth_jwks_url,
                            public_url,
                        }),
                        _ => None,
                    };
                    let count = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
                    carte::server::http::listener::raise_descriptor_limit(count(max_connections));
                    Some(HttpOptions {
                        allow_hosts: allow_host,
                        allow_origins: allow_origin,
                        auth_token,
                        oauth,
                        session_idle: Duration::from_secs(session_idle_timeout),
                        max_sessions: count(max_sessions),
                        max_connections: count(max_connections),
                        header_timeout: Duration::from_secs(header_timeout),
                        max_body_bytes,
                        ..HttpOptions::new(addr)
                    })
                }
            };
            let replicas = match (state, &http) {
                (Some(url), Some(http)) => match carte::server::replicas::Replicas::new(&url, http.session_idle) {
                    Ok(replicas) => Some(std::sync::Arc::new(replicas)),
                    Err(reason) => anyhow::bail!("--state: {reason}"),
                },
                _ => None,
            };
            serve(&catalog, reloading, (http, toolset), (state_keys, replicas))
        }
        Command::Check { catalogs, format, watch: true } => check_watch(&catalogs, format),
        Command::Check { catalogs, format, watch: false } => Ok(check(&catalogs, format).0),
        Command::List { catalog, kind, toolset } => {
            let Some(snapshot) = load_or_report(&catalog) else { return Ok(ExitCode::from(1)) };
            let snapshot = toolset_view(snapshot, toolset)?;
            let value = match kind {
                Some(kind) => snapshot.list_json(list_kind(kind)),
                None => {
                    let mut all = Map::new();
                    for kind in [ListKind::Tools, ListKind::Prompts, ListKind::Resources, ListKind::Templates] {
                        if let Value::Object(map) = snapshot.list_json(kind) {
                            all.extend(map);
                        }
                    }
                    Value::Object(all)
                }
            };
            print_json(&value);
            Ok(ExitCode::SUCCESS)
        }
        Command::Call { catalog, tool, args, json } => {
            let Some(snapshot) = load_or_report(&catalog) else { return Ok(ExitCode::from(1)) };
            let tools = snapshot.catalog.tools.iter().map(|t| t.name.as_str());
            check_name("tool", &tool, tools, (&catalog, "tools"))?;
            let mut arguments = match json {
                Some(text) => match serde_json::from_str::<Value>(&text) {
                    Ok(Value::Object(map)) => map,
                    Ok(_) => anyhow::bail!("--json must be a JSON object, e.g. '{{\"room\": \"Focus\"}}'"),
                    Err(err) => anyhow::bail!("--json is not valid JSON: {err}"),
                },
                None => Map::new(),
            };
            let schema = snapshot.catalog.tool(&tool).and_then(|t| t.wire.get("inputSchema").cloned());
            let mut pairs = Vec::with_capacity(args.len());
            for pair in &args {
                pairs.push(split_pair(pair)?);
            }
            if let Some(schema) = &schema {
                check_argument_names(
                    &format!("tool `{tool}`"),
                    pairs.iter().map(|(key, _)| *key),
                    &tool_arguments(schema),
                )?;
            }
            for (key, value) in pairs {
                arguments.insert(key.to_owned(), typed_argument(schema.as_ref(), key, value));
            }
            let client = carte::run::steps::NoClient;
            let view = View::all(std::sync::Arc::new(snapshot));
            let result = runtime()?.block_on(view.call_tool_json(&tool, Some(arguments), &client));
            let failed = matches!(&result, Ok(result) if result.get("isError") == Some(&Value::Bool(true)));
            let code = print_answer(result);
            Ok(if failed { ExitCode::from(1) } else { code })
        }
        Command::Prompt { catalog, name, args } => {
            let Some(snapshot) = load_or_report(&catalog) else { return Ok(ExitCode::from(1)) };
            let prompts = snapshot.catalog.prompts.iter().map(|p| p.name.as_str());
            check_name("prompt", &name, prompts, (&catalog, "prompts"))?;
            let mut arguments = Map::new();
            for pair in &args {
                let (key, value) = split_pair(pair)?;
                arguments.insert(key.to_owned(), Value::String(value.to_owned()));
            }
            if let Some(prompt) = snapshot.catalog.prompt(&name) {
                let known = Arguments {
                    names: prompt.arguments.iter().map(|a| (a.name.clone(), a.required)).collect(),
                    open: false,
                    noun: "argument",
                };
                let what = format!("prompt `{name}`");
                check_argument_names(&what, arguments.keys().map(String::as_str), &known)?;
                let usage = format!("carte prompt {} {name}", catalog.display());
                check_required(&what, &usage, &arguments, &known)?;
            }
            Ok(print_answer(runtime()?.block_on(snapshot.get_prompt_json(
                &name,
                Some(arguments),
                &carte::run::steps::NoClient,
            ))))
        }
        Command::Complete { catalog, reference, argument, prefix } => {
            let Some(snapshot) = load_or_report(&catalog) else { return Ok(ExitCode::from(1)) };
            let target = completion_target(&snapshot, &catalog, &reference)?;
            let answer = match &target {
                Target::Prompt(name) => {
                    if let Some(prompt) = snapshot.catalog.prompt(name) {
                        let known = Arguments {
                            names: prompt.arguments.iter().map(|a| (a.name.clone(), a.required)).collect(),
                            open: false,
                            noun: "argument",
                        };
                        check_argument_names(&format!("prompt `{name}`"), [argument.as_str()], &known)?;
                    }
                    snapshot.complete_prompt(name, &argument, &prefix)
                }
                Target::Template(uri) => {
                    if let Some(template) = snapshot.catalog.resource_template(uri) {
                        let names = template.template.variables().into_iter().map(|v| (v.to_owned(), false)).collect();
                        let known = Arguments { names, open: false, noun: "variable" };
                        check_argument_names(&format!("resource template `{uri}`"), [argument.as_str()], &known)?;
                    }
                    snapshot.complete_resource(uri, &argument, &prefix)
                }
            };
            Ok(print_answer(answer))
        }
        Command::Read { catalog, uri } => {
            let Some(snapshot) = load_or_report(&catalog) else { return Ok(ExitCode::from(1)) };
            Ok(print_answer(runtime()?.block_on(snapshot.read_resource_live_json(&uri))))
        }
        Command::Schema => {
            print_json(&catalog::structure::catalog_schema());
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `snapshot` as the clients of `toolset` see it (`None`: every tool); an
/// error naming the catalog's toolsets if it has no such one.
fn toolset_view(snapshot: Snapshot, toolset: Option<String>) -> anyhow::Result<View> {
    let toolset: Option<std::sync::Arc<str>> = toolset.map(Into::into);
    View::of(std::sync::Arc::new(snapshot), toolset.as_ref())
        .map_err(|err| anyhow::anyhow!("--toolset {}: {}", toolset.as_deref().unwrap_or_default(), err.message))
}

fn serve(
    path: &Path,
    options: reload::Options,
    (http, toolset): (Option<HttpOptions>, Option<String>),
    (state_keys, replicas): (Option<StateKeys>, Option<std::sync::Arc<carte::server::replicas::Replicas>>),
) -> anyhow::Result<ExitCode> {
    let Some(snapshot) = load_or_report(path) else { return Ok(ExitCode::from(1)) };
    if let Some(name) = &toolset
        && !snapshot.catalog.toolsets.contains_key(name)
    {
        anyhow::bail!(
            "--toolset {name}: {}",
            carte::server::snapshot::unknown_toolset(&snapshot.catalog, name).message
        );
    }
    let catalog = &snapshot.catalog;
    tracing::info!(
        "serving {} ({} tools, {} prompts, {} resources, {} resource templates) on {}",
        path.display(),
        catalog.tools.len(),
        catalog.prompts.len(),
        catalog.resources.len(),
        catalog.resource_templates.len(),
        if http.is_some() { "HTTP" } else { "stdio" }
    );
    let inputs = catalog.inputs.clone();
    let state_keys = state_keys.unwrap_or_else(|| {
        if let Some(replicas) = &replicas {
            tracing::warn!(
                "--state {} without --state-key-env: each replica signs input-required states with a random key \
                 of its own, so a client's retry that reaches another replica is refused; give every replica \
                 the same --state-key-env",
                replicas.shown()
            );
        } else if http.is_some() {
            tracing::info!(
                "no --state-key-env: input-required states are signed with a random key of this process; \
                 a client's retry after a restart, or on another replica, is refused"
            );
        }
        StateKeys::random()
    });
    if let Some(replicas) = &replicas {
        tracing::info!("sharing sessions, tasks and changes with other replicas through {}", replicas.shown());
    }
    let shared = Shared::replicated(snapshot, state_keys, replicas);
    let runtime = if http.is_some() { http_runtime()? } else { runtime()? };
    let served = runtime.block_on(async {
        tokio::spawn(reload::run(path.to_path_buf(), shared.clone(), inputs, options, std::future::pending()));
        match http {
            Some(http) => carte::server::http::serve_http(shared, http, shutdown_signal()).await,
            None => carte::server::serve_stdio(shared, toolset.map(Into::into), shutdown_signal()).await,
        }
    });
    // A reload still loading on the blocking pool is abandoned.
    runtime.shutdown_timeout(Duration::from_millis(500));
    served?;
    Ok(ExitCode::SUCCESS)
}

/// `check --watch`: checks, then checks again after every change.
fn check_watch(paths: &[PathBuf], format: Format) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async {
        let (changed, mut changes) = tokio::sync::mpsc::unbounded_channel();
        let mut watch =
            reload::watch::Watch::new(reload::Mode::Events, changed).context("cannot watch the catalog's files")?;
        loop {
            let (_, inputs) = check(paths, format);
            watch.follow(&inputs);
            if format == Format::Human {
                eprintln!("-- watching for changes (Ctrl-C to stop) --");
            }
            tokio::select! {
                more = reload::next_change(&mut changes, Duration::from_millis(50)) => if !more {
                    return Ok(ExitCode::SUCCESS);
                },
                _ = tokio::signal::ctrl_c() => return Ok(ExitCode::SUCCESS),
            }
            if format == Format::Human {
                eprintln!();
            }
        }
    })
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(term) => term,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// Loads a catalog, printing its diagnostics to stderr, and once it is
/// accepted, applies its databases' `setup` (loading itself changes nothing).
fn load_or_report(path: &Path) -> Option<Snapshot> {
    let loaded = catalog::load(path);
    if !loaded.diagnostics.is_empty() {
        eprint!("{}", diag::render_human(&loaded.diagnostics));
    }
    let catalog = loaded.catalog?;
    if let Err(diagnostics) = catalog.apply_setup() {
        eprint!("{}", diag::render_human(&diagnostics));
        return None;
    }
    Some(Snapshot::new(catalog))
}

/// Checks `paths`, prints what was found; returns the exit code and what the
/// catalogs were read from.
fn check(paths: &[PathBuf], format: Format) -> (ExitCode, catalog::Inputs) {
    let mut all: Vec<Diagnostic> = Vec::new();
    let mut inputs = catalog::Inputs::default();
    let mut unreadable = false;
    let mut invalid = false;
    for path in paths {
        let loaded = catalog::load(path);
        let catalog: Option<Catalog> = loaded.catalog;
        unreadable |= loaded.diagnostics.iter().any(|d| d.code == "unreadable");
        invalid |= catalog.is_none();
        all.extend(loaded.diagnostics);
        inputs.merge(loaded.inputs);
    }
    match format {
        Format::Human => {
            eprint!("{}", diag::render_human(&all));
            if !invalid {
                eprintln!("{}: ok", paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "));
            }
        }
        Format::Json => println!("{}", diag::render_json(&all)),
    }
    let code = if unreadable {
        ExitCode::from(2)
    } else if invalid {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    };
    (code, inputs)
}

fn list_kind(kind: Kind) -> ListKind {
    match kind {
        Kind::Tools => ListKind::Tools,
        Kind::Prompts => ListKind::Prompts,
        Kind::Resources => ListKind::Resources,
        Kind::Templates => ListKind::Templates,
    }
}

fn split_pair(pair: &str) -> anyhow::Result<(&str, &str)> {
    pair.split_once('=').with_context(|| format!("argument `{pair}` should be key=value"))
}

/// The arguments a tool or prompt declares: each name and whether it is
/// required; `open` when other names are accepted too.
struct Arguments {
    names: Vec<(String, bool)>,
    open: bool,
    /// What one is called: `argument`, or `variable` (of a URI template).
    noun: &'static str,
}

impl Arguments {
    /// `room (required), hours`, or `none`.
    fn describe(&self) -> String {
        if self.names.is_empty() {
            return "none".to_owned();
        }
        let names: Vec<String> = self
            .names
            .iter()
            .map(|(name, required)| if *required { format!("{name} (required)") } else { name.clone() })
            .collect();
        names.join(", ")
    }
}

/// A tool's arguments, from its `inputSchema`: `properties` and `required`;
/// open when `additionalProperties` is `true` or a schema.
fn tool_arguments(schema: &Value) -> Arguments {
    let required: Vec<&str> =
        schema.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
    let names = schema
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(name, _)| (name.clone(), required.contains(&name.as_str())))
        .collect();
    let open = schema.get("additionalProperties").is_some_and(|extra| extra != &Value::Bool(false));
    Arguments { names, open, noun: "argument" }
}

/// A usage error for the first name that `known` does not declare, with
/// "did you mean" and the declared arguments.
fn check_argument_names<'a>(
    what: &str,
    given: impl IntoIterator<Item = &'a str>,
    known: &Arguments,
) -> anyhow::Result<()> {
    if known.open {
        return Ok(());
    }
    let Some(unknown) = given.into_iter().find(|key| !known.names.iter().any(|(name, _)| name == key)) else {
        return Ok(());
    };
    let guess = diag::suggest(unknown, known.names.iter().map(|(name, _)| name.as_str()))
        .map(|hint| format!("; {hint}"))
        .unwrap_or_default();
    let noun = known.noun;
    anyhow::bail!("{what} has no {noun} `{unknown}`{guess}\n  its {noun}s: {}", known.describe())
}

/// A usage error naming every required argument of a prompt left out.
fn check_required(what: &str, usage: &str, given: &Map<String, Value>, known: &Arguments) -> anyhow::Result<()> {
    let missing: Vec<&str> = known
        .names
        .iter()
        .filter(|(argument, required)| *required && !given.contains_key(argument))
        .map(|(argument, _)| argument.as_str())
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let plural = if missing.len() == 1 { "" } else { "s" };
    let example: Vec<String> = missing.iter().map(|argument| format!("{argument}=…")).collect();
    anyhow::bail!(
        "{what} needs argument{plural} `{}`\n  its arguments: {}\n  e.g. {usage} {}",
        missing.join("`, `"),
        known.describe(),
        example.join(" ")
    )
}

/// A usage error when the catalog has no `what` called `name`: "did you
/// mean", and where to see them all.
fn check_name<'a>(
    what: &str,
    name: &str,
    names: impl Iterator<Item = &'a str> + Clone,
    (catalog, kind): (&Path, &str),
) -> anyhow::Result<()> {
    if names.clone().any(|known| known == name) {
        return Ok(());
    }
    let guess = diag::suggest(name, names).map(|hint| format!("; {hint}")).unwrap_or_default();
    anyhow::bail!("this catalog has no {what} `{name}`{guess}\n  see them all: carte list {} {kind}", catalog.display())
}

/// What `carte complete` completes.
enum Target {
    /// A prompt, by name.
    Prompt(String),
    /// A resource template, by its URI template.
    Template(String),
}

/// What `carte complete` was asked to complete: `prompt:NAME`,
/// `resource:URI-TEMPLATE`, or a bare prompt name or URI template.
fn completion_target(snapshot: &Snapshot, path: &Path, reference: &str) -> anyhow::Result<Target> {
    let catalog = &snapshot.catalog;
    if let Some(name) = reference.strip_prefix("prompt:") {
        check_name("prompt", name, catalog.prompts.iter().map(|p| p.name.as_str()), (path, "prompts"))?;
        return Ok(Target::Prompt(name.to_owned()));
    }
    if let Some(uri) = reference.strip_prefix("resource:") {
        let templates = catalog.resource_templates.iter().map(|t| t.template.as_str());
        check_name("resource template", uri, templates, (path, "templates"))?;
        return Ok(Target::Template(uri.to_owned()));
    }
    if catalog.prompt(reference).is_some() {
        return Ok(Target::Prompt(reference.to_owned()));
    }
    if catalog.resource_template(reference).is_some() {
        return Ok(Target::Template(reference.to_owned()));
    }
    let prompts = catalog.prompts.iter().map(|p| p.name.as_str());
    let templates = catalog.resource_templates.iter().map(|t| t.template.as_str());
    let guess = diag::suggest(reference, prompts.chain(templates)).map(|hint| format!("; {hint}")).unwrap_or_default();
    anyhow::bail!(
        "`{reference}` is neither a prompt nor a resource template of this catalog{guess}\n  \
         write `prompt:NAME` or `resource:URI-TEMPLATE` (see `carte list {0} prompts` and `carte list {0} templates`)",
        path.display()
    )
}

/// A key=value argument, typed by the tool's schema: strings stay strings,
/// anything else is read as JSON when it parses.
fn typed_argument(schema: Option<&Value>, key: &str, value: &str) -> Value {
    let declared = schema.and_then(|s| s.pointer(&format!("/properties/{key}/type"))).and_then(Value::as_str);
    if declared == Some("string") {
        return Value::String(value.to_owned());
    }
    serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_owned()))
}

/// Prints what a client receives, or the JSON-RPC error it would get instead
/// (on stderr, exit 2).
fn print_answer(answer: Answer) -> ExitCode {
    match answer {
        Ok(result) => {
            print_json(&result);
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("carte: {err}");
            ExitCode::from(2)
        }
    }
}

/// Prints `value` as JSON, secrets from `${VAR}` hidden (see `diag::redact`).
fn print_json(value: &Value) {
    // A closed stdout (`carte list … | head`) ends the output, not carte with a panic.
    let text = serde_json::to_string_pretty(value).unwrap_or_default();
    let _ = std::io::Write::write_all(&mut std::io::stdout(), format!("{}\n", carte::diag::redact(&text)).as_bytes());
}

/// stderr for `tracing`, with secrets from `${VAR}` hidden: each event is
/// formatted whole and written in one call, so a secret is never split
/// across two writes.
struct RedactedStderr(std::io::Stderr);

impl std::io::Write for RedactedStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        self.0.write_all(carte::diag::redact(&text).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}
