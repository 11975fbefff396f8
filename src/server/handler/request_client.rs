//! [`RequestClient`]: the client of one request as a tool's steps see it
//! (see [`crate::run::steps::Client`]).

use rmcp::model::{CreateMessageRequestParams, ElicitRequestParams, InputResponses, ProgressNotificationParam};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::json;

use super::{Handler, caller};
use crate::catalog::model::LogLevel;
use crate::run;
use crate::run::steps::{Client, ClientFuture, Question, Unanswered};
use crate::server::capabilities::has_capability;
use crate::server::hub::wire_level;

/// The calling client, for steps: log and progress notifications on this
/// request; questions answered by the client, on a legacy session as
/// server-to-client requests (one after another), on 2026-07-28 from the
/// `inputResponses` the request carries (`answers`; a question without a
/// fitting answer stays open and becomes an input-required result).
pub(super) struct RequestClient<'a> {
    pub(super) handler: &'a Handler,
    pub(super) context: &'a RequestContext<RoleServer>,
    /// 2026-07-28: the answers the request carries (legacy: `None`).
    pub(super) answers: Option<InputResponses>,
}

impl RequestClient<'_> {
    /// Asks one question with a server-to-client request (legacy sessions);
    /// the answer as JSON.
    async fn request(&self, question: &Question) -> Result<serde_json::Value, String> {
        let Some(capability) = question.capability() else {
            return Err(format!("`{}` is not a question carte asks", question.method));
        };
        if !self.can_answer(capability) {
            return Err(format!("the client does not support {capability} (it did not declare the capability)"));
        }
        let peer = &self.context.peer;
        let answer = match question.method {
            "elicitation/create" => {
                let params: ElicitRequestParams = serde_json::from_value(question.params.clone())
                    .map_err(|err| format!("the requested schema is not an elicitation form: {err}"))?;
                serde_json::to_value(peer.create_elicitation(params).await.map_err(|err| err.to_string())?)
            }
            "sampling/createMessage" => {
                let params: CreateMessageRequestParams = serde_json::from_value(question.params.clone())
                    .map_err(|err| format!("not a sampling request: {err}"))?;
                serde_json::to_value(peer.create_message(params).await.map_err(|err| err.to_string())?)
            }
            _ => serde_json::to_value(peer.list_roots().await.map_err(|err| err.to_string())?),
        };
        answer.map_err(|err| err.to_string())
    }
}

impl Client for RequestClient<'_> {
    fn log(&self, level: LogLevel, logger: &str, data: serde_json::Value) -> ClientFuture<'_, ()> {
        let logger = logger.to_owned();
        Box::pin(async move { self.handler.log(self.context, wire_level(level), &logger, || data).await })
    }

    fn progress(&self, progress: f64, total: Option<f64>, message: Option<String>) -> ClientFuture<'_, ()> {
        Box::pin(async move {
            let Some(token) = self.context.meta.get_progress_token() else { return };
            let mut param = json!({ "progressToken": token, "progress": progress });
            if let Some(total) = total {
                param["total"] = json!(total);
            }
            if let Some(message) = message {
                param["message"] = json!(message);
            }
            match serde_json::from_value::<ProgressNotificationParam>(param) {
                Ok(param) => {
                    let _ = self.context.peer.notify_progress(param).await;
                }
                Err(err) => tracing::warn!("progress not sent: {err}"),
            }
        })
    }

    fn ask(
        &self,
        questions: Vec<Question>,
    ) -> ClientFuture<'_, Result<serde_json::Map<String, serde_json::Value>, Unanswered>> {
        Box::pin(async move {
            let mut answered = serde_json::Map::new();
            let Some(answers) = &self.answers else {
                for question in questions {
                    let answer = self.request(&question).await.map_err(Unanswered::Failed)?;
                    run::steps::fits(&question, &answer).map_err(Unanswered::Failed)?;
                    answered.insert(question.key, answer);
                }
                return Ok(answered);
            };
            let mut open = Vec::new();
            for question in questions {
                let fitting = answers.get(&question.key).map(|answer| (answer, run::steps::fits(&question, answer)));
                match fitting {
                    Some((answer, Ok(()))) => {
                        answered.insert(question.key, answer.clone());
                    }
                    Some((_, Err(reason))) => {
                        tracing::debug!("asking again: {reason}");
                        open.push(question);
                    }
                    None => open.push(question),
                }
            }
            if open.is_empty() { Ok(answered) } else { Err(Unanswered::Open { open, answered }) }
        })
    }

    fn can_answer(&self, capability: &str) -> bool {
        if self.answers.is_some() {
            let declared = self.context.meta.client_capabilities().unwrap_or_default();
            return has_capability(&declared, capability);
        }
        self.context.peer.peer_info().is_some_and(|info| has_capability(&info.capabilities, capability))
    }

    fn cancelled(&self) -> bool {
        self.context.ct.is_cancelled()
    }

    fn until_cancelled(&self) -> ClientFuture<'_, ()> {
        Box::pin(self.context.ct.cancelled())
    }

    fn caller(&self) -> Option<&serde_json::Map<String, serde_json::Value>> {
        caller(self.context).map(|caller| &*caller.claims)
    }

    fn render_caller(&self) -> crate::render::Caller {
        crate::render::Caller::new(self.handler.owner(self.context))
    }

    fn access_token(&self) -> Option<&crate::effect::http::AccessToken> {
        caller(self.context).map(|caller| &caller.token)
    }
}
