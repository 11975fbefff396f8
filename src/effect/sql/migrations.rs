//! A database's `migrations:`: changes applied once each, in order, after
//! `setup`, and recorded in the database (table `carte_migrations`, with
//! each one's SQL). Checking compares what is declared with what the
//! database recorded (an applied migration may not change or vanish), runs
//! the new ones on the scratch copy, and plans them: each new migration's
//! SQL and the statements recording it join the statements applying the
//! catalog runs, in the same transaction as `setup` — all applied or none.

use std::path::PathBuf;

use super::databases::Declared;
use super::engine::{Database, Probe};
use crate::diag::{Diagnostic, Location};

/// The statements that apply the new migrations, each with where it is
/// declared, and the files they were read from (a reload watches them).
#[derive(Debug, Default)]
pub(super) struct Planned {
    pub statements: Vec<String>,
    pub locations: Vec<Location>,
    pub files: Vec<PathBuf>,
}

/// One migration as declared, its SQL read.
struct Migration {
    name: String,
    sql: String,
    /// Where its SQL is (`sql` or `file`).
    at: Location,
}

/// Checks the migrations of `decl` against what `database` recorded and
/// runs the new ones on `probe`; `None` once a mistake was reported.
pub(super) fn check(
    decl: &Declared<'_>,
    database: &Database,
    probe: &mut Probe,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<Planned> {
    let Some(specs) = decl.spec.migrations.as_ref() else { return Some(Planned::default()) };
    let name = decl.name;
    let mut planned = Planned::default();
    let mut declared: Vec<Migration> = Vec::new();
    let mut ok = true;
    for (idx, spec) in specs.iter().enumerate() {
        let at = format!("/migrations/{idx}");
        if let Some(first) = declared.iter().position(|m| m.name == spec.name) {
            let mut diagnostic = Diagnostic::error(
                "duplicate-migration",
                (decl.locate)(&format!("{at}/name")),
                format!("database `{name}` has two migrations named `{}`", spec.name),
            )
            .with_note("first declared here", (decl.locate)(&format!("/migrations/{first}/name")));
            diagnostic.hint = Some("each migration needs a name of its own, such as `003-index`".to_owned());
            diagnostics.push(diagnostic);
            ok = false;
            continue;
        }
        let (sql, location) = match (&spec.sql, &spec.file) {
            (Some(sql), None) => (sql.clone(), (decl.locate)(&format!("{at}/sql"))),
            (None, Some(file)) => {
                let path = decl.base.join(file);
                planned.files.push(path.clone());
                let location = (decl.locate)(&format!("{at}/file"));
                match std::fs::read_to_string(&path) {
                    Ok(sql) => (sql, location),
                    Err(err) => {
                        let message = format!("cannot read migration file `{}`: {err}", path.display());
                        let mut diagnostic = Diagnostic::error("migration-file", location, message);
                        diagnostic.hint = Some("`file` is relative to the catalog file that declares it".to_owned());
                        diagnostics.push(diagnostic);
                        ok = false;
                        continue;
                    }
                }
            }
            (sql, _) => {
                let both = sql.is_some();
                let message = match both {
                    true => format!("migration `{}` gives both `sql` and `file`", spec.name),
                    false => format!("migration `{}` gives neither `sql` nor `file`", spec.name),
                };
                let mut diagnostic = Diagnostic::error("migration-sql", (decl.locate)(&at), message);
                diagnostic.hint =
                    Some("write its SQL under `sql:`, or name the file holding it under `file:`".to_owned());
                diagnostics.push(diagnostic);
                ok = false;
                continue;
            }
        };
        declared.push(Migration { name: spec.name.clone(), sql, at: location });
    }
    if !ok {
        return None;
    }
    let recorded = match database.recorded_migrations(probe) {
        Ok(recorded) => recorded,
        Err(failure) => {
            diagnostics.push(Diagnostic::error(
                "database-migrations",
                (decl.locate)("/migrations"),
                format!("cannot read which migrations database `{name}` applied: {failure}"),
            ));
            return None;
        }
    };
    for (applied, sql) in &recorded {
        match declared.iter().find(|m| m.name == *applied) {
            None => {
                let message =
                    format!("migration `{applied}` was applied to database `{name}`, but is no longer declared");
                let mut diagnostic = Diagnostic::error("migration-removed", (decl.locate)("/migrations"), message);
                diagnostic.hint = Some(format!(
                    "an applied migration stays in the list: put `{applied}` back (it ran: {}), and undo what it did with a new migration",
                    one_line(sql)
                ));
                diagnostics.push(diagnostic);
                ok = false;
            }
            Some(migration) if migration.sql.trim() != sql.trim() => {
                let message = format!(
                    "migration `{applied}` was already applied to database `{name}` as `{}`; it may not change",
                    one_line(sql)
                );
                let mut diagnostic = Diagnostic::error("migration-changed", migration.at.clone(), message);
                diagnostic.hint =
                    Some("restore it as it was applied, and write the change as a new migration after it".to_owned());
                diagnostics.push(diagnostic);
                ok = false;
            }
            Some(_) => {}
        }
    }
    if !ok {
        return None;
    }
    for migration in declared.iter().filter(|m| !recorded.iter().any(|(applied, _)| *applied == m.name)) {
        let mut statements = vec![migration.sql.clone()];
        statements.extend(database.record_migration(&migration.name, migration.sql.trim()));
        for statement in statements {
            if let Err(failure) = probe.run_setup(&statement) {
                let message = format!("migration `{}` of database `{name}` failed: {failure}", migration.name);
                let mut diagnostic = Diagnostic::error("migration-failed", migration.at.clone(), message);
                diagnostic.hint = Some(
                    "migrations run in order after `setup`, on a scratch copy while checking: check the SQL against the tables as they are before it"
                        .to_owned(),
                );
                diagnostics.push(diagnostic);
                return None;
            }
            planned.statements.push(statement);
            planned.locations.push(migration.at.clone());
        }
    }
    Some(planned)
}

/// `sql` on one line, cut after 80 characters.
fn one_line(sql: &str) -> String {
    let line = sql.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(80) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line,
    }
}
