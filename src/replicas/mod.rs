//! Several replicas on one PostgreSQL database (`serve --http … --state
//! postgres://…`): what they share, and how they tell each other.
//!
//! - [`Replicas`] (here): the handle: a connection pool to the state
//!   database, this process's random origin id, and whether the database
//!   answers (for `/readyz`);
//! - the server's `PgSessions` (rmcp's `SessionStore`) keeps its sessions in
//!   the `carte_sessions` table created here, so a
//!   legacy session started on one replica is restored on another;
//! - [`tasks`]: [`PgTaskStore`], the tasks on the `carte_tasks` table;
//! - [`events`]: one `LISTEN carte_events` connection per replica, kept up
//!   with backoff; a replica publishes committed writes and task cancels and
//!   answers there (`NOTIFY`) and ignores its own.
//!
//! The tables are created at start (and after every reconnect of the
//! listener) under an advisory lock, so replicas starting together do not
//! race. While its listener is connected a replica holds an advisory lock
//! of its own: when the process dies, PostgreSQL drops it, and another
//! replica reading a task that ran there reports it failed ("its replica
//! stopped"). A database that does not answer never stops carte: `/readyz` says
//! so, the listener retries, and requests that need it fail with an error.

pub mod events;
pub mod tasks;

use std::sync::Mutex;
use std::time::Duration;

use deadpool_postgres::Pool;
use tokio_postgres::Config;

pub use events::{Event, Listener};
pub use tasks::PgTaskStore;

/// The channel replicas talk on.
pub const CHANNEL: &str = "carte_events";

/// Connections to the state database a replica keeps at most (besides the listener's).
const POOL_SIZE: usize = 16;

/// How long a connection, or `/readyz`'s ping, may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The tables, created if missing. Statements only: idempotent.
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS carte_sessions (
    id text PRIMARY KEY,
    state jsonb NOT NULL,
    last_seen timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS carte_sessions_last_seen ON carte_sessions (last_seen);
CREATE TABLE IF NOT EXISTS carte_tasks (
    id text PRIMARY KEY,
    owner text NOT NULL,
    record jsonb NOT NULL,
    expires_ms bigint NOT NULL
);
ALTER TABLE carte_tasks ADD COLUMN IF NOT EXISTS runner bigint;
CREATE INDEX IF NOT EXISTS carte_tasks_owner ON carte_tasks (owner);
CREATE INDEX IF NOT EXISTS carte_tasks_expires ON carte_tasks (expires_ms);
";

/// The advisory lock creating the tables holds (any fixed number; "carte" in ASCII).
const SCHEMA_LOCK: i64 = 0x63_61_72_74_65;

/// The shared state of the replicas of one service: see the module doc.
pub struct Replicas {
    config: Config,
    /// The URL as it may be shown (no password).
    shown: String,
    pool: Pool,
    /// This process's id on [`CHANNEL`]: events it published carry it.
    origin: String,
    /// The advisory lock this process's listener holds while it is
    /// connected: the others see from it that this replica is alive (a
    /// task row names the lock of the replica running it).
    alive_lock: i64,
    /// Why the listener is not connected, if it is not.
    down: Mutex<Option<String>>,
    /// How long a legacy session is kept without activity.
    session_idle: Duration,
    /// Databases whose `changed` notice is on its way, not sent yet (one
    /// notice covers every write committed before it is sent).
    unsent: Mutex<std::collections::HashSet<String>>,
}

impl std::fmt::Debug for Replicas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Replicas({}, origin {})", self.shown, self.origin)
    }
}

impl Replicas {
    /// The shared state at `url` (`postgres://` or `postgresql://`); nothing
    /// is connected yet. Sessions idle for `session_idle` are dropped.
    pub fn new(url: &str, session_idle: Duration) -> Result<Replicas, String> {
        let scheme = url.split_once("://").map(|(scheme, _)| scheme);
        if !matches!(scheme, Some("postgres" | "postgresql")) {
            let scheme = scheme.map_or_else(|| "no scheme".to_owned(), |scheme| format!("`{scheme}://`"));
            return Err(format!("{scheme} is not PostgreSQL's: --state takes postgres://USER@HOST:PORT/DATABASE"));
        }
        // Read as a catalog's database is (the same defaults, the same refusal of TLS);
        // its error never quotes the password.
        let target = crate::effect::sql::parse_postgres_url(url)?;
        let config = target.config().clone();
        let shown = shown(&config);
        let pool = target.pool(POOL_SIZE, Some(target.connect_timeout())).map_err(|err| format!("{shown}: {err}"))?;
        let origin = uuid::Uuid::new_v4();
        Ok(Replicas {
            config,
            shown,
            pool,
            alive_lock: alive_lock(&origin),
            origin: origin.to_string(),
            down: Mutex::new(Some("not connected yet".to_owned())),
            session_idle,
            unsent: Mutex::default(),
        })
    }

