//! Turning what reqwest reports into an [`Observation`]: the status, `Retry-After` and a
//! size-capped body of a response, or — for a failed exchange — whether the request
//! provably never left (connect failure, our own refusal) or may have been sent.

use std::error::Error as StdError;

use bytes::BytesMut;
use reqwest::header;

use crate::provider::address_guard::NonPublicDestination;
use crate::provider::{parse_retry_after, Observation, ResponseBody};

/// Longest error description kept from a transport error chain, in characters.
const MAX_ERROR_CHARS: usize = 300;

/// The status, `Retry-After` and size-capped body of a response.
pub(super) async fn observe_response(response: reqwest::Response, limit: usize) -> Observation {
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get(header::RETRY_AFTER)
        .and_then(|value| value.to_str().ok())
        .and_then(parse_retry_after);
    let body = read_capped(response, limit).await;
    Observation::Response {
        status,
        retry_after,
        body,
    }
}

/// Streams the body, stopping as soon as it exceeds `limit` (endless bodies terminate).
async fn read_capped(mut response: reqwest::Response, limit: usize) -> ResponseBody {
    let too_large = ResponseBody::TooLarge { limit };
    if response
        .content_length()
        .is_some_and(|length| length > limit as u64)
    {
        return too_large;
    }
    let mut body = BytesMut::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) if body.len().saturating_add(chunk.len()) > limit => return too_large,
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            Ok(None) => return ResponseBody::Complete(body.freeze()),
            Err(error) => return ResponseBody::ReadFailed(describe_error(&error)),
        }
    }
}

/// Maps a failed exchange: our own refusal first, then connect errors (never sent — this
/// includes connect timeouts, so it is checked before `is_timeout`), then everything else
/// (the request may have been written).
pub(super) fn observe_send_error(error: &reqwest::Error) -> Observation {
    if let Some(refused) = find_source::<NonPublicDestination>(error) {
        return Observation::Refused {
            reason: refused.to_string(),
        };
    }
    let description = describe_error(error);
    if error.is_builder() {
        return Observation::Refused {
            reason: format!("the request could not be built: {description}"),
        };
    }
    if error.is_connect() {
        return Observation::ConnectFailed { error: description };
    }
    Observation::SendFailed {
        error: description,
        timed_out: error.is_timeout(),
    }
}

fn find_source<'e, E: StdError + 'static>(error: &'e (dyn StdError + 'static)) -> Option<&'e E> {
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(found) = error.downcast_ref::<E>() {
            return Some(found);
        }
        current = error.source();
    }
    None
}

/// The error's causes joined with ": " (without the URL), cut to a readable length.
fn describe_error(error: &reqwest::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut current = error.source();
    while let Some(cause) = current {
        let text = cause.to_string();
        if parts.last() != Some(&text) {
            parts.push(text);
        }
        current = cause.source();
    }
    let description = if parts.is_empty() {
        error.to_string()
    } else {
        parts.join(": ")
    };
    match description.char_indices().nth(MAX_ERROR_CHARS) {
        Some((cut, _)) => format!("{}…", &description[..cut]),
        None => description,
    }
}
