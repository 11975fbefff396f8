//! `databases:`: each entry's URL, timeout, pool and `setup`, checked on a
//! scratch copy of its schema (SQLite) or in a transaction that is rolled
//! back (PostgreSQL) without changing anything; and applying `setup` for real
//! once a catalog is accepted.

use std::collections::HashMap;
use std::sync::Arc;

use indexmap::IndexMap;

use super::DatabaseSpec;
use super::engine::{self, Database, Options, Probe, SqlCause, Target, parse_url};
use crate::diag::{Diagnostic, Location};
use crate::duration::positive_at_most;
use crate::effect::block::Block;

/// A database of a catalog: loading checked its `setup` and statements on a
/// scratch copy; [`apply_setup`] applies `setup` for real.
pub struct DatabaseEntry {
    /// The database, shared with the catalog this one replaces if the URL is the same.
    pub database: Arc<Database>,
    /// Its `setup` statements, then those applying and recording its new
    /// migrations: what applying the catalog runs, in one transaction.
    pub setup: Vec<String>,
    /// Where each `setup` statement is declared.
    pub setup_locations: Vec<Location>,
    /// Where its `url` is declared.
    pub url_location: Location,
    /// How long one statement may run.
    pub timeout: std::time::Duration,
    /// Whether its statements run in read-only transactions.
    pub read_only: bool,
}

/// One `databases:` entry as declared.
pub type Declared<'a> = crate::effect::Declared<'a, DatabaseSpec>;

/// The checked `databases:` of a catalog being loaded: `sql`'s block.
#[derive(Default)]
pub struct Databases {
    /// Those that can be served, by name.
    pub entries: IndexMap<String, DatabaseEntry>,
    /// A scratch copy of each, with the new `setup` run on it, on which
    /// statements are prepared; dropped, uncommitted, with this.
    pub(super) probes: HashMap<String, Probe>,
    /// Every name declared, whether or not it could be opened.
    pub(super) declared: Vec<String>,
    /// The migration files read (a reload watches them).
    pub(super) files: Vec<std::path::PathBuf>,
}