    /// The database's URL as it may be shown.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// A pooled connection, or why there is none.
    pub async fn client(&self) -> Result<deadpool_postgres::Object, String> {
        self.pool.get().await.map_err(|err| match err {
            deadpool_postgres::PoolError::Backend(err) => {
                format!("the state database does not answer: {}", reason(&err))
            }
            deadpool_postgres::PoolError::Timeout(_) => {
                "the state database does not answer: no connection within the connect timeout".to_owned()
            }
            other => format!("the state database does not answer: {other}"),
        })
    }

    /// Whether the state database answers now (for `/readyz`), and if not, why.
    pub async fn ready(&self) -> Result<(), String> {
        if let Some(reason) = crate::sync::lock(&self.down).clone() {
            return Err(reason);
        }
        tokio::time::timeout(CONNECT_TIMEOUT, async {
            let client = self.client().await?;
            client
                .simple_query("")
                .await
                .map(|_| ())
                .map_err(|err| format!("the state database does not answer: {}", reason(&err)))
        })
        .await
        .unwrap_or_else(|_| Err(format!("the state database gave no answer within {}s", CONNECT_TIMEOUT.as_secs())))
    }

    fn set_down(&self, reason: Option<String>) {
        *crate::sync::lock(&self.down) = reason;
    }

    /// How long a session shared between the replicas lives without activity.
    pub fn session_idle(&self) -> Duration {
        self.session_idle
    }
}

/// `err` and its causes, `a: b: c` (tokio-postgres's own message leaves the cause out:
/// "error connecting to server").
pub fn reason(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut cause = err.source();
    while let Some(next) = cause {
        let said = next.to_string();
        if !text.ends_with(&said) {
            text = format!("{text}: {said}");
        }
        cause = next.source();
    }
    text
}

/// Creates the tables if they are missing, under an advisory lock (replicas
/// starting together), then listens on [`CHANNEL`] if `listen`.
async fn create_tables(client: &tokio_postgres::Client, listen: bool) -> Result<(), tokio_postgres::Error> {
    let listen = if listen { format!("LISTEN {CHANNEL};") } else { String::new() };
    client
        .batch_execute(&format!("BEGIN; SELECT pg_advisory_xact_lock({SCHEMA_LOCK}); {SCHEMA} COMMIT; {listen}"))
        .await
}

/// The advisory lock key a replica of `origin` holds while it lives: 63
/// random bits (positive, so `pg_locks` shows it as two unsigned halves
/// that add up again, see [`tasks`]).
fn alive_lock(origin: &uuid::Uuid) -> i64 {
    let (high, _) = origin.as_u64_pair();
    i64::try_from(high >> 1).unwrap_or(i64::MAX)
}

/// `postgres://USER@HOST:PORT/DATABASE` of `config`, never its password.
fn shown(config: &Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .zip(config.get_ports().iter().chain(std::iter::repeat(&5432)))
        .map(|(host, port)| match host {
            tokio_postgres::config::Host::Tcp(name) => format!("{name}:{port}"),
            tokio_postgres::config::Host::Unix(path) => format!("{}:{port}", path.display()),
        })
        .collect();
    let user = config.get_user().unwrap_or_default();
    format!("postgres://{user}@{}/{}", hosts.join(","), config.get_dbname().unwrap_or(user))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_names_the_causes() {
        let cause = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused");
        let err = std::io::Error::other(Wrapped(cause));
        assert_eq!(reason(&err), "wrapped: Connection refused");
    }

    #[derive(Debug)]
    struct Wrapped(std::io::Error);

    impl std::fmt::Display for Wrapped {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("wrapped")
        }
    }

    impl std::error::Error for Wrapped {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn only_postgres_urls_and_the_password_is_not_shown() {
        let refused = Replicas::new("redis://u:secret@h:6379/0", Duration::from_secs(60)).unwrap_err();
        assert!(refused.contains("`redis://` is not PostgreSQL") && !refused.contains("secret"), "{refused}");
        let replicas = Replicas::new("postgres://u:secret@127.0.0.1:5432/db", Duration::from_secs(60)).unwrap();
        assert!(!replicas.shown().contains("secret"), "{}", replicas.shown());
        assert!(Replicas::new("postgresql://u@127.0.0.1/db", Duration::from_secs(60)).is_ok());
    }
}
