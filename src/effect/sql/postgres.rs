//! PostgreSQL, one engine of the `sql` effect (see `engine.rs`), over
//! `tokio-postgres` with a `deadpool-postgres` pool (no TLS yet: the URL's
//! `sslmode` may be `disable` or `prefer`, which connects without it).
//!
//! Loading changes nothing: [`Probe`] (`postgres/probe.rs`) is one connection of its own, on a
//! thread of its own (loading is synchronous and may run inside or outside a
//! runtime), holding one transaction in which `setup` runs and every
//! statement is prepared (each inside a savepoint); dropping the probe rolls
//! it all back — PostgreSQL's DDL is transactional. Applying `setup` for real
//! is the same with `COMMIT` at the end.
//!
//! A call ([`Database::transact`]) takes a pooled connection and sends, in
//! one round trip, `BEGIN [READ ONLY]; SET LOCAL statement_timeout`, the
//! statement (prepared once per connection) and a question: did it write?
//! A read commits before its result renders; a write commits only once the
//! result rendered, and rolls back if it failed or took past the timeout. A
//! client-side deadline bounds everything; a call dropped while its
//! statement runs (cancelled) sends PostgreSQL a cancel request and closes
//! its connection, which rolls back whatever was not committed. A
//! connection that broke before the statement's result came back is
//! replaced and the statement sent again, once: nothing commits without the
//! `COMMIT` carte sends, so this never does a write twice.

use std::str::FromStr;
use std::sync::Mutex;
use std::time::Duration;

use crate::sync::lock;

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use futures::TryStreamExt;
use serde_json::{Map, Value};
use tokio::time::Instant;
use tokio_postgres::config::{Host, SslMode};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{CancelToken, Config, NoTls, SimpleQueryMessage};

use super::engine::{Aborted, Rows, SqlCause, SqlError, SqlFailure};
use super::named::{Translated, translate};
use super::pg_values::{Cell, encode};

mod probe;
mod rehearsal;
pub use probe::Probe;
use rehearsal::{Rehearsal, prepare_rehearsal};

/// How long connecting may take when the URL says nothing (`connect_timeout=`).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long `/readyz` waits for the database.
const READY_TIMEOUT: Duration = Duration::from_secs(2);

/// A `postgres://` URL, read.
#[derive(Clone)]
pub struct Target {
    config: Config,
    /// The URL as written, to tell whether a reload names the same database.
    url: String,
    /// `host:port` (or the socket folder), to name it in messages.
    pub at: String,
    connect_timeout: Duration,
}

impl Target {
    /// The connection settings: the URL's, with carte's defaults (a connect
    /// timeout, `application_name`, no notices below warnings).
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// How long connecting may take.
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// A pool of at most `max` connections to this database; nothing is
    /// connected yet. Making a connection and taking one back take at most
    /// the connect timeout; waiting for a free one at most `wait` (`None`:
    /// the caller bounds it).
    pub fn pool(&self, max: usize, wait: Option<Duration>) -> Result<Pool, String> {
        let manager =
            Manager::from_config(self.config.clone(), NoTls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
        Pool::builder(manager)
            .max_size(max)
            .runtime(Runtime::Tokio1)
            .create_timeout(Some(self.connect_timeout))
            .recycle_timeout(Some(self.connect_timeout))
            .wait_timeout(wait)
            .build()
            .map_err(|err| format!("cannot make a connection pool: {err}"))
    }
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Target({})", self.at) // never the password
    }
}

