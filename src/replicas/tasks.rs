//! [`PgTaskStore`]: the tasks of every replica in the `carte_tasks` table,
//! with [`MemoryStore`](crate::task_store::MemoryStore)'s semantics and
//! bounds (256 per owner, 4,096 in all; a settled task is kept one ttl).
//!
//! A row is the [`TaskRecord`] as JSON, with its owner and when it is
//! dropped (`expires_ms`): one ttl after it settled, and while it runs, two
//! ttls after it was created — a run lasts at most its ttl, so a row whose
//! replica died mid-run is dropped too. Every method is one statement or one
//! transaction (a change locks its row); creating one sweeps the expired rows
//! and counts under an advisory lock, so two replicas cannot both take the
//! last place.
//!
//! A row also names the replica running the task (`runner`: the advisory
//! lock its listener holds while it lives). A task that has not settled
//! and whose runner's lock is gone is settled as failed, "its replica
//! stopped", by whichever replica reads or changes it next: its run died
//! with that process (and the programs it started with it).

use std::sync::Arc;

use serde_json::{Map, Value};

use super::Replicas;
use crate::task_store::{State, StoreError, StoreFuture, TaskRecord, TaskStore, now_ms, refusal};

/// JSON-RPC's "internal error", the code of a task whose replica stopped.
const INTERNAL_ERROR: i32 = -32603;

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

fn failed(err: tokio_postgres::Error) -> StoreError {
    StoreError::Failed(format!("the state database failed: {}", super::reason(&err)))
}

/// Whether the row's runner is another replica that is gone: no session
/// holds its advisory lock any more (`pg_locks` shows a bigint key as two
/// unsigned 32-bit halves, `objsubid` 1). `$1` is this replica's lock.
const ORPHANED: &str = "(runner IS NOT NULL AND runner <> $1 AND NOT EXISTS (
    SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1
        AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
        AND classid::bigint * 4294967296 + objid::bigint = runner))";

/// How a task whose replica stopped ended.
fn replica_stopped() -> State {
    State::Failed {
        error: serde_json::json!({
            "code": INTERNAL_ERROR,
            "message": "its replica stopped before the task finished: the run ended with that process",
        }),
    }
}

