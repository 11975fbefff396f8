//! The `sql` runner: named SQLite databases, their `setup`, start-up checks
//! of each statement, and running one statement with `:named` parameters in
//! a transaction.
//!
//! rusqlite is synchronous; callers on the async side run [`Database::execute`]
//! on the blocking pool so a slow query never stalls other requests.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use base64::Engine as _;
use rusqlite::types::{Value as SqlValue, ValueRef};
use rusqlite::{Connection, OpenFlags};
use serde_json::{Map, Value};

/// How long a statement waits for a lock held by another connection.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// One open database.
#[derive(Debug)]
pub struct Database {
    /// Where it lives (`None` for `sqlite::memory:`).
    pub path: Option<PathBuf>,
    connection: Mutex<Connection>,
    /// The `setup` statements that last ran on it (a reload re-runs them only if they changed).
    setup: Mutex<Vec<String>>,
}

/// Why a statement failed when a tool ran.
#[derive(Debug, thiserror::Error)]
pub enum SqlError {
    /// A UNIQUE, NOT NULL, CHECK or FOREIGN KEY constraint refused the change.
    #[error("constraint failed: {0}")]
    Constraint(String),
    /// Anything else SQLite reported.
    #[error("database error: {0}")]
    Other(String),
}

/// Where a `sqlite:` URL points, relative paths resolved against `base`.
pub fn parse_url(url: &str, base: &Path) -> Result<Option<PathBuf>, String> {
    let Some(rest) = url.strip_prefix("sqlite:") else {
        let scheme = url.split(':').next().unwrap_or_default();
        return Err(if scheme.starts_with("postgres") {
            "PostgreSQL is not available in this version of carte; use a `sqlite:` URL".to_owned()
        } else {
            format!("unsupported database URL scheme `{scheme}:`; use `sqlite:path/to/file.db` or `sqlite::memory:`")
        });
    };
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    let rest = rest.split('?').next().unwrap_or_default();
    if rest == ":memory:" {
        return Ok(None);
    }
    if rest.is_empty() {
        return Err("the database URL has no path; write `sqlite:file.db`".to_owned());
    }
    let path = Path::new(rest);
    Ok(Some(if path.is_absolute() { path.to_path_buf() } else { base.join(path) }))
}

impl Database {
    /// Opens (creating if needed) the database at `path`, in WAL mode.
    pub fn open(path: Option<&Path>) -> Result<Database, String> {
        let connection = match path {
            Some(path) => {
                if let Some(parent) = path.parent()
                    && !parent.as_os_str().is_empty()
                    && !parent.is_dir()
                {
                    return Err(format!("folder `{}` does not exist", parent.display()));
                }
                Connection::open_with_flags(
                    path,
                    OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
                )
            }
            None => Connection::open_in_memory(),
        }
        .map_err(|err| err.to_string())?;
        connection.busy_timeout(BUSY_TIMEOUT).map_err(|err| err.to_string())?;
        if path.is_some() {
            // WAL lets readers proceed while a writer commits.
            let _mode: String =
                connection.query_row("PRAGMA journal_mode=WAL", [], |row| row.get(0)).map_err(|err| err.to_string())?;
        }
        Ok(Database { path: path.map(Path::to_path_buf), connection: Mutex::new(connection), setup: Mutex::default() })
    }

