//! `carte test` on PostgreSQL: what a rehearsed transaction runs before its
//! statement (the database's `setup`, an example's rows), inside the
//! transaction that is then rolled back (see `Database::rehearse`).

use serde_json::{Map, Value};
use tokio_postgres::types::ToSql;

use super::reason;
use crate::effect::sql::named::translate;
use crate::effect::sql::pg_values::encode;

/// What a rehearsed transaction runs before its statement (see
/// [`super::Database::rehearse`]).
#[derive(Debug, Clone, Default)]
pub(super) struct Rehearsal {
    /// The database's `setup`.
    pub(super) setup: Vec<String>,
    /// Inserts of an example's rows, each with its values.
    pub(super) rows: Vec<(String, Map<String, Value>)>,
}

/// Begins a rehearsed transaction: `BEGIN`, the database's `setup`, then
/// the example's inserts; an error says which failed.
pub(super) async fn prepare_rehearsal(
    client: &deadpool_postgres::ClientWrapper,
    rehearsal: &Rehearsal,
) -> Result<(), String> {
    client.batch_execute("BEGIN").await.map_err(|err| reason(&err))?;
    for statement in &rehearsal.setup {
        client.batch_execute(statement).await.map_err(|err| format!("setup failed: {}", reason(&err)))?;
    }
    for (statement, values) in &rehearsal.rows {
        let translated = translate(statement).map_err(|refusal| refusal.message)?;
        let prepared = client.prepare(&translated.sql).await.map_err(|err| format!("{statement}: {}", reason(&err)))?;
        let mut params = Vec::with_capacity(translated.params.len());
        for (name, ty) in translated.params.iter().zip(prepared.params()) {
            params.push(encode(name, values.get(name), ty)?);
        }
        let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p as &(dyn ToSql + Sync)).collect();
        client.execute(&prepared, &refs).await.map_err(|err| format!("{statement}: {}", reason(&err)))?;
    }
    Ok(())
}