/// Reads a `postgres://` or `postgresql://` URL. Its password is never part
/// of a message.
pub fn parse_target(url: &str) -> Result<Target, String> {
    let mut config = Config::from_str(url).map_err(|err| {
        let reason = std::error::Error::source(&err).map(ToString::to_string).unwrap_or_else(|| err.to_string());
        format!("invalid PostgreSQL URL: {}", redact_in(&reason, url))
    })?;
    if config.get_ssl_mode() == SslMode::Require {
        return Err(
            "TLS is not supported yet: use `sslmode=disable` (or no `sslmode`) on a trusted network or a local socket"
                .to_owned(),
        );
    }
    let host = config.get_hosts().first().map(|host| match host {
        Host::Tcp(name) => name.clone(),
        Host::Unix(path) => path.display().to_string(),
    });
    let Some(host) = host else {
        return Err("the URL names no host; write `postgres://user@host:5432/database`".to_owned());
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let at = if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
    let connect_timeout = config.get_connect_timeout().copied().unwrap_or(CONNECT_TIMEOUT);
    config.connect_timeout(connect_timeout);
    if config.get_application_name().is_none() {
        config.application_name("carte");
    }
    // `NOTICE: relation … already exists, skipping` from an idempotent
    // `setup` is not worth a log line at every start.
    let options = config.get_options().map_or_else(String::new, |o| format!("{o} "));
    config.options(format!("{options}-c client_min_messages=warning"));
    Ok(Target { config, url: url.to_owned(), at, connect_timeout })
}

/// `reason` without the URL's password, should it quote it.
fn redact_in(reason: &str, url: &str) -> String {
    match password_of(url) {
        Some(password) if !password.is_empty() => reason.replace(password, "***"),
        _ => reason.to_owned(),
    }
}

/// The password of a `scheme://user:password@host` URL, as written.
fn password_of(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let userinfo = &rest[..rest.rfind('@')?];
    Some(userinfo.split_once(':')?.1)
}

/// A URL as it may be shown: `postgres://user:***@host/db`.
pub fn redact(url: &str) -> String {
    match password_of(url) {
        Some(password) if !password.is_empty() => url.replacen(&format!(":{password}@"), ":***@", 1),
        _ => url.to_owned(),
    }
}

/// A PostgreSQL database of a catalog: its pool, opened lazily (the first
/// call connects), kept across reloads that declare it the same way.
pub struct Database {
    /// Its name in the catalog, for messages.
    name: String,
    target: Target,
    pool: Pool,
    pool_max: usize,
    read_only: bool,
    /// The `setup` last committed (`None`: never, by this process).
    applied: Mutex<Option<Vec<String>>>,
    /// Under `carte test`: what each transaction runs first; every
    /// transaction is then rolled back, never committed.
    rehearsal: Mutex<Option<Rehearsal>>,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "postgres::Database({}, {})", self.name, self.target.at)
    }
}

impl Database {
    /// A pool of at most `pool_max` connections to `target`; nothing is
    /// connected yet.
    pub fn new(name: &str, target: Target, pool_max: usize, read_only: bool) -> Result<Database, String> {
        // A call's wait for a connection is bounded by its statement's timeout.
        let pool = target.pool(pool_max, None)?;
        Ok(Database {
            name: name.to_owned(),
            target,
            pool,
            pool_max,
            read_only,
            applied: Mutex::default(),
            rehearsal: Mutex::default(),
        })
    }

    /// Whether this database is declared so (a reload keeps it, with its pool).
    pub fn serves(&self, name: &str, target: &Target, pool_max: usize, read_only: bool) -> bool {
        self.name == name && self.target.url == target.url && self.pool_max == pool_max && self.read_only == read_only
    }

    /// `host:port`.
    pub fn at(&self) -> &str {
        &self.target.at
    }

    /// The `setup` last committed by this process.
    pub fn applied(&self) -> Option<Vec<String>> {
        lock(&self.applied).clone()
    }

    /// A connection of its own holding one transaction, never committed,
    /// where `setup` runs and statements are prepared.
    pub fn probe(&self, timeout: Duration) -> Result<Probe, SqlFailure> {
        Probe::open(&self.target, timeout, probe::Purpose::Check)
    }

    /// Like [`Database::probe`], to apply `setup` (committed): one process
    /// at a time (see `probe`).
    pub fn setup_probe(&self, timeout: Duration) -> Result<Probe, SqlFailure> {
        Probe::open(&self.target, timeout, probe::Purpose::Apply)
    }

    /// After `setup` committed: remembers it, and forgets the statements
    /// prepared on pooled connections (the tables they read may have changed).
    pub fn setup_applied(&self, statements: &[String]) {
        *lock(&self.applied) = Some(statements.to_vec());
        self.pool.manager().statement_caches.clear();
    }

    /// From now on, every transaction is rolled back instead of committed
    /// (`carte test`): it first runs `setup` (see
    /// [`Database::rehearse_setup`]) and the rows an example inserts
    /// ([`Database::rehearse_insert`]), then its statement, all inside it.
    pub fn rehearse(&self) -> Result<(), SqlFailure> {
        *lock(&self.rehearsal) = Some(Rehearsal::default());
        Ok(())
    }

    /// Whether its transactions are rolled back (see [`Database::rehearse`]).
    pub fn rehearsing(&self) -> bool {
        lock(&self.rehearsal).is_some()
    }

    /// Under rehearsal: the `setup` each transaction runs first.
    pub fn rehearse_setup(&self, statements: &[String]) {
        if let Some(rehearsal) = lock(&self.rehearsal).as_mut() {
            rehearsal.setup = statements.to_vec();
        }
    }

