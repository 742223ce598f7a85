//! What every public and admin request passes before its handler: its body
//! is read, bounded and checked to be exactly one well-framed, uncompressed
//! gRPC message of at most [`REQUEST_BYTES_MAX`] bytes. Anything else is
//! refused here, with INVALID_ARGUMENT and an ErrorInfo reason
//! ([`REQUEST_TOO_LARGE`], [`MALFORMED_MESSAGE`](crate::errors::MALFORMED_MESSAGE)), before any handler,
//! proposal or log line.
//!
//! # Decisions
//!
//! - **Why here and not in tonic.** tonic checks the frame while decoding
//!   and answers a bad one with INTERNAL or OUT_OF_RANGE without details
//!   (a truncated body, a bad compressed flag, no message at all, a message
//!   over its limit), which clients cannot tell from a server failure and
//!   retry. Every method of these services takes one request message (the
//!   watch streams only its answers), so reading the whole body first costs
//!   nothing a handler would not pay anyway, and bounded by the limit.
//! - **Decode errors** (a string that is not UTF-8, a wrong wire type) are
//!   left to the codec (`palisade_proto::codec`), the one place that knows
//!   the message type; it answers the same way.
//! - **Oversized requests** are refused as soon as the frame header
//!   declares more than the limit, or more bytes than that arrive; the
//!   rest of the body is not read.
//! - **Compression** is not accepted (requests are small and the limit is
//!   on what is decoded): a compressed frame is malformed, a
//!   `grpc-encoding` other than `identity` is UNIMPLEMENTED.

use std::convert::Infallible;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt as _;
use palisade_lifecycle::limits::REQUEST_BYTES_MAX;
use palisade_proto::codec::malformed;
use tonic::Code;
use tonic::codegen::{BoxFuture, Service, http};
use tonic::server::NamedService;

use crate::errors;

/// Reason: the request message is larger than [`REQUEST_BYTES_MAX`].
pub const REQUEST_TOO_LARGE: &str = errors::REQUEST_TOO_LARGE;
/// Reason: a compressed request (`grpc-encoding` other than `identity`).
pub const COMPRESSION_UNSUPPORTED: &str = "COMPRESSION_UNSUPPORTED";

/// Bytes of a gRPC frame header: a compressed flag and a big-endian length.
const FRAME_HEADER_BYTES: usize = 5;

/// Wraps a service so that it receives only requests whose body is one
/// bounded, well-framed message (see the module doc).
pub fn single_message<S>(inner: S) -> SingleMessage<S> {
    SingleMessage { inner }
}

/// A service behind [`single_message`].
#[derive(Clone)]
pub struct SingleMessage<S> {
    inner: S,
}

impl<S: NamedService> NamedService for SingleMessage<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> Service<http::Request<tonic::body::Body>> for SingleMessage<S>
where
    S: Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<tonic::body::Body>,
            Error = Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, context: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(context)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        // The service that was polled ready takes the call; a clone stays.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            if let Some(refusal) = unsupported_encoding(&parts.headers) {
                return Ok(refusal.into_http());
            }
            match read_one_message(body).await {
                Ok(message) => {
                    let body = tonic::body::Body::new(http_body_util::Full::new(message));
                    inner.call(http::Request::from_parts(parts, body)).await
                }
                Err(refusal) => Ok(refusal.into_http()),
            }
        })
    }
}

fn unsupported_encoding(headers: &http::HeaderMap) -> Option<tonic::Status> {
    let encoding = headers.get("grpc-encoding")?;
    if encoding.as_bytes() == b"identity" {
        return None;
    }
    Some(errors::status(
        Code::Unimplemented,
        COMPRESSION_UNSUPPORTED,
        "compressed requests are not accepted; send them uncompressed (grpc-encoding identity)",
        [],
    ))
}

fn too_large(declared_bytes: usize) -> tonic::Status {
    errors::status(
        Code::InvalidArgument,
        REQUEST_TOO_LARGE,
        format!(
            "the request message is {declared_bytes} bytes; at most {REQUEST_BYTES_MAX} are accepted"
        ),
        [("limit_bytes", REQUEST_BYTES_MAX.to_string())],
    )
}

