//! [`PgTaskStore`]: the tasks of every replica in the `carte_tasks` table,
//! with [`MemoryStore`](crate::server::tasks::MemoryStore)'s semantics and
//! bounds (256 per owner, 4,096 in all; a settled task is kept one ttl).
//!
//! A row is the [`TaskRecord`] as JSON, with its owner and when it is
//! dropped (`expires_ms`): one ttl after it settled, and while it runs, two
//! ttls after it was created — a run lasts at most its ttl, so a row whose
//! replica died mid-run is dropped too. Every method is one statement or one
//! transaction (a change locks its row); creating one sweeps the expired rows
//! and counts under an advisory lock, so two replicas cannot both take the
//! last place.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::Replicas;
use crate::server::tasks::{State, StoreError, StoreFuture, TaskRecord, TaskStore, now_ms, refusal};

/// The advisory lock creating a task holds ("task" in ASCII).
const CREATE_LOCK: i64 = 0x74_61_73_6b;

/// Tasks in the state database.
pub struct PgTaskStore {
    replicas: Arc<Replicas>,
}

impl PgTaskStore {
    /// Tasks in `replicas`' database.
    pub fn new(replicas: Arc<Replicas>) -> PgTaskStore {
        PgTaskStore { replicas }
    }
}

fn failed(err: impl std::fmt::Display) -> StoreError {
    StoreError::Failed(format!("the state database failed: {err}"))
}

/// ms as PostgreSQL's bigint.
fn sql_ms(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

fn to_json(record: &TaskRecord) -> Result<Value, StoreError> {
    serde_json::to_value(record).map_err(|err| failed(format!("a task is not JSON: {err}")))
}

fn from_json(value: Value) -> Result<TaskRecord, StoreError> {
    serde_json::from_value(value).map_err(|err| failed(format!("a task row is not a task: {err}")))
}

/// Runs `change` on task `id` (of `owner`, if given) in one transaction,
/// its row locked; `None` if it is unknown (or expired).
async fn change<T>(
    store: &PgTaskStore,
    id: &str,
    owner: Option<&str>,
    change: impl FnOnce(&mut TaskRecord, u64) -> (T, Option<u64>),
) -> Result<Option<T>, StoreError> {
    let mut client = store.replicas.client().await.map_err(StoreError::Failed)?;
    let transaction = client.transaction().await.map_err(failed)?;
    let now = now_ms();
    let row = transaction
        .query_opt(
            "SELECT record FROM carte_tasks WHERE id = $1 AND ($2::text IS NULL OR owner = $2) AND expires_ms > $3 FOR UPDATE",
            &[&id, &owner, &sql_ms(now)],
        )
        .await
        .map_err(failed)?;
    let Some(row) = row else { return Ok(None) };
    let mut record = from_json(row.try_get(0).map_err(failed)?)?;
    let (answer, expires) = change(&mut record, now);
    let record = to_json(&record)?;
    transaction
        .execute(
            "UPDATE carte_tasks SET record = $2, expires_ms = coalesce($3, expires_ms) WHERE id = $1",
            &[&id, &record, &expires.map(sql_ms)],
        )
        .await
        .map_err(failed)?;
    transaction.commit().await.map_err(failed)?;
    Ok(Some(answer))
}

impl TaskStore for PgTaskStore {
    fn create(&self, record: TaskRecord) -> StoreFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let mut client = self.replicas.client().await.map_err(StoreError::Failed)?;
            let transaction = client.transaction().await.map_err(failed)?;
            let now = sql_ms(now_ms());
            transaction.execute("SELECT pg_advisory_xact_lock($1)", &[&CREATE_LOCK]).await.map_err(failed)?;
            transaction.execute("DELETE FROM carte_tasks WHERE expires_ms <= $1", &[&now]).await.map_err(failed)?;
            let counts = transaction
                .query_one("SELECT count(*) FILTER (WHERE owner = $1), count(*) FROM carte_tasks", &[&record.owner])
                .await
                .map_err(failed)?;
            let count = |at: usize| -> Result<usize, StoreError> {
                let n: i64 = counts.try_get(at).map_err(failed)?;
                Ok(usize::try_from(n).unwrap_or(usize::MAX))
            };
            if let Some(message) = refusal(count(0)?, count(1)?) {
                return Err(StoreError::Full(message));
            }
            // A run lasts at most its ttl, then the task is kept one more.
            let expires = sql_ms(record.created_ms.saturating_add(record.ttl_ms.saturating_mul(2)));
            transaction
                .execute(
                    "INSERT INTO carte_tasks (id, owner, record, expires_ms) VALUES ($1, $2, $3, $4)",
                    &[&record.id, &record.owner, &to_json(&record)?, &expires],
                )
                .await
                .map_err(failed)?;
            transaction.commit().await.map_err(failed)
        })
    }

    fn get<'a>(&'a self, owner: &'a str, id: &'a str) -> StoreFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        Box::pin(async move {
            let client = self.replicas.client().await.map_err(StoreError::Failed)?;
            let row = client
                .query_opt(
                    "SELECT record FROM carte_tasks WHERE id = $1 AND owner = $2 AND expires_ms > $3",
                    &[&id, &owner, &sql_ms(now_ms())],
                )
                .await
                .map_err(failed)?;
            row.map(|row| from_json(row.try_get(0).map_err(failed)?)).transpose()
        })
    }

    fn set<'a>(&'a self, id: &'a str, state: State) -> StoreFuture<'a, Result<(), StoreError>> {
        Box::pin(async move { change(self, id, None, |record, now| ((), record.settle(state, now))).await.map(drop) })
    }

    fn answer<'a>(
        &'a self,
        owner: &'a str,
        id: &'a str,
        answers: Map<String, Value>,
    ) -> StoreFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let answered = change(self, id, Some(owner), |record, now| {
                record.answer(answers, now);
                ((), None)
            })
            .await?;
            Ok(answered.is_some())
        })
    }

    fn take_answers<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Result<Map<String, Value>, StoreError>> {
        Box::pin(async move {
            let taken = change(self, id, None, |record, _| (std::mem::take(&mut record.answers), None)).await?;
            Ok(taken.unwrap_or_default())
        })
    }

    fn cancel<'a>(&'a self, owner: &'a str, id: &'a str) -> StoreFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let cancelled =
                change(self, id, Some(owner), |record, now| ((), record.settle(State::Cancelled, now))).await?;
            Ok(cancelled.is_some())
        })
    }
}
