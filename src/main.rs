//! The `carte` command line: serve a catalog, check it, or try its tools,
//! prompts and resources from a terminal the way a client would. What it
//! accepts is [`cli`]; this file runs it.

mod cli;

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
use clap::Parser as _;
use serde_json::{Map, Value};

use cli::arguments::{
    Arguments, Target, check_argument_names, check_name, check_required, completion_target, list_kind, split_pair,
    tool_arguments, typed_argument,
};
use cli::{Cli, Command, Format};

/// mimalloc serves the many small, short-lived blocks of a request with less
/// work than glibc's malloc (a fifth of a call's CPU over HTTP).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_arena_reserve` (`mimalloc.h`, v3): how much address
/// space it reserves at a time, in KiB. Not among `libmimalloc_sys`'s names.
const MI_OPTION_ARENA_RESERVE: libmimalloc_sys::mi_option_t = 23;

/// Arenas of 64 MiB instead of mimalloc's 1 GiB: the first allocation sets up
/// an arena's bitmaps (a bit per 64 KiB slice for each of its states and size
/// classes), for 1 GiB 40 of the 600 page faults of a start. A process that
/// grows reserves more arenas, eight of each size and then twice as large.
/// Set before `main`: Rust's runtime allocates (the main thread's name)
/// before it, and that reserves the first arena. `MIMALLOC_ARENA_RESERVE`
/// still decides when it is set.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
#[used]
#[unsafe(link_section = ".init_array")]
static SMALLER_ARENAS: extern "C" fn() = {
    extern "C" fn smaller_arenas() {
        // SAFETY: mi_option_set_default only stores the value in mimalloc's
        // table of options (unless the environment set it).
        unsafe { libmimalloc_sys::mi_option_set_default(MI_OPTION_ARENA_RESERVE, 64 * 1024) };
    }
    smaller_arenas
};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let traces = cli::logging::init(cli.log_format);
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
            examples,
            preview,
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
            audit_log,
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
            let reloading = reload::Options { debounce: Duration::from_millis(debounce), watch, examples };
            if examples {
                let failed = runtime()?.block_on(reload::examples_failing(&catalog));
                if !failed.is_empty() {
                    eprint!("{}", diag::render_human(&failed));
                    eprintln!("carte: --examples: the catalog's examples fail; not serving it");
                    return Ok(ExitCode::from(1));
                }
            }
            let http = match http {
                None => None,
                Some(addr) => {
                    // A flag's mistake is said before anything starts.
                    carte::server::http::bind::parse(&addr)?;
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
                (Some(url), Some(http)) => match carte::replicas::Replicas::new(&url, http.session_idle) {
                    Ok(replicas) => Some(std::sync::Arc::new(replicas)),
                    Err(reason) => anyhow::bail!("--state: {reason}"),
                },
                _ => None,
            };
            let audit = match audit_log {
                None => None,
                Some(path) if path.as_os_str() == "-" && http.is_none() => anyhow::bail!(
                    "--audit-log -: over stdio, stdout carries the protocol; give a file (or serve with --http)"
                ),
                Some(path) => Some(carte::audit::AuditLog::open(&path).context("--audit-log: cannot open it")?),
            };
            serve(&catalog, reloading, (http, toolset, preview), (state_keys, replicas, audit))
        }
        Command::Check { catalogs, format, watch: true } => check_watch(&catalogs, format),
        Command::Check { catalogs, format, watch: false } => Ok(check(&catalogs, format).0),
        Command::Preview { catalog, http } => preview(&catalog, &http),
        Command::Import { source: cli::Import::Openapi { spec, api } } => {
            let text = std::fs::read_to_string(&spec).with_context(|| format!("cannot read {}", spec.display()))?;
            match carte::import::openapi(&text, api.as_deref()) {
                Ok(catalog) => print!("{catalog}"),
                Err(err) => {
                    eprintln!("carte: {}: {err}", spec.display());
                    return Ok(ExitCode::from(1));
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Test { catalogs, format, filter } => test(&catalogs, format, filter.as_deref()),
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
            if let Some(declared) = snapshot.catalog.tool(&tool) {
                check_argument_names(
                    &format!("tool `{tool}`"),
                    pairs.iter().map(|(key, _)| *key),
                    &tool_arguments(declared),
                )?;
            }
            for (key, value) in pairs {
                arguments.insert(key.to_owned(), typed_argument(schema.as_ref(), key, value));
            }
            let client = carte::run::steps::NoClient::default();
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
                &carte::run::steps::NoClient::default(),
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
        Command::Schema { markdown } => {
            let schema = catalog::structure::catalog_schema();
            if markdown {
                print!("{}", catalog::reference::catalog_reference(&schema));
            } else {
                print_json(&schema);
            }
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
    (http, toolset, preview): (Option<HttpOptions>, Option<String>, bool),
    (state_keys, replicas, audit): (
        Option<StateKeys>,
        Option<std::sync::Arc<carte::replicas::Replicas>>,
        Option<carte::audit::AuditLog>,
    ),
) -> anyhow::Result<ExitCode> {
    let watching = reload::Watching::start(&options);
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
    if http.as_ref().is_none_or(|http| http.oauth.is_none()) {
        for (name, _) in catalog.blocks.apis.iter().filter(|(_, api)| api.acts_as_caller()) {
            tracing::warn!(
                "api `{name}` acts as the caller (`auth.exchange`), but carte verifies no caller without \
                 --http and --oauth-issuer: its tools will fail"
            );
        }
    }
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
    if let Some(audit) = audit {
        let _ = shared.audit.set(audit);
    }
    let runtime = if http.is_some() { http_runtime()? } else { runtime()? };
    let stopping = shared.clone();
    let served = runtime.block_on(async {
        tokio::spawn(reload::run(
            path.to_path_buf(),
            shared.clone(),
            inputs,
            options,
            watching,
            std::future::pending(),
        ));
        match http {
            Some(mut http) => {
                if preview {
                    let page = carte::preview::Preview::served(path, shared.clone()).await;
                    tokio::spawn(std::sync::Arc::clone(&page).follow());
                    http.preview = Some(page.router());
                    tracing::info!("the author's page is at /preview/");
                }
                carte::server::http::serve_http(shared, http, shutdown_signal()).await
            }
            None => carte::server::serve_stdio(shared, toolset.map(Into::into), shutdown_signal()).await,
        }
    });
    // A reload still loading on the blocking pool is abandoned.
    runtime.shutdown_timeout(Duration::from_millis(500));
    if let Some(audit) = stopping.audit.get() {
        audit.finish(Duration::from_secs(5));
    }
    served?;
    Ok(ExitCode::SUCCESS)
}

/// `carte preview`: serves the author's page until interrupted.
fn preview(path: &Path, addr: &str) -> anyhow::Result<ExitCode> {
    carte::server::http::bind::parse(addr)?;
    runtime()?.block_on(async {
        let resolved = carte::server::http::bind::resolve(addr).await?;
        let listener = match resolved.addrs.first() {
            Some(first) => tokio::net::TcpListener::bind(first).await.with_context(|| format!("--http {addr}"))?,
            None => anyhow::bail!("--http {addr}: the name resolves to no address"),
        };
        let local = listener.local_addr()?;
        let page = carte::preview::Preview::standalone(path).await;
        tokio::spawn(std::sync::Arc::clone(&page).follow());
        let host = if local.ip().is_loopback() || local.ip().is_unspecified() {
            format!("localhost:{}", local.port())
        } else {
            local.to_string()
        };
        // The address on stdout (scripts and tests read it), the rest in the log.
        println!("http://{host}/");
        tracing::info!("previewing {} at http://{host}/ (Ctrl-C to stop)", path.display());
        axum::serve(listener, page.router()).with_graceful_shutdown(shutdown_signal()).await?;
        Ok(ExitCode::SUCCESS)
    })
}

/// `carte test`: runs each catalog's examples, prints a verdict per
/// example (or one JSON object) and a count.
fn test(paths: &[PathBuf], format: Format, filter: Option<&str>) -> anyhow::Result<ExitCode> {
    let runtime = runtime()?;
    let mut verdicts = Vec::new();
    let (mut invalid, mut unreadable) = (false, false);
    let mut diagnostics = Vec::new();
    let mut not_run = Vec::new();
    for path in paths {
        let loaded = catalog::load(path);
        unreadable |= loaded.diagnostics.iter().any(|d| d.code == "unreadable");
        diagnostics.extend(loaded.diagnostics);
        match loaded.catalog {
            Some(catalog) => verdicts.extend(runtime.block_on(carte::examples::run(catalog, filter))),
            None => {
                invalid = true;
                not_run.push(path.display().to_string());
            }
        }
    }
    let report = carte::examples::Report { verdicts: &verdicts, not_run: &not_run, filter };
    match format {
        Format::Human => {
            eprint!("{}", diag::render_human(&diagnostics));
            let _ =
                std::io::Write::write_all(&mut std::io::stdout(), carte::secret::redact(&report.human()).as_bytes());
        }
        Format::Json => print_json(&report.json(&diagnostics)),
    }
    let failed = verdicts.iter().any(|v| !v.passed());
    Ok(match (unreadable, invalid || failed) {
        (true, _) => ExitCode::from(2),
        (false, true) => ExitCode::from(1),
        (false, false) => ExitCode::SUCCESS,
    })
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

/// Prints `value` as JSON, secrets from `${VAR}` hidden (see `secret::redact`).
fn print_json(value: &Value) {
    // A closed stdout (`carte list … | head`) ends the output, not carte with a panic.
    let text = serde_json::to_string_pretty(value).unwrap_or_default();
    let _ = std::io::Write::write_all(&mut std::io::stdout(), format!("{}\n", carte::secret::redact(&text)).as_bytes());
}