/// Checks each database without changing it: its `setup` runs on a scratch
/// copy of its schema (see [`Probe`]), where the tools' statements are
/// prepared later. Nothing is opened for real here. A database of
/// `previous` (the catalog this one replaces) is kept where the URL is the
/// same.
fn check_databases(
    declared: &[Declared<'_>],
    previous: Option<&IndexMap<String, DatabaseEntry>>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Databases {
    let mut checked =
        Databases { declared: declared.iter().map(|d| d.name.to_owned()).collect(), ..Databases::default() };
    for decl in declared {
        let name = decl.name;
        let url_location = (decl.locate)("/url");
        let timeout = match decl
            .spec
            .timeout
            .as_ref()
            .map(|t| positive_at_most(t, engine::MAX_TIMEOUT, "a timeout", "stop every statement"))
        {
            None => engine::DEFAULT_TIMEOUT,
            Some(Ok(timeout)) => timeout,
            Some(Err(message)) => {
                let location = (decl.locate)("/timeout");
                error(diagnostics, "database-timeout", location, format!("database `{name}`: {message}")).hint = Some(
                    "write how long one statement may run, such as `500ms`, `5s` or `1m` (at most `1h`)".to_owned(),
                );
                continue;
            }
        };
        let pool_max = match decl.spec.pool.as_ref().and_then(|pool| pool.max) {
            None => engine::DEFAULT_POOL,
            Some(max @ 1..=1000) => usize::try_from(max).unwrap_or(engine::DEFAULT_POOL),
            Some(max) => {
                let location = (decl.locate)("/pool/max");
                let message = if max == 0 {
                    format!("database `{name}`: a pool of 0 connections could run no statement")
                } else {
                    format!("database `{name}`: a pool of {max} connections is more than carte opens (1000)")
                };
                error(diagnostics, "database-pool", location, message).hint = Some(
                    "`pool.max` is how many connections run statements at once: leave it out for 8, or write a number from 1 to 1000 (PostgreSQL allows 100 by default)"
                        .to_owned(),
                );
                continue;
            }
        };
        let options = Options { pool_max, read_only: decl.spec.read_only.unwrap_or(false) };
        let target = match parse_url(&decl.spec.url, &decl.base) {
            Ok(target) => target,
            Err(message) => {
                error(diagnostics, "database-url", url_location, format!("database `{name}`: {message}")).hint =
                    url_hint(&decl.spec.url);
                continue;
            }
        };
        let setup: Vec<String> =
            decl.spec.setup.as_ref().map(|s| s.list()).unwrap_or_default().into_iter().map(str::to_owned).collect();
        // A reload keeps the database it replaces (open, with its rows, or
        // its pool) if it is declared the same way: a file by its path,
        // preferably under the same name; an in-memory database or a
        // PostgreSQL one by its name.
        let taken = |db: &Arc<Database>| checked.entries.values().any(|e| Arc::ptr_eq(&e.database, db));
        let reused = previous.and_then(|previous| {
            let candidates =
                || previous.iter().filter(|(_, e)| e.database.serves(name, &target, options) && !taken(&e.database));
            candidates()
                .find(|(old_name, _)| *old_name == name)
                .or_else(|| candidates().find(|(_, e)| e.database.is_file()))
                .map(|(_, e)| e.database.clone())
        });
        let is_postgres = matches!(target, Target::Postgres(_));
        let database = match reused {
            Some(database) => database,
            None => match Database::new(name, target, options) {
                Ok(database) => Arc::new(database),
                Err(message) => {
                    error(
                        diagnostics,
                        "database-open",
                        url_location,
                        format!("cannot open database `{name}`: {message}"),
                    );
                    continue;
                }
            },
        };
        let mut probe = match database.probe(timeout) {
            Ok(probe) => probe,
            Err(failure) if is_postgres => {
                error(diagnostics, "database-unreachable", url_location, format!("database `{name}`: {failure}"))
                    .hint = Some(unreachable_hint(failure.cause));
                continue;
            }
            Err(message) => {
                error(diagnostics, "database-open", url_location, format!("cannot open database `{name}`: {message}"));
                continue;
            }
        };
        let many = matches!(decl.spec.setup, Some(super::Statements::Many(_)));
        let setup_locations: Vec<Location> = (0..setup.len())
            .map(|idx| {
                let pointer = if many { format!("/setup/{idx}") } else { "/setup".to_owned() };
                (decl.locate)(&pointer)
            })
            .collect();
        // What applying will do: run `setup` unless it is what was applied last.
        if database.applied().as_ref() != Some(&setup) {
            let failed = setup.iter().zip(&setup_locations).find_map(|(statement, location)| {
                probe.run_setup(statement).err().map(|failure| (failure, location.clone()))
            });
            if let Some((message, location)) = failed {
                let hint = setup_hint(message.cause);
                error(
                    diagnostics,
                    "database-setup",
                    location,
                    format!("setup of database `{name}` failed: {message}"),
                )
                .hint = Some(hint);
                continue;
            }
        }
        let Some(planned) = super::migrations::check(decl, &database, &mut probe, diagnostics) else { continue };
        checked.files.extend(planned.files);
        let mut setup = setup;
        let mut setup_locations = setup_locations;
        setup.extend(planned.statements);
        setup_locations.extend(planned.locations);
        checked.probes.insert(name.to_owned(), probe);
        checked.entries.insert(
            name.to_owned(),
            DatabaseEntry { database, setup, setup_locations, url_location, timeout, read_only: options.read_only },
        );
    }
    checked
}

/// What to do about a PostgreSQL URL that does not read (a SQLite one's
/// message says it already).
fn url_hint(url: &str) -> Option<String> {
    url.starts_with("postgres").then(|| {
        "write `postgres://user:password@host:5432/database` (percent-encode special characters in the password), or `${DATABASE_URL}`".to_owned()
    })
}

/// What to do about a PostgreSQL server that did not answer, for `cause`.
fn unreachable_hint(cause: SqlCause) -> String {
    match cause {
        SqlCause::Login => "check the user and password in `url` (they are never printed)".to_owned(),
        SqlCause::NoSuchDatabase => {
            "create that database first (`createdb`), or name one that exists in `url`".to_owned()
        }
        _ => "carte checks every statement against the database when it loads: start PostgreSQL, or check the host and port in `url` (`connect_timeout=` in the URL sets how long carte waits, 5s by default)".to_owned(),
    }
}

/// What to do about a `setup` statement that failed with the database's `message`.
fn setup_hint(cause: SqlCause) -> String {
    match cause {
        SqlCause::Syntax => "SQLite cannot read this statement: check the spelling of the word it names, and that every bracket and quote is closed".to_owned(),
        SqlCause::AlreadyThere => "setup runs at every start and at each reload that changes it, so it must succeed where it already ran: write CREATE TABLE IF NOT EXISTS …, INSERT … ON CONFLICT DO NOTHING (SQLite: INSERT OR IGNORE …)".to_owned(),
        SqlCause::Missing => "setup statements run in order: create a table before the statements that use it".to_owned(),
        _ => "setup statements run in order, on a scratch copy of the database when the catalog is checked".to_owned(),
    }
}

/// Reports an error and returns it, for its hint.
fn error<'d>(
    diagnostics: &'d mut Vec<Diagnostic>,
    code: &'static str,
    location: Location,
    message: String,
) -> &'d mut Diagnostic {
    diagnostics.push(Diagnostic::error(code, location, message));
    let last = diagnostics.len() - 1;
    &mut diagnostics[last]
}