    /// Under rehearsal: an insert each transaction runs first, after `setup`.
    pub fn rehearse_insert(&self, statement: String, values: Map<String, Value>) {
        if let Some(rehearsal) = lock(&self.rehearsal).as_mut() {
            rehearsal.rows.push((statement, values));
        }
    }

    /// Whether it answers now (for `/readyz`), and if not, why.
    pub async fn ready(&self) -> Result<(), String> {
        let answered = tokio::time::timeout(READY_TIMEOUT, async {
            let client = self.pool.get().await.map_err(|err| pool_reason(&err))?;
            client.simple_query("").await.map(|_| ()).map_err(|err| reason(&err))
        })
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {}s", READY_TIMEOUT.as_secs())));
        answered.map_err(|reason| self.unreachable(&reason))
    }

    fn unreachable(&self, reason: &str) -> String {
        format!("database `{}` ({}) is unreachable: {reason}", self.name, self.target.at)
    }

    /// Runs `statement` and `finish` in one transaction: see the module's
    /// documentation and [`super::engine::Database::transact`].
    pub async fn transact<T, E, F, Fut>(
        &self,
        statement: &str,
        arguments: Map<String, Value>,
        timeout: Duration,
        finish: F,
    ) -> Result<T, Aborted<E>>
    where
        F: FnOnce(Rows) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let fail = |err| Err(Aborted::Statement(err));
        let translated = match translate(statement) {
            Ok(translated) => translated,
            Err(refusal) => return fail(SqlError::Other(refusal.message)),
        };
        let deadline = Instant::now() + timeout;
        let rehearsal = lock(&self.rehearsal).clone();
        // A rehearsal's transaction has begun already (its setup and rows ran first).
        let begin = format!(
            "{}; SET LOCAL statement_timeout = {}",
            match (&rehearsal, self.read_only) {
                (Some(_), _) => "SELECT 1",
                (None, true) => "BEGIN READ ONLY",
                (None, false) => "BEGIN",
            },
            timeout.as_millis()
        );
        let commit = if rehearsal.is_some() { "ROLLBACK" } else { "COMMIT" };
        let mut attempts = 0;
        let (mut session, rows) = loop {
            attempts += 1;
            let mut session = match tokio::time::timeout_at(deadline, self.pool.get()).await {
                Ok(Ok(client)) => Session::new(client),
                Ok(Err(err)) => return fail(SqlError::Unreachable(self.unreachable(&pool_reason(&err)))),
                Err(_) => {
                    return fail(SqlError::Other(format!(
                        "all {} connections to database `{}` stayed busy for the whole timeout ({}); nothing was run",
                        self.pool_max,
                        self.name,
                        crate::duration::show_duration(timeout)
                    )));
                }
            };
            if let Some(rehearsal) = &rehearsal {
                match tokio::time::timeout_at(deadline, prepare_rehearsal(session.client(), rehearsal)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(message)) => {
                        let _ = session.end("ROLLBACK").await;
                        return fail(SqlError::Other(message));
                    }
                    Err(_) => return fail(SqlError::Timeout(timeout)),
                }
            }
            let ran = tokio::time::timeout_at(deadline, run(session.client(), &translated, &arguments, &begin)).await;
            match ran {
                Err(_) => return fail(SqlError::Timeout(timeout)), // the session cancels it
                Ok(Ok(rows)) => break (session, rows),
                Ok(Err(Ran::Argument(message))) => {
                    session.clean = true; // nothing was sent
                    return fail(SqlError::Argument(message));
                }
                Ok(Err(Ran::Failed(err))) if err.as_db_error().is_none() && !is_decoding(&err) => {
                    // The connection broke before COMMIT: nothing was done.
                    if attempts < 2 && Instant::now() < deadline {
                        tracing::debug!("database `{}`: a pooled connection broke ({err}); trying another", self.name);
                        continue;
                    }
                    return fail(SqlError::Unreachable(self.unreachable(&reason(&err))));
                }
                Ok(Err(Ran::Failed(err))) => {
                    let _ = session.end("ROLLBACK").await;
                    return fail(classify(&err, timeout, &translated, self.read_only));
                }
            }
        };
        let committed = |ended: Result<(), Option<tokio_postgres::Error>>| match ended {
            Ok(()) => Ok(()),
            Err(Some(err)) => Err(classify(&err, timeout, &translated, self.read_only)),
            Err(None) => Err(SqlError::Other(format!(
                "COMMIT did not answer within {}s; the connection was closed, so the change was most likely not kept",
                CONNECT_TIMEOUT.as_secs()
            ))),
        };
        if !rows.wrote {
            if let Err(err) = committed(session.end(commit).await) {
                return fail(err);
            }
            drop(session); // back to the pool before the result renders
            return finish(rows).await.map_err(|reason| Aborted::Refused { reason, rolled_back: false });
        }
        match tokio::time::timeout_at(deadline, finish(rows)).await {
            Ok(Ok(value)) => match committed(session.end(commit).await) {
                Ok(()) => Ok(value),
                Err(err) => fail(err),
            },
            Ok(Err(reason)) => {
                let _ = session.end("ROLLBACK").await;
                Err(Aborted::Refused { reason, rolled_back: true })
            }
            Err(_) => {
                let _ = session.end("ROLLBACK").await;
                fail(SqlError::Unfinished(timeout))
            }
        }
    }
}

