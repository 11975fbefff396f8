//! Checking a PostgreSQL database without changing it: [`Probe`], one
//! connection on a thread of its own holding one transaction where `setup`
//! runs and every statement is prepared (each inside a savepoint), rolled
//! back when the probe is dropped — PostgreSQL's DDL is transactional —
//! or committed to apply `setup` for real.
//!
//! Replicas started together must not run `setup` at once (two
//! `CREATE TABLE IF NOT EXISTS` racing end with a unique violation for one
//! of them): every probe holds the advisory lock [`SETUP_LOCK`] for its
//! transaction — shared to check (checks run side by side), exclusive to
//! apply, so one replica applies at a time and the next one checks and
//! applies against what it committed.

use std::sync::mpsc;
use std::time::Duration;

use tokio_postgres::error::{ErrorPosition, SqlState};
use tokio_postgres::{Client, Config, NoTls};

use super::{Target, failure, reason};
use crate::effect::sql::engine::{Refusal, RefusalKind, SqlFailure};
use crate::effect::sql::named::translate;

/// The advisory lock key of `setup` (`carte` in ASCII).
pub const SETUP_LOCK: i64 = 0x63_61_72_74_65;

/// What a probe is for, and so how it holds [`SETUP_LOCK`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// Checking a catalog: shared, rolled back.
    Check,
    /// Applying `setup`: exclusive, committed.
    Apply,
}

type Reply<T> = mpsc::SyncSender<T>;

enum Job {
    Batch(String, Reply<Result<(), SqlFailure>>),
    Check(String, Reply<Result<Vec<String>, Refusal>>),
    Names(Reply<(Vec<String>, Vec<String>)>),
    Recorded(Reply<Result<Vec<(String, String)>, SqlFailure>>),
    Commit(Reply<Result<(), String>>),
}

/// One connection, on a thread of its own, holding one transaction that is
/// rolled back when the probe is dropped (unless [`Probe::commit`]ted).
pub struct Probe {
    jobs: mpsc::Sender<Job>,
    /// How long one job may take before the probe gives up on it.
    bound: Duration,
    at: String,
}

impl Probe {
    /// Connects (bounded by the connect timeout) and begins the transaction.
    pub(super) fn open(target: &Target, timeout: Duration, purpose: Purpose) -> Result<Probe, SqlFailure> {
        let (jobs, inbox) = mpsc::channel::<Job>();
        let (opened, open_reply) = mpsc::sync_channel::<Result<(), SqlFailure>>(1);
        let (config, at) = (target.config.clone(), target.at.clone());
        let connect_timeout = target.connect_timeout;
        let bound = timeout + Duration::from_secs(1);
        std::thread::Builder::new()
            .name("carte-postgres-check".to_owned())
            .spawn(move || serve_probe(&config, (connect_timeout, timeout), purpose, &opened, &inbox))
            .map_err(|err| SqlFailure::other(format!("cannot start a thread to check the database: {err}")))?;
        let unreachable =
            |error: SqlFailure| SqlFailure { message: format!("{at} is unreachable: {}", error.message), ..error };
        match open_reply.recv_timeout(connect_timeout + bound) {
            Ok(Ok(())) => Ok(Probe { jobs, bound, at: at.clone() }),
            Ok(Err(error)) => Err(unreachable(error)),
            Err(_) => Err(unreachable(SqlFailure::other(format!(
                "no answer within {}s",
                (connect_timeout + bound).as_secs()
            )))),
        }
    }

    fn ask<T>(&self, job: impl FnOnce(Reply<T>) -> Job) -> Option<T> {
        let (reply, answer) = mpsc::sync_channel(1);
        self.jobs.send(job(reply)).ok()?;
        answer.recv_timeout(self.bound).ok()
    }

    fn lost(&self) -> String {
        format!("the connection to {} did not answer in time", self.at)
    }

    /// Runs `statements` (one or several separated by `;`).
    pub fn run_setup(&mut self, statements: &str) -> Result<(), SqlFailure> {
        self.ask(|reply| Job::Batch(statements.to_owned(), reply)).unwrap_or_else(|| Err(self.lost().into()))
    }

    /// Prepares `statement`: its `:params`, or why it does not prepare.
    pub fn check(&self, statement: &str) -> Result<Vec<String>, Refusal> {
        self.ask(|reply| Job::Check(statement.to_owned(), reply)).unwrap_or_else(|| Err(Refusal::said(self.lost())))
    }

    /// The tables and views on the search path, and their columns.
    pub fn names(&self) -> (Vec<String>, Vec<String>) {
        self.ask(Job::Names).unwrap_or_default()
    }

    /// The migrations recorded as applied (name, SQL), in order; none
    /// before the first was.
    pub fn recorded_migrations(&self) -> Result<Vec<(String, String)>, SqlFailure> {
        self.ask(Job::Recorded).unwrap_or_else(|| Err(self.lost().into()))
    }

    /// Commits what ran on it.
    pub fn commit(self) -> Result<(), String> {
        self.ask(Job::Commit).unwrap_or_else(|| Err(self.lost()))
    }
}