/// Reads the body: exactly one uncompressed gRPC frame of at most
/// [`REQUEST_BYTES_MAX`] message bytes. Returns the frame as received.
async fn read_one_message(mut body: tonic::body::Body) -> Result<Bytes, tonic::Status> {
    let received_bytes_max = FRAME_HEADER_BYTES + REQUEST_BYTES_MAX;
    let mut received = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|status| {
            errors::status(
                Code::Cancelled,
                "REQUEST_BODY_BROKEN",
                format!("the request body broke off: {}", status.message()),
                [],
            )
        })?;
        let Ok(data) = frame.into_data() else {
            continue; // Trailers on a request carry nothing we use.
        };
        if received.len() + data.len() > received_bytes_max {
            let declared = declared_bytes(&received).unwrap_or(received.len() + data.len());
            return Err(too_large(declared.max(REQUEST_BYTES_MAX + 1)));
        }
        received.extend_from_slice(&data);
        if let Some(declared) = declared_bytes(&received)
            && declared > REQUEST_BYTES_MAX
        {
            return Err(too_large(declared));
        }
    }
    let Some(declared) = declared_bytes(&received) else {
        return Err(malformed(
            "the request body holds no gRPC message (fewer than 5 bytes)",
        ));
    };
    match received[0] {
        0 => {}
        1 => {
            return Err(malformed(
                "the request message is compressed; send it uncompressed",
            ));
        }
        flag => {
            return Err(malformed(format!(
                "the gRPC frame has flag {flag}; only 0 (uncompressed) is valid"
            )));
        }
    }
    let message_bytes = received.len() - FRAME_HEADER_BYTES;
    if message_bytes < declared {
        return Err(malformed(format!(
            "the request message is truncated: {message_bytes} of the {declared} bytes its frame declares"
        )));
    }
    if message_bytes > declared {
        return Err(malformed(
            "the request body holds more than one message; this method takes exactly one",
        ));
    }
    Ok(received.freeze())
}

/// The message length a frame header declares, once 5 bytes arrived.
fn declared_bytes(received: &[u8]) -> Option<usize> {
    let header = received.get(..FRAME_HEADER_BYTES)?;
    let length = u32::from_be_bytes([header[1], header[2], header[3], header[4]]);
    Some(length as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::errors::MALFORMED_MESSAGE;

    fn body(bytes: &[u8]) -> tonic::body::Body {
        tonic::body::Body::new(http_body_util::Full::new(Bytes::copy_from_slice(bytes)))
    }

    fn reason(status: &tonic::Status) -> String {
        errors::reason_of(status).unwrap_or_default()
    }

    #[tokio::test]
    async fn one_frame_passes_unchanged() {
        let frame = [0, 0, 0, 0, 2, 8, 1];
        assert_eq!(&read_one_message(body(&frame)).await.unwrap()[..], &frame);
        let empty_message = [0, 0, 0, 0, 0];
        assert!(read_one_message(body(&empty_message)).await.is_ok());
    }

    #[tokio::test]
    async fn anything_else_is_refused_with_a_reason() {
        for (bad, expected) in [
            (&[][..], MALFORMED_MESSAGE),
            (&[0, 0, 0][..], MALFORMED_MESSAGE),
            (&[0, 0, 0, 0, 3, 8, 1][..], MALFORMED_MESSAGE),
            (&[1, 0, 0, 0, 1, 8][..], MALFORMED_MESSAGE),
            (&[7, 0, 0, 0, 1, 8][..], MALFORMED_MESSAGE),
            (&[0, 0, 0, 0, 1, 8, 0][..], MALFORMED_MESSAGE),
            (&[0, 255, 255, 255, 255, 8][..], REQUEST_TOO_LARGE),
        ] {
            let status = read_one_message(body(bad)).await.unwrap_err();
            assert_eq!(status.code(), Code::InvalidArgument, "{bad:?}");
            assert_eq!(reason(&status), expected, "{bad:?}");
        }
    }
}

/// Wraps a service so that only its methods `methods` are served (the rest
/// answer UNIMPLEMENTED): the peer port exposes of `ClusterAdmin` only what
/// replicas ask each other (founding members' `GetClusterInfo`, membership
/// changes a follower relays to the leader).
pub fn only_methods<S>(inner: S, methods: &'static [&'static str]) -> OnlyMethod<S> {
    OnlyMethod { inner, methods }
}

/// A service behind [`only_methods`].
#[derive(Clone)]
pub struct OnlyMethod<S> {
    inner: S,
    methods: &'static [&'static str],
}

impl<S: NamedService> NamedService for OnlyMethod<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> Service<http::Request<tonic::body::Body>> for OnlyMethod<S>
where
    S: Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<tonic::body::Body>,
            Error = Infallible,
        > + Send,
    S::Future: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, context: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(context)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let allowed = request
            .uri()
            .path()
            .rsplit('/')
            .next()
            .is_some_and(|name| self.methods.contains(&name));
        if !allowed {
            let refusal = tonic::Status::unimplemented(format!(
                "{} is not served on the peer port; use the public listener",
                request.uri().path()
            ));
            return Box::pin(async move { Ok(refusal.into_http()) });
        }
        let response = self.inner.call(request);
        Box::pin(response)
    }
}