/// How running a statement failed.
enum Ran {
    /// An argument does not fit its parameter's type; nothing was sent.
    Argument(String),
    /// PostgreSQL or the connection said no.
    Failed(tokio_postgres::Error),
}

/// Sends `BEGIN; SET LOCAL …`, the statement and "did it write?" in one
/// round trip, and reads at most the rows [`Rows::keep`] keeps.
async fn run(
    client: &deadpool_postgres::ClientWrapper,
    translated: &Translated,
    arguments: &Map<String, Value>,
    begin: &str,
) -> Result<Rows, Ran> {
    let prepared = client.prepare_cached(&translated.sql).await.map_err(Ran::Failed)?;
    let mut params = Vec::with_capacity(translated.params.len());
    for (name, ty) in translated.params.iter().zip(prepared.params()) {
        params.push(encode(name, arguments.get(name), ty).map_err(Ran::Argument)?);
    }
    let read = async {
        let stream = client.query_raw(&prepared, params.iter().map(|p| p as &(dyn ToSql + Sync))).await?;
        let mut stream = std::pin::pin!(stream);
        let mut rows = Rows::default();
        while let Some(row) = stream.try_next().await? {
            let mut record = Map::new();
            for (idx, column) in row.columns().iter().enumerate() {
                let Cell(value) = row.try_get(idx)?;
                record.insert(column.name().to_owned(), value);
            }
            if !rows.keep(record) {
                break;
            }
        }
        Ok::<_, tokio_postgres::Error>(rows)
    };
    let (began, rows, wrote) = futures::join!(
        client.batch_execute(begin),
        read,
        client.simple_query("SELECT txid_current_if_assigned() IS NOT NULL")
    );
    began.map_err(Ran::Failed)?;
    let mut rows = rows.map_err(Ran::Failed)?;
    rows.wrote =
        wrote.map_err(Ran::Failed)?.iter().any(|m| matches!(m, SimpleQueryMessage::Row(r) if r.get(0) == Some("t")));
    Ok(rows)
}

/// A pooled connection in use. Dropped before its transaction ended (the
/// call was cancelled, or ran out of time), it sends PostgreSQL a cancel
/// request and closes the connection rather than giving it back, so the
/// server stops the statement and rolls back.
struct Session {
    client: Option<Object>,
    cancel: CancelToken,
    clean: bool,
}

impl Session {
    fn new(client: Object) -> Session {
        let cancel = client.cancel_token();
        Session { client: Some(client), cancel, clean: false }
    }

    fn client(&self) -> &deadpool_postgres::ClientWrapper {
        // `client` is `None` only while dropping.
        self.client.as_deref().unwrap_or_else(|| unreachable!("a session keeps its connection until dropped"))
    }

