//! What the `carte` command line accepts (clap): the subcommands, their
//! flags and `--help`. [`arguments`] reads the `key=value` arguments given
//! to `carte call`, `prompt`, `read` and `complete`.

pub(crate) mod arguments;
pub(crate) mod logging;

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

/// One MCP server whose tools, prompts and resources are declared in a YAML catalog.
#[derive(Parser)]
#[command(name = "carte", version, about, long_about = None)]
#[command(after_help = "Start with `carte check CATALOG`, then `carte serve CATALOG`.\n\
Logs go to stderr; set CARTE_LOG=debug for more (stdout is the protocol on stdio).")]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
    /// How logs on stderr look: `text` for people, `json` (one object per line) for log shippers.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub(crate) log_format: LogFormat,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
// Parsed once per process: `Serve`'s many flags cost nothing worth a box.
#[allow(clippy::large_enum_variant)]
// Each command's flags are built only when that command runs (or its help is
// shown): building all of them was a fifth of a millisecond of every start.
#[command(defer = true)]
pub(crate) enum Command {
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
        /// Run the catalog's `examples:` before serving it and before each
        /// reload: a catalog whose examples fail is refused (at start, carte
        /// exits; on reload the last good catalog serves on and clients are
        /// told why).
        #[arg(long)]
        examples: bool,
        /// HTTP: also serve the author's page (see `carte preview`) at
        /// /preview/. Not with --auth-token-env or --oauth-issuer: the page
        /// has no login.
        #[arg(long, requires = "http", conflicts_with_all = ["auth_token_env", "oauth_issuer"])]
        preview: bool,
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
        /// HTTP: connections at once; past them, 16 more are served only
        /// /healthz and /readyz, and any further one is answered 503.
        #[arg(long, value_name = "N", default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..))]
        max_connections: u64,
        /// HTTP: close a connection whose client takes longer than SECS to send a
        /// request's headers, or sends nothing for SECS between requests; a
        /// request body must arrive within SECS, then at 16 KiB/s.
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
        /// Append one JSON line per request to PATH (`-`: stdout, over HTTP
        /// only): time, caller, method, name, outcome, duration and the
        /// SHA-256 of the arguments — never their values.
        #[arg(long, value_name = "PATH")]
        audit_log: Option<std::path::PathBuf>,
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
    /// Run the catalogs' `examples:` and say which hold (exit 0 all pass,
    /// 1 one fails or a catalog is invalid, 2 unreadable).
    ///
    /// Each example calls its tool, prompt or resource through the server's
    /// own code, on scratch databases (a fresh copy of each SQLite file;
    /// on PostgreSQL, transactions that are rolled back), with its `rows`
    /// inserted first and an `http` api's answer taken from its `upstream`:
    /// nothing the catalog serves is changed, no real api is called.
    Test {
        /// One or more catalog files.
        #[arg(required = true)]
        catalogs: Vec<PathBuf>,
        /// Output format: `json` prints one object with every example's verdict.
        #[arg(long, value_enum, default_value_t = Format::Human)]
        format: Format,
        /// Run only the examples whose name contains TEXT (such as a tool's name).
        #[arg(long, value_name = "TEXT")]
        filter: Option<String>,
    },
    /// Serve the author's page in a browser: the menu as a client sees it,
    /// the diagnostics of the last save (live, as you save), a form to try
    /// each tool and prompt, resources to read, and the examples' verdicts.
    ///
    /// Calls run through the server's own code, like `carte call` (on the
    /// catalog's real databases); the page answers only to this machine.
    Preview {
        /// The catalog file (YAML).
        catalog: PathBuf,
        /// Where to serve the page: HOST:PORT (a local address).
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7878")]
        http: String,
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
    /// Write a catalog from another description of an API (to stdout).
    Import {
        #[command(subcommand)]
        source: Import,
    },
    /// Print the JSON Schema of the catalog format (for editors: yaml-language-server).
    Schema {
        /// Print the catalog reference (every key, as Markdown) instead: the book's "Every key" page.
        #[arg(long)]
        markdown: bool,
    },
}

// What `carte import` reads (its help is the `Import` command's above).
#[derive(Subcommand)]
pub(crate) enum Import {
    /// An OpenAPI 3 description (YAML or JSON): an `apis:` entry and one
    /// `http` tool per operation, e.g. `carte import openapi spec.yaml > catalog.yaml`.
    Openapi {
        /// The OpenAPI file.
        spec: PathBuf,
        /// The api's name in `apis:` (default: from the description's title).
        #[arg(long, value_name = "NAME")]
        api: Option<String>,
    },
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    Human,
    Json,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum Kind {
    Tools,
    Prompts,
    Resources,
    Templates,
}