    /// The `setup` statements that last ran on this database.
    pub fn setup(&self) -> Vec<String> {
        self.setup.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Records that `statements` ran as this database's `setup`.
    pub fn set_setup(&self, statements: Vec<String>) {
        *self.setup.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = statements;
    }

    /// Runs one `setup` statement (or several, separated by `;`).
    pub fn run_setup(&self, statements: &str) -> Result<(), String> {
        let connection = self.lock();
        connection.execute_batch(statements).map_err(|err| tidy_message(&err.to_string(), statements))
    }

    /// Prepares `statement` without running it: the names of its `:params`,
    /// or SQLite's complaint (a wrong column or table name, a syntax error).
    pub fn check(&self, statement: &str) -> Result<Vec<String>, String> {
        let connection = self.lock();
        let prepared = connection.prepare(statement).map_err(|err| tidy_message(&err.to_string(), statement))?;
        let mut names = Vec::new();
        for idx in 1..=prepared.parameter_count() {
            match prepared.parameter_name(idx) {
                Some(name) if name.starts_with([':', '@', '$']) => names.push(name[1..].to_owned()),
                Some(name) => names.push(name.to_owned()),
                None => return Err("positional `?` parameters are not supported; use `:name`".to_owned()),
            }
        }
        Ok(names)
    }

    /// Runs `statement` with `arguments` bound to its `:params`, in a
    /// transaction, and returns the rows it produced (column → value).
    pub fn execute(
        &self,
        statement: &str,
        arguments: &Map<String, Value>,
    ) -> Result<Vec<Map<String, Value>>, SqlError> {
        let mut connection = self.lock();
        let transaction = connection.transaction().map_err(classify)?;
        let rows = {
            let mut prepared = transaction.prepare_cached(statement).map_err(classify)?;
            for idx in 1..=prepared.parameter_count() {
                let name = prepared.parameter_name(idx).map(|n| n[1..].to_owned()).unwrap_or_default();
                let value = arguments.get(&name).map(to_sql).unwrap_or(SqlValue::Null);
                prepared.raw_bind_parameter(idx, value).map_err(classify)?;
            }
            let columns: Vec<String> = prepared.column_names().map(str::to_owned).collect();
            let mut raw = prepared.raw_query();
            let mut rows = Vec::new();
            while let Some(row) = raw.next().map_err(classify)? {
                let mut record = Map::new();
                for (idx, column) in columns.iter().enumerate() {
                    record.insert(column.clone(), from_sql(row.get_ref(idx).map_err(classify)?));
                }
                rows.push(record);
            }
            rows
        };
        transaction.commit().map_err(classify)?;
        Ok(rows)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave SQLite inconsistent
        // (the transaction rolls back on drop), so a poisoned lock is usable.
        self.connection.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// SQLite repeats the whole statement in its messages (`… in SELECT … at
/// offset 7`); the diagnostic already points at it.
fn tidy_message(message: &str, statement: &str) -> String {
    let head: String = statement.trim_start().chars().take(12).collect();
    match message.find(&format!(" in {head}")) {
        Some(idx) if !head.is_empty() => message[..idx].to_owned(),
        _ => message.to_owned(),
    }
}

fn classify(err: rusqlite::Error) -> SqlError {
    match &err {
        rusqlite::Error::SqliteFailure(code, message) if code.code == rusqlite::ErrorCode::ConstraintViolation => {
            SqlError::Constraint(message.clone().unwrap_or_else(|| err.to_string()))
        }
        _ => SqlError::Other(err.to_string()),
    }
}

fn to_sql(value: &Value) -> SqlValue {
    match value {
        Value::Null => SqlValue::Null,
        Value::Bool(b) => SqlValue::Integer(i64::from(*b)),
        Value::Number(n) => match n.as_i64() {
            Some(i) => SqlValue::Integer(i),
            None => SqlValue::Real(n.as_f64().unwrap_or(0.0)),
        },
        Value::String(s) => SqlValue::Text(s.clone()),
        other => SqlValue::Text(other.to_string()),
    }
}

fn from_sql(value: ValueRef<'_>) -> Value {
    match value {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(i) => Value::from(i),
        ValueRef::Real(f) => serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number),
        ValueRef::Text(bytes) => Value::String(String::from_utf8_lossy(bytes).into_owned()),
        ValueRef::Blob(bytes) => Value::String(base64::engine::general_purpose::STANDARD.encode(bytes)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_statements_with_named_parameters() {
        let db = Database::open(None).unwrap();
        db.run_setup("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE)").unwrap();
        assert_eq!(db.check("INSERT INTO t (name) VALUES (:name) RETURNING id").unwrap(), vec!["name"]);
        let err = db.check("SELECT nme FROM t").unwrap_err();
        assert!(err.contains("no such column: nme"), "{err}");
        let args: Map<String, Value> = serde_json::from_str(r#"{"name":"a"}"#).unwrap();
        let rows = db.execute("INSERT INTO t (name) VALUES (:name) RETURNING id", &args).unwrap();
        assert_eq!(Value::Array(rows.into_iter().map(Value::Object).collect()), serde_json::json!([{"id": 1}]));
        let again = db.execute("INSERT INTO t (name) VALUES (:name) RETURNING id", &args);
        assert!(matches!(again, Err(SqlError::Constraint(_))), "{again:?}");
    }

    #[test]
    fn urls_resolve_beside_the_catalog() {
        let base = Path::new("/srv/cat");
        assert_eq!(parse_url("sqlite:x.db", base).unwrap(), Some(PathBuf::from("/srv/cat/x.db")));
        assert_eq!(parse_url("sqlite:///tmp/x.db", base).unwrap(), Some(PathBuf::from("/tmp/x.db")));
        assert_eq!(parse_url("sqlite::memory:", base).unwrap(), None);
        assert!(parse_url("postgres://u:secret@h/db", base).unwrap_err().contains("PostgreSQL"));
    }
}