    /// Ends the transaction (`COMMIT` or `ROLLBACK`); the connection goes
    /// back to the pool only if that worked. `Err(None)`: no answer in time
    /// (the connection is closed, which rolls back what was not committed).
    async fn end(&mut self, sql: &str) -> Result<(), Option<tokio_postgres::Error>> {
        let ended = tokio::time::timeout(CONNECT_TIMEOUT, self.client().batch_execute(sql)).await;
        match ended {
            Ok(Ok(())) => {
                self.clean = true;
                Ok(())
            }
            Ok(Err(err)) => {
                tracing::debug!("{sql} failed: {err}");
                Err(Some(err))
            }
            Err(_) => {
                tracing::warn!("{sql} did not answer within {}s; closing that connection", CONNECT_TIMEOUT.as_secs());
                Err(None)
            }
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if self.clean {
            return;
        }
        if let Some(client) = self.client.take() {
            drop(Object::take(client));
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let cancel = self.cancel.clone();
            runtime.spawn(async move {
                if let Err(err) = cancel.cancel_query(NoTls).await {
                    tracing::debug!("cancelling a statement: {err}");
                }
            });
        }
    }
}

/// A decoding failure is the statement's, not the connection's.
fn is_decoding(err: &tokio_postgres::Error) -> bool {
    let text = err.to_string();
    text.starts_with("error deserializing") || text.starts_with("error serializing")
}

/// A failed statement as a tool's error.
fn classify(err: &tokio_postgres::Error, timeout: Duration, translated: &Translated, read_only: bool) -> SqlError {
    let Some(db) = err.as_db_error() else { return SqlError::Other(reason(err)) };
    let message = translated.explain(&db_message(db));
    match db.code() {
        &SqlState::QUERY_CANCELED => SqlError::Timeout(timeout),
        code if code.code().starts_with("23") => SqlError::Constraint(message),
        &SqlState::READ_ONLY_SQL_TRANSACTION if read_only => {
            SqlError::Other(format!("{message} (this database is declared `readOnly: true`)"))
        }
        _ => SqlError::Other(message),
    }
}

/// PostgreSQL's message with its detail and hint.
fn db_message(db: &tokio_postgres::error::DbError) -> String {
    let mut message = db.message().to_owned();
    if let Some(detail) = db.detail() {
        message.push_str(&format!(" ({detail})"));
    }
    message
}

/// Why a connection or statement failed, in words, and of what kind (read
/// from its SQLSTATE).
pub(super) fn failure(err: &tokio_postgres::Error) -> SqlFailure {
    let cause = match err.code() {
        Some(code) if *code == SqlState::SYNTAX_ERROR => SqlCause::Syntax,
        Some(code)
            if [SqlState::DUPLICATE_TABLE, SqlState::DUPLICATE_OBJECT, SqlState::UNIQUE_VIOLATION].contains(code) =>
        {
            SqlCause::AlreadyThere
        }
        Some(code)
            if [SqlState::UNDEFINED_TABLE, SqlState::UNDEFINED_COLUMN, SqlState::UNDEFINED_FUNCTION].contains(code) =>
        {
            SqlCause::Missing
        }
        Some(code) if [SqlState::INVALID_PASSWORD, SqlState::INVALID_AUTHORIZATION_SPECIFICATION].contains(code) => {
            SqlCause::Login
        }
        Some(code) if *code == SqlState::INVALID_CATALOG_NAME => SqlCause::NoSuchDatabase,
        // The client gave up before the server could say (no password to send):
        // the driver tells this kind only in its words.
        None if err.to_string().starts_with("error performing authentication") => SqlCause::Login,
        _ => SqlCause::Other,
    };
    SqlFailure { cause, message: reason(err) }
}

/// Why a connection or statement failed, in words (the cause included).
pub(super) fn reason(err: &tokio_postgres::Error) -> String {
    if let Some(db) = err.as_db_error() {
        return db_message(db);
    }
    match std::error::Error::source(err) {
        Some(source) => format!("{err}: {source}"),
        None => err.to_string(),
    }
}

fn pool_reason(err: &deadpool_postgres::PoolError) -> String {
    match err {
        deadpool_postgres::PoolError::Backend(err) => reason(err),
        deadpool_postgres::PoolError::Timeout(_) => "no connection within the connect timeout".to_owned(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_show() {
        let url = "postgres://shop:s3cr%t@db.internal:6432/shop?sslmode=disable";
        assert_eq!(redact(url), "postgres://shop:***@db.internal:6432/shop?sslmode=disable");
        assert_eq!(redact("postgres://shop@db/shop"), "postgres://shop@db/shop");
        let target = parse_target("postgres://shop:hunter2@db.internal:6432/shop").unwrap();
        assert_eq!(target.at, "db.internal:6432");
        assert!(!format!("{target:?}").contains("hunter2"));
        let err = parse_target("postgres://shop:hunter2@db.internal:port/shop").unwrap_err();
        assert!(err.starts_with("invalid PostgreSQL URL"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
    }

    #[test]
    fn tls_is_refused_until_supported() {
        let err = parse_target("postgres://u@h/db?sslmode=require").unwrap_err();
        assert!(err.contains("sslmode=disable"), "{err}");
        assert_eq!(parse_target("postgres://u@h/db").unwrap().at, "h:5432");
    }
}