/// The probe's thread: a runtime of its own, one connection, one transaction.
fn serve_probe(
    config: &Config,
    (connect_timeout, timeout): (Duration, Duration),
    purpose: Purpose,
    opened: &Reply<Result<(), SqlFailure>>,
    inbox: &mpsc::Receiver<Job>,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            let _ = opened.send(Err(SqlFailure::other(format!("cannot start a runtime: {err}"))));
            return;
        }
    };
    let bound = timeout + Duration::from_millis(500);
    let client = runtime.block_on(async {
        let (client, connection) = tokio::time::timeout(connect_timeout, config.connect(NoTls))
            .await
            .map_err(|_| SqlFailure::other(format!("no answer within {}s", connect_timeout.as_secs())))?
            .map_err(|err| failure(&err))?;
        tokio::spawn(async move {
            if let Err(err) = connection.await {
                tracing::debug!("checking connection: {err}");
            }
        });
        let lock = match purpose {
            Purpose::Check => "pg_advisory_xact_lock_shared",
            Purpose::Apply => "pg_advisory_xact_lock",
        };
        let begin =
            format!("BEGIN; SET LOCAL statement_timeout = {}; SELECT {lock}({SETUP_LOCK})", timeout.as_millis());
        client.batch_execute(&begin).await.map_err(|err| match err.code() {
            Some(&SqlState::QUERY_CANCELED) => SqlFailure::other(format!(
                "another carte held the database's setup lock for longer than its timeout ({})",
                crate::duration::show_duration(timeout)
            )),
            _ => failure(&err),
        })?;
        Ok::<Client, SqlFailure>(client)
    });
    let client = match client {
        Ok(client) => {
            let _ = opened.send(Ok(()));
            client
        }
        Err(message) => {
            let _ = opened.send(Err(message));
            return;
        }
    };
    let late = || format!("no answer within {}", crate::duration::show_duration(timeout));
    while let Ok(job) = inbox.recv() {
        match job {
            Job::Batch(statements, reply) => {
                let done = within(&runtime, bound, client.batch_execute(&statements));
                let _ = reply.send(match done {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(err)) if err.code() == Some(&SqlState::QUERY_CANCELED) => Err(SqlFailure::other(format!(
                        "it ran longer than the database's timeout ({})",
                        crate::duration::show_duration(timeout)
                    ))),
                    Ok(Err(err)) => Err(failure(&err)),
                    Err(_) => Err(late().into()),
                });
            }
            Job::Check(statement, reply) => {
                let checked = within(&runtime, bound, check(&client, &statement));
                let _ = reply.send(checked.unwrap_or_else(|_| Err(Refusal::said(late()))));
            }
            Job::Names(reply) => {
                let _ = reply.send(within(&runtime, bound, names(&client)).unwrap_or_default());
            }
            Job::Recorded(reply) => {
                let read = within(&runtime, bound, recorded(&client));
                let _ = reply.send(match read {
                    Ok(Ok(recorded)) => Ok(recorded),
                    Ok(Err(err)) => Err(failure(&err)),
                    Err(_) => Err(late().into()),
                });
            }
            Job::Commit(reply) => {
                let done = within(&runtime, bound, client.batch_execute("COMMIT"));
                let _ = reply.send(match done {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(err)) => Err(reason(&err)),
                    Err(_) => Err(late()),
                });
                return;
            }
        }
    }
    if let Ok(Err(err)) = within(&runtime, bound, client.batch_execute("ROLLBACK")) {
        tracing::debug!("rolling back a check: {err}");
    }
}

/// The rows of `carte_migrations` (name, SQL) in the order they were
/// applied; none if there is no such table yet.
async fn recorded(client: &Client) -> Result<Vec<(String, String)>, tokio_postgres::Error> {
    let there = client.query_one("SELECT to_regclass('carte_migrations') IS NOT NULL", &[]).await?;
    if !there.get::<_, bool>(0) {
        return Ok(Vec::new());
    }
    let rows = client.query("SELECT name, sql FROM carte_migrations ORDER BY seq", &[]).await?;
    Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
}

/// Runs `work` on the probe's runtime, for at most `bound`.
fn within<F: Future>(
    runtime: &tokio::runtime::Runtime,
    bound: Duration,
    work: F,
) -> Result<F::Output, tokio::time::error::Elapsed> {
    runtime.block_on(async { tokio::time::timeout(bound, work).await })
}

/// Prepares `statement` inside a savepoint (a failure would end the
/// transaction otherwise).
async fn check(client: &Client, statement: &str) -> Result<Vec<String>, Refusal> {
    let translated = translate(statement)?;
    // What PostgreSQL said, `$n` written back as `:name`, and where it points.
    let refusal = |err: &tokio_postgres::Error| Refusal {
        message: translated.explain(&reason(err)),
        kind: match err.code() {
            Some(&SqlState::INDETERMINATE_DATATYPE) => RefusalKind::UntypedParameter,
            _ => RefusalKind::Other,
        },
        at: err.as_db_error().and_then(|db| match db.position() {
            Some(ErrorPosition::Original(position)) => {
                translated.original_range(statement, usize::try_from(*position).ok()?)
            }
            _ => None,
        }),
    };
    client.batch_execute("SAVEPOINT carte_check").await.map_err(|err| refusal(&err))?;
    let prepared = client.prepare(&translated.sql).await;
    let undo = if prepared.is_ok() { "RELEASE SAVEPOINT carte_check" } else { "ROLLBACK TO SAVEPOINT carte_check" };
    client.batch_execute(undo).await.map_err(|err| refusal(&err))?;
    prepared.map(|_| translated.params.clone()).map_err(|err| refusal(&err))
}

/// The tables and views on the search path, and their columns.
async fn names(client: &Client) -> (Vec<String>, Vec<String>) {
    let strings = |sql: &'static str| async move {
        client
            .query(sql, &[])
            .await
            .map(|rows| rows.iter().filter_map(|row| row.try_get::<_, String>(0).ok()).collect())
            .unwrap_or_default()
    };
    let tables = strings(
        "SELECT table_name::text FROM information_schema.tables \
         WHERE table_schema = ANY (current_schemas(false)) ORDER BY 1",
    )
    .await;
    let columns = strings(
        "SELECT column_name::text FROM information_schema.columns \
         WHERE table_schema = ANY (current_schemas(false)) GROUP BY 1 ORDER BY min(ordinal_position), 1",
    )
    .await;
    (tables, columns)
}
