//! Databases: each entry's URL, timeout and `setup`, checked on a scratch
//! copy of its schema.

use std::sync::Arc;

use crate::catalog::DatabaseEntry;
use crate::catalog::model::DurationSpec;
use crate::diag::Location;
use crate::run::sql::{self, Database, parse_url};

use super::Builder;
use super::tools::millis_of;

impl Builder<'_> {
    /// Checks each database without changing it: its `setup` runs on a
    /// scratch copy of its schema (see [`Probe`]), where the tools'
    /// statements are prepared later. Nothing is opened for real here.
    pub(super) fn open_databases(&mut self) {
        for (name, decl) in &self.assembled.databases {
            let base = self.assembled.base_dir(&decl.origin);
            let url_location = self.assembled.locate(&decl.origin, "/url");
            let timeout = match decl.spec.timeout.as_ref().map(parse_timeout) {
                None => sql::DEFAULT_TIMEOUT,
                Some(Ok(timeout)) => timeout,
                Some(Err(message)) => {
                    let location = self.assembled.locate(&decl.origin, "/timeout");
                    self.error("database-timeout", location, format!("database `{name}`: {message}")).hint = Some(
                        "write how long one statement may run, such as `500ms`, `5s` or `1m` (at most `1h`)".to_owned(),
                    );
                    continue;
                }
            };
            let path = match parse_url(&decl.spec.url, &base) {
                Ok(path) => path,
                Err(message) => {
                    self.error("database-url", url_location, format!("database `{name}`: {message}"));
                    continue;
                }
            };
            let setup: Vec<String> =
                decl.spec.setup.as_ref().map(|s| s.list()).unwrap_or_default().into_iter().map(str::to_owned).collect();
            // A reload keeps the database it replaces (open, with its rows) if
            // the URL is the same: a file by its path, preferably under the same
            // name; an in-memory database by its name.
            let taken = |db: &Arc<Database>| self.databases.values().any(|e| Arc::ptr_eq(&e.database, db));
            let reused = self.previous.and_then(|previous| {
                let candidates =
                    || previous.databases.iter().filter(|(_, e)| e.database.path == path && !taken(&e.database));
                candidates()
                    .find(|(old_name, _)| *old_name == name)
                    .or_else(|| path.is_some().then(|| candidates().next()).flatten())
                    .map(|(_, e)| e.database.clone())
            });
            let database = match reused {
                Some(database) => database,
                None => match Database::new(path) {
                    Ok(database) => Arc::new(database),
                    Err(message) => {
                        self.error("database-open", url_location, format!("cannot open database `{name}`: {message}"));
                        continue;
                    }
                },
            };
            let mut probe = match database.probe(timeout) {
                Ok(probe) => probe,
                Err(message) => {
                    self.error("database-open", url_location, format!("cannot open database `{name}`: {message}"));
                    continue;
                }
            };
            let many = matches!(decl.spec.setup, Some(crate::catalog::model::Statements::Many(_)));
            let setup_locations: Vec<Location> = (0..setup.len())
                .map(|idx| {
                    let pointer = if many { format!("/setup/{idx}") } else { "/setup".to_owned() };
                    self.assembled.locate(&decl.origin, &pointer)
                })
                .collect();
            // What applying will do: run `setup` unless it is what was applied last.
            if database.applied().as_ref() != Some(&setup) {
                let failed = setup.iter().zip(&setup_locations).find_map(|(statement, location)| {
                    probe.run_setup(statement).err().map(|message| (message, location.clone()))
                });
                if let Some((message, location)) = failed {
                    let hint = setup_hint(&message);
                    self.error("database-setup", location, format!("setup of database `{name}` failed: {message}"))
                        .hint = Some(hint);
                    continue;
                }
            }
            self.probes.insert(name.clone(), probe);
            self.databases
                .insert(name.clone(), DatabaseEntry { database, setup, setup_locations, url_location, timeout });
        }
    }
}

/// What to do about a `setup` statement that failed with SQLite's `message`.
pub(in crate::catalog) fn setup_hint(message: &str) -> String {
    if message.contains("syntax error")
        || message.contains("incomplete input")
        || message.contains("unrecognized token")
    {
        "SQLite cannot read this statement: check the spelling of the word it names, and that every bracket and quote is closed".to_owned()
    } else if message.contains("already exists") || message.contains("UNIQUE constraint") {
        "setup runs at every start and at each reload that changes it, so it must succeed where it already ran: write CREATE TABLE IF NOT EXISTS …, INSERT OR IGNORE …".to_owned()
    } else if message.contains("no such") {
        "setup statements run in order: create a table before the statements that use it".to_owned()
    } else {
        "setup statements run in order, on a scratch copy of the database when the catalog is checked".to_owned()
    }
}

/// Reads a database's `timeout`: more than zero, at most an hour.
pub(super) fn parse_timeout(spec: &DurationSpec) -> Result<std::time::Duration, String> {
    let millis = match spec {
        DurationSpec::Millis(ms) => *ms,
        DurationSpec::Text(text) => millis_of(text)?,
    };
    let timeout = std::time::Duration::from_millis(millis);
    if millis == 0 {
        return Err("a timeout of 0 would stop every statement".to_owned());
    }
    if timeout > sql::MAX_TIMEOUT {
        return Err(format!("a timeout of {} is longer than 1h", sql::show_duration(timeout)));
    }
    Ok(timeout)
}