impl Block for Databases {
    const KEY: &'static str = "databases";
    const ENTRY: &'static str = "database";
    const DUPLICATE: &'static str = "duplicate-database";

    type Spec = DatabaseSpec;
    type Entry = DatabaseEntry;

    fn check(
        declared: &[Declared<'_>],
        previous: Option<&IndexMap<String, DatabaseEntry>>,
        diagnostics: &mut Vec<Diagnostic>,
    ) -> Databases {
        check_databases(declared, previous, diagnostics)
    }

    fn declares(&self, name: &str) -> bool {
        self.declared.iter().any(|declared| declared == name)
    }

    fn files(&self) -> &[std::path::PathBuf] {
        &self.files
    }

    fn into_entries(self) -> IndexMap<String, DatabaseEntry> {
        self.entries
    }

    fn apply(entries: &IndexMap<String, DatabaseEntry>, fallback: &Location) -> Result<(), Vec<Diagnostic>> {
        apply_setup(entries, fallback)
    }

    /// A PostgreSQL database that does not answer a trivial query in time.
    async fn ready(entry: &DatabaseEntry) -> Result<(), String> {
        entry.database.ready().await
    }
}

/// Opens the databases of an accepted catalog and applies their `setup`
/// (each only if it changed since it was last applied), all or nothing; a
/// failure is a diagnostic at the statement or URL that failed (or at
/// `fallback`, the catalog's start, should it name neither).
fn apply_setup(databases: &IndexMap<String, DatabaseEntry>, fallback: &Location) -> Result<(), Vec<Diagnostic>> {
    let entries: Vec<(&String, &DatabaseEntry)> = databases.iter().collect();
    let plans: Vec<engine::SetupPlan<'_>> = entries
        .iter()
        .map(|(_, entry)| engine::SetupPlan {
            database: &entry.database,
            statements: &entry.setup,
            timeout: entry.timeout,
        })
        .collect();
    engine::apply_setup(&plans).map_err(|failure| {
        let Some((name, entry)) = entries.get(failure.plan) else {
            return vec![Diagnostic::error("database-setup", fallback.clone(), failure.error.message)];
        };
        let diagnostic = match failure.statement.and_then(|idx| entry.setup_locations.get(idx)) {
            Some(location) => {
                let mut diagnostic = Diagnostic::error(
                    "database-setup",
                    location.clone(),
                    format!("setup of database `{name}` failed: {}", failure.error),
                );
                diagnostic.hint = Some(setup_hint(failure.error.cause));
                diagnostic
            }
            None => Diagnostic::error(
                "database-open",
                entry.url_location.clone(),
                format!("cannot open database `{name}`: {}", failure.error),
            ),
        };
        vec![diagnostic]
    })
}
