//! [`PgSessions`]: rmcp's `SessionStore` on the `carte_sessions` table. rmcp
//! stores a legacy session's `initialize` there once it is answered; a
//! request for a session another replica started is served by restoring it
//! (rmcp replays `initialize` into a new handler here); DELETE removes it.
//!
//! Only the `initialize` moves with a session: its log level and
//! subscriptions stay with the replica they were made on (whose GET stream
//! hears them). A row lives while any replica sees its session active
//! (`keep`, once per sweep tick, for the sessions active since the last
//! one) and is dropped one idle timeout after that (`sweep`).

use std::sync::Arc;
use std::time::Duration;

use rmcp::transport::streamable_http_server::session::store::{SessionState, SessionStore, SessionStoreError};

use crate::replicas::Replicas;

/// Legacy sessions in the state database.
pub struct PgSessions {
    replicas: Arc<Replicas>,
    /// How long a session is kept without activity on any replica.
    idle: Duration,
}

impl PgSessions {
    /// The sessions kept in `replicas`' database.
    pub fn new(replicas: Arc<Replicas>) -> PgSessions {
        let idle = replicas.session_idle();
        PgSessions { replicas, idle }
    }

    fn idle_seconds(&self) -> f64 {
        self.idle.as_secs_f64()
    }

    /// Marks sessions `ids` active now (one statement for all).
    pub async fn keep(&self, ids: &[String]) -> Result<(), String> {
        if ids.is_empty() {
            return Ok(());
        }
        let client = self.replicas.client().await?;
        client
            .execute("UPDATE carte_sessions SET last_seen = now() WHERE id = ANY($1)", &[&ids])
            .await
            .map(drop)
            .map_err(|err| format!("could not mark sessions active: {}", crate::replicas::reason(&err)))
    }

    /// Drops the sessions no replica saw active for the idle timeout.
    pub async fn sweep(&self) -> Result<u64, String> {
        let client = self.replicas.client().await?;
        client
            .execute(
                "DELETE FROM carte_sessions WHERE last_seen < now() - make_interval(secs => $1)",
                &[&self.idle_seconds()],
            )
            .await
            .map_err(|err| format!("could not drop idle sessions: {}", crate::replicas::reason(&err)))
    }
}

fn boxed(message: String) -> SessionStoreError {
    message.into()
}

#[async_trait::async_trait]
impl SessionStore for PgSessions {
    async fn load(&self, session_id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        let client = self.replicas.client().await.map_err(boxed)?;
        let row = client
            .query_opt(
                "UPDATE carte_sessions SET last_seen = now() \
                 WHERE id = $1 AND last_seen >= now() - make_interval(secs => $2) RETURNING state",
                &[&session_id, &self.idle_seconds()],
            )
            .await?;
        let Some(row) = row else { return Ok(None) };
        let state: serde_json::Value = row.try_get(0)?;
        Ok(Some(serde_json::from_value(state)?))
    }

    async fn store(&self, session_id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        let stored = async {
            let client = self.replicas.client().await.map_err(boxed)?;
            let state = serde_json::to_value(state)?;
            client
                .execute(
                    "INSERT INTO carte_sessions (id, state) VALUES ($1, $2) \
                     ON CONFLICT (id) DO UPDATE SET state = excluded.state, last_seen = now()",
                    &[&session_id, &state],
                )
                .await?;
            Ok::<(), SessionStoreError>(())
        }
        .await;
        // rmcp only logs a failed store and answers the `initialize`: the
        // session would live on this replica alone. Refused instead (503,
        // retryable; see `http::sessions`).
        if stored.is_err() {
            super::sessions::refuse(super::sessions::Refusal::Unstored);
        }
        stored
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionStoreError> {
        let client = self.replicas.client().await.map_err(boxed)?;
        client.execute("DELETE FROM carte_sessions WHERE id = $1", &[&session_id]).await?;
        Ok(())
    }
}
