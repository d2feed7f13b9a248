//! The page's actions, one route each, and signing in and out. An action's handler takes an [`Actor`], which
//! only a request that passed [`Auth::check`](super::auth::Auth::check) yields: no action can run before the
//! check, nor forget it.

use std::sync::Arc;

use axum::extract::{FromRequest, FromRequestParts, Path, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::post;
use axum::{Form, Router};
use axum_extra::extract::cookie::CookieJar;
use serde::Deserialize;

use super::answer::{Done, Failed, Problem, back_with, cleared, page_cookie};
use super::auth::{Peer, Refusal, SESSION_COOKIE, Via};
use super::{Page, Root};
use crate::ops::{self, OpError, PauseTarget};

/// The routes of the actions and of signing in and out.
pub fn routes() -> Router<Arc<Page>> {
    Router::new()
        .route("/login", post(login))
        .route("/logout", post(logout))
        .route("/items/{id}/retry", post(retry))
        .route("/items/{id}/cancel", post(cancel))
        .route("/items/{id}/{action}", post(no_such_item_action))
        .route("/configs/{id}/pause", post(pause_config))
        .route("/configs/{id}/resume", post(resume_config))
        .route("/configs/{id}/crawl", post(crawl_config))
        .route("/configs/{id}/watch/{choice}", post(watch_config))
        .route("/configs/{id}/{action}", post(no_such_config_action))
        .route("/kinds/{kind}/pause", post(pause_kind))
        .route("/kinds/{kind}/resume", post(resume_kind))
        .route("/kinds/{kind}/{action}", post(no_such_kind_action))
}

/// The form field every action form of a signed-in page carries.
#[derive(Deserialize)]
struct ActionForm {
    csrf: Option<String>,
}

/// A request that may act, and how it acts: the token in `Authorization: Bearer` (a script), or the session
/// cookie with the form's CSRF field from this page (a browser). Refused otherwise, before the action is looked
/// at, with the refusal's status (and `Retry-After` during a pause after wrong tokens).
pub struct Actor {
    via: Via,
    jar: CookieJar,
    root: Root,
}

impl FromRequest<Arc<Page>> for Actor {
    type Rejection = Problem;

    async fn from_request(request: Request, page: &Arc<Page>) -> Result<Self, Problem> {
        let (mut parts, body) = request.into_parts();
        let Ok(peer) = Peer::from_request_parts(&mut parts, page).await;
        let Ok(jar) = CookieJar::from_request_parts(&mut parts, page).await;
        let Ok(root) = Root::from_request_parts(&mut parts, page).await;
        let headers = parts.headers.clone();
        // A script's request may have no form at all: only the session needs the field.
        let form = Form::<ActionForm>::from_request(Request::from_parts(parts, body), page).await;
        let csrf = form.ok().and_then(|Form(f)| f.csrf);
        match page.auth.check(peer, &headers, csrf.as_deref()) {
            Ok(via) => Ok(Actor { via, jar, root }),
            Err(refusal) => Err(Problem::refused(refusal, page.auth.paused_for(peer))),
        }
    }
}

impl Actor {
    /// The answer to the action, as the one who asked reads it.
    fn answer(self, outcome: Result<String, OpError>) -> Result<Done, Failed> {
        match outcome {
            Ok(message) => Ok(Done { via: self.via, message, jar: self.jar, root: self.root }),
            Err(error) => Err(Failed { via: self.via, error }),
        }
    }
}

/// Puts a failed or cancelled item back in the queue.
async fn retry(State(page): State<Arc<Page>>, Path(id): Path<String>, actor: Actor) -> Result<Done, Failed> {
    actor.answer(async { ops::retry_item(&page.store, ops::parse_item_id(&id)?).await }.await)
}

/// Cancels a queued item, or asks a running one to stop.
async fn cancel(State(page): State<Arc<Page>>, Path(id): Path<String>, actor: Actor) -> Result<Done, Failed> {
    actor.answer(async { ops::cancel_item(&page.store, ops::parse_item_id(&id)?).await }.await)
}

/// Pauses or resumes a storage config named by its id.
async fn set_config_paused(page: &Page, id: &str, pause: bool) -> Result<String, OpError> {
    let config = ops::parse_config_id(id)?.to_string();
    ops::set_paused(&page.store, PauseTarget::Config(config), pause).await
}

/// Pauses a storage config: its queued work is not claimed until resumed.
async fn pause_config(State(page): State<Arc<Page>>, Path(id): Path<String>, actor: Actor) -> Result<Done, Failed> {
    actor.answer(set_config_paused(&page, &id, true).await)
}

/// Resumes a paused storage config.
async fn resume_config(State(page): State<Arc<Page>>, Path(id): Path<String>, actor: Actor) -> Result<Done, Failed> {
    actor.answer(set_config_paused(&page, &id, false).await)
}

/// Queues a crawl of a storage config now (or joins the one queued).
async fn crawl_config(State(page): State<Arc<Page>>, Path(id): Path<String>, actor: Actor) -> Result<Done, Failed> {
    let crawl = async { Ok(ops::enqueue_crawl(&page.store, &ops::parse_config_id(&id)?.to_string()).await?.1) };
    actor.answer(crawl.await)
}

/// Chooses how a storage config's root is watched (as `config watch` does).
async fn watch_config(
    State(page): State<Arc<Page>>,
    Path((id, choice)): Path<(String, String)>,
    actor: Actor,
) -> Result<Done, Failed> {
    let config = ops::parse_config_id(&id).map(|c| c.to_string());
    let set = async { Ok(ops::set_watch(&page.store, &config?, &choice).await?.describe()) };
    actor.answer(set.await)
}

/// Pauses a kind everywhere.
async fn pause_kind(State(page): State<Arc<Page>>, Path(kind): Path<String>, actor: Actor) -> Result<Done, Failed> {
    let pause = async { ops::set_paused(&page.store, PauseTarget::Kind(ops::parse_kind(&kind)?), true).await };
    actor.answer(pause.await)
}

/// Resumes a paused kind.
async fn resume_kind(State(page): State<Arc<Page>>, Path(kind): Path<String>, actor: Actor) -> Result<Done, Failed> {
    let resume = async { ops::set_paused(&page.store, PauseTarget::Kind(ops::parse_kind(&kind)?), false).await };
    actor.answer(resume.await)
}

/// An action the page does not have, told (after the check, as every action) with the ones it has.
fn no_such_action(actor: Actor, given: &str, known: &str) -> Result<Done, Failed> {
    actor.answer(Err(OpError::NotFound(format!("there is no action {given:?} here: use {known}"))))
}

/// `/items/{id}/{action}` for any other action.
async fn no_such_item_action(Path((_, action)): Path<(String, String)>, actor: Actor) -> Result<Done, Failed> {
    no_such_action(actor, &action, "retry or cancel")
}

/// `/configs/{id}/{action}` for any other action.
async fn no_such_config_action(Path((_, action)): Path<(String, String)>, actor: Actor) -> Result<Done, Failed> {
    no_such_action(actor, &action, "pause, resume, crawl or watch/CHOICE")
}

/// `/kinds/{kind}/{action}` for any other action.
async fn no_such_kind_action(Path((_, action)): Path<(String, String)>, actor: Actor) -> Result<Done, Failed> {
    no_such_action(actor, &action, "pause or resume")
}

/// The sign-in form.
#[derive(Deserialize)]
struct Login {
    token: String,
}

/// Signs a browser in with the token: the session cookie, and back to the page.
async fn login(
    State(page): State<Arc<Page>>,
    peer: Peer,
    headers: HeaderMap,
    jar: CookieJar,
    root: Root,
    Form(form): Form<Login>,
) -> Response {
    match page.auth.sign_in(peer, &headers, &form.token) {
        Ok(session) => {
            back_with(jar.add(page_cookie(SESSION_COOKIE, session, &root)), "signed in", &root).into_response()
        }
        Err(Refusal::WrongToken) => {
            Problem::new(StatusCode::UNAUTHORIZED, "that is not this Worker's token; you are not signed in")
                .into_response()
        }
        Err(refusal) => Problem::refused(refusal, page.auth.paused_for(peer)).into_response(),
    }
}

/// Signs a browser out: its session cookie is cleared.
async fn logout(jar: CookieJar, root: Root) -> (CookieJar, Redirect) {
    back_with(jar.add(cleared(SESSION_COOKIE, &root)), "signed out", &root)
}

#[cfg(test)]
mod tests;