/// ms as PostgreSQL's bigint.
fn sql_ms(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

fn to_json(record: &TaskRecord) -> Result<Value, StoreError> {
    serde_json::to_value(record).map_err(|err| StoreError::Failed(format!("a task is not JSON: {err}")))
}

fn from_json(value: Value) -> Result<TaskRecord, StoreError> {
    serde_json::from_value(value)
        .map_err(|err| StoreError::Failed(format!("a task row in the state database is not a task: {err}")))
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
            &format!(
                "SELECT record, {ORPHANED} FROM carte_tasks
                 WHERE id = $2 AND ($3::text IS NULL OR owner = $3) AND expires_ms > $4 FOR UPDATE"
            ),
            &[&store.replicas.alive_lock, &id, &owner, &sql_ms(now)],
        )
        .await
        .map_err(failed)?;
    let Some(row) = row else { return Ok(None) };
    let mut record = from_json(row.try_get(0).map_err(failed)?)?;
    let orphaned: bool = row.try_get(1).map_err(failed)?;
    let settled = if orphaned { record.settle(replica_stopped(), now) } else { None };
    let (answer, expires) = change(&mut record, now);
    let expires = expires.or(settled);
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
                    "INSERT INTO carte_tasks (id, owner, record, expires_ms, runner) VALUES ($1, $2, $3, $4, $5)",
                    &[&record.id, &record.owner, &to_json(&record)?, &expires, &self.replicas.alive_lock],
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
                    &format!(
                        "SELECT record, {ORPHANED} FROM carte_tasks WHERE id = $2 AND owner = $3 AND expires_ms > $4"
                    ),
                    &[&self.replicas.alive_lock, &id, &owner, &sql_ms(now_ms())],
                )
                .await
                .map_err(failed)?;
            let Some(row) = row else { return Ok(None) };
            let record = from_json(row.try_get(0).map_err(failed)?)?;
            let orphaned: bool = row.try_get(1).map_err(failed)?;
            if orphaned && !record.state.is_terminal() {
                drop(client);
                // Settled under the row's lock (`change` finds it orphaned too).
                return change(self, id, Some(owner), |record, _| (record.clone(), None)).await;
            }
            Ok(Some(record))
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::task_store::{MAX_TASKS_PER_OWNER, State};

    /// A database of the test's own on `CARTE_TEST_POSTGRES`, with carte's
    /// tables; dropped by [`Scratch::drop_database`]. `None` (SKIP) without a
    /// server, a failure with `CARTE_REQUIRE_POSTGRES=1`.
    struct Scratch {
        admin: String,
        name: String,
        store: PgTaskStore,
    }

    async fn admin(url: &str, sql: &str) {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(connection);
        client.batch_execute(sql).await.unwrap();
    }

    async fn scratch(test: &str) -> Option<Scratch> {
        let Some(admin_url) = std::env::var("CARTE_TEST_POSTGRES").ok().filter(|url| !url.is_empty()) else {
            assert!(
                std::env::var("CARTE_REQUIRE_POSTGRES").map_or(true, |v| v != "1"),
                "CARTE_REQUIRE_POSTGRES=1 but CARTE_TEST_POSTGRES is not set"
            );
            eprintln!("SKIP {test}: no PostgreSQL server (set CARTE_TEST_POSTGRES)");
            return None;
        };
        let name = format!("carte_unit_{test}_{}", uuid::Uuid::new_v4().simple());
        admin(&admin_url, &format!("CREATE DATABASE {name}")).await;
        let (base, _) = admin_url.rsplit_once('/')?;
        let replicas = Arc::new(Replicas::new(&format!("{base}/{name}"), Duration::from_secs(60)).unwrap());
        super::super::create_tables(&replicas.client().await.unwrap(), false).await.unwrap();
        Some(Scratch { admin: admin_url, name, store: PgTaskStore::new(replicas) })
    }

    impl Scratch {
        async fn drop_database(self) {
            let Scratch { admin: url, name, store } = self;
            drop(store);
            admin(&url, &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await;
        }
    }

    fn record(id: &str, owner: &str, ttl_ms: u64) -> TaskRecord {
        TaskRecord {
            id: id.to_owned(),
            owner: owner.to_owned(),
            state: State::Working,
            created_ms: now_ms(),
            updated_ms: now_ms(),
            ttl_ms,
            poll_interval_ms: 1000,
            answers: Map::new(),
        }
    }

    #[tokio::test]
    async fn the_database_keeps_tasks_as_memory_does() {
        let Some(scratch) = scratch("semantics").await else { return };
        let store = &scratch.store;
        store.create(record("t1", "me", 60_000)).await.unwrap();
        // Another owner's task is unknown.
        assert!(store.get("you", "t1").await.unwrap().is_none());
        assert!(!store.answer("you", "t1", Map::new()).await.unwrap());
        assert!(!store.cancel("you", "t1").await.unwrap());
        assert_eq!(store.get("me", "t1").await.unwrap().map(|r| r.state), Some(State::Working));
        // A question, a good answer and one for no question: the good one is taken once.
        let schema = json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]});
        let questions = Map::from_iter([(
            "q".to_owned(),
            json!({"method": "elicitation/create", "params": {"message": "?", "requestedSchema": schema}}),
        )]);
        store.set("t1", State::InputRequired { questions }).await.unwrap();
        let answer = json!({"action": "accept", "content": {"name": "Ada"}});
        let answers = Map::from_iter([("q".to_owned(), answer.clone()), ("other".to_owned(), json!(1))]);
        assert!(store.answer("me", "t1", answers).await.unwrap());
        assert_eq!(store.get("me", "t1").await.unwrap().map(|r| r.state), Some(State::Working));
        assert_eq!(store.take_answers("t1").await.unwrap(), Map::from_iter([("q".to_owned(), answer)]));
        assert!(store.take_answers("t1").await.unwrap().is_empty());
        // A settled task stays settled; cancelling it again is no error.
        store.set("t1", State::Completed { result: json!({"content": []}) }).await.unwrap();
        assert!(store.cancel("me", "t1").await.unwrap());
        store.set("t1", State::Working).await.unwrap();
        let state = store.get("me", "t1").await.unwrap().map(|r| r.state);
        assert_eq!(state, Some(State::Completed { result: json!({"content": []}) }));
        scratch.drop_database().await;
    }

    #[tokio::test]
    async fn a_task_whose_replica_is_gone_fails_and_one_whose_replica_lives_runs_on() {
        let Some(scratch) = scratch("orphans").await else { return };
        let store = &scratch.store;
        store.create(record("alive", "me", 60_000)).await.unwrap();
        store.create(record("gone", "me", 60_000)).await.unwrap();
        store.create(record("mine", "me", 60_000)).await.unwrap();
        // Another replica that lives holds its lock (a key whose low half is past i32).
        let other = store.replicas.client().await.unwrap();
        let (living, dead) = (0x1234_5678_9abc_def0_i64, 0x1234_5678_9abc_def1_i64);
        other.execute("SELECT pg_advisory_lock($1)", &[&living]).await.unwrap();
        let client = store.replicas.client().await.unwrap();
        client.execute("UPDATE carte_tasks SET runner = $1 WHERE id = 'alive'", &[&living]).await.unwrap();
        client.execute("UPDATE carte_tasks SET runner = $1 WHERE id = 'gone'", &[&dead]).await.unwrap();
        let state = |id: &'static str| async move { store.get("me", id).await.unwrap().unwrap().state };
        assert_eq!(state("alive").await, State::Working);
        assert_eq!(state("mine").await, State::Working, "this replica runs it");
        let State::Failed { error } = state("gone").await else { panic!("not failed") };
        assert!(error["message"].as_str().is_some_and(|m| m.starts_with("its replica stopped")), "{error}");
        // A cancel after that changes nothing: it failed.
        assert!(store.cancel("me", "gone").await.unwrap());
        assert!(matches!(state("gone").await, State::Failed { .. }));
        // A cancel reaching a task whose replica just died finds it failed too.
        other.execute("SELECT pg_advisory_unlock($1)", &[&living]).await.unwrap();
        assert!(store.cancel("me", "alive").await.unwrap());
        assert!(matches!(state("alive").await, State::Failed { .. }));
        drop((client, other));
        scratch.drop_database().await;
    }

    #[tokio::test]
    async fn an_owner_past_its_bound_is_refused_and_a_settled_task_ends_one_ttl_later() {
        let Some(scratch) = scratch("bounds").await else { return };
        let store = &scratch.store;
        for n in 0..MAX_TASKS_PER_OWNER {
            store.create(record(&format!("t{n}"), "me", 60_000)).await.unwrap();
        }
        let refused = store.create(record("one-more", "me", 60_000)).await.unwrap_err();
        assert!(matches!(&refused, StoreError::Full(message) if message.contains("too many tasks")), "{refused:?}");
        store.create(record("yours", "you", 60_000)).await.unwrap();
        // A settled task ends one ttl after it settled; then it is unknown and its place is free.
        store.set("t0", State::Cancelled).await.unwrap();
        let settled = store.get("me", "t0").await.unwrap().unwrap().updated_ms;
        let client = scratch.store.replicas.client().await.unwrap();
        let expires: i64 =
            client.query_one("SELECT expires_ms FROM carte_tasks WHERE id = 't0'", &[]).await.unwrap().get(0);
        assert_eq!(expires, sql_ms(settled + 60_000));
        client.execute("UPDATE carte_tasks SET expires_ms = 0 WHERE id = 't0'", &[]).await.unwrap();
        assert!(store.get("me", "t0").await.unwrap().is_none(), "expired");
        store.create(record("again", "me", 60_000)).await.unwrap();
        let kept: i64 = client.query_one("SELECT count(*) FROM carte_tasks", &[]).await.unwrap().get(0);
        assert_eq!(kept, i64::try_from(MAX_TASKS_PER_OWNER).unwrap() + 1, "t0 swept, `again` and `yours` added");
        drop(client);
        scratch.drop_database().await;
    }
}
